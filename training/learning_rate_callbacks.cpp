// LearningRateScheduler and ReduceLROnPlateau, following keras/src/callbacks/ line by line in
// their rules (when a reduction happens, cooldown, min_lr, the messages they print).
#include "training/learning_rate_callbacks.h"

#include <cmath>
#include <cstdio>

#include "distribution/runtime/runtime.h"
#include "engine/errors.h"
#include "training/model.h"

namespace keras {

LearningRateScheduler::LearningRateScheduler(Schedule schedule, bool verbose)
    : schedule_(std::move(schedule)), verbose_(verbose) {
  if (!schedule_) throw ValueError("LearningRateScheduler: schedule must be a function");
}

void LearningRateScheduler::on_epoch_begin(Model& model, int epoch) {
  optimizers::Optimizer& optimizer = model.optimizer();
  double learning_rate = schedule_(epoch, optimizer.learning_rate());
  if (!std::isfinite(learning_rate) || learning_rate < 0) {
    throw ValueError(str("LearningRateScheduler: schedule(", epoch, ", ", optimizer.learning_rate(),
                         ") returned ", learning_rate, "; a learning rate must be finite and >= 0"));
  }
  optimizer.set_learning_rate(learning_rate);
  if (verbose_ && distribution::process_id() == 0) {
    std::printf("\nEpoch %d: LearningRateScheduler setting learning rate to %g.\n", epoch + 1,
                learning_rate);
  }
}

void LearningRateScheduler::on_epoch_end(Model& model, int, Logs& logs) {
  logs["learning_rate"] = model.optimizer().learning_rate();
}

ReduceLROnPlateau::ReduceLROnPlateau() : ReduceLROnPlateau(Options{}) {}

ReduceLROnPlateau::ReduceLROnPlateau(Options options) : options_(std::move(options)) {
  if (!(options_.factor < 1.0)) {
    throw ValueError(str("ReduceLROnPlateau does not support a factor >= 1.0. Received factor=",
                         options_.factor));
  }
  if (!(options_.factor > 0.0)) {
    throw ValueError(str("ReduceLROnPlateau: factor must be > 0, got ", options_.factor));
  }
  if (options_.patience < 0 || options_.cooldown < 0) {
    throw ValueError(str("ReduceLROnPlateau: patience and cooldown must be >= 0, got ",
                         options_.patience, " and ", options_.cooldown));
  }
  if (!(options_.min_lr >= 0.0)) {
    throw ValueError(str("ReduceLROnPlateau: min_lr must be >= 0, got ", options_.min_lr));
  }
  // Keras: "min" unless the mode is "max", or "auto" and the name has "acc" in it.
  if (options_.mode != "auto" && options_.mode != "min" && options_.mode != "max") {
    if (distribution::process_id() == 0) {
      std::fprintf(stderr, "warning: Learning rate reduction mode %s is unknown, fallback to auto "
                           "mode.\n", options_.mode.c_str());
    }
    options_.mode = "auto";
  }
  const bool maximize = options_.mode == "max" ||
                        (options_.mode == "auto" && options_.monitor.find("acc") != std::string::npos);
  best_ = MonitoredBest(maximize, options_.min_delta);
}

void ReduceLROnPlateau::on_train_begin(Model&) {
  best_.reset();
  wait_ = 0;
  cooldown_counter_ = 0;
}

void ReduceLROnPlateau::on_epoch_end(Model& model, int epoch, Logs& logs) {
  optimizers::Optimizer& optimizer = model.optimizer();
  logs["learning_rate"] = optimizer.learning_rate();
  auto found = logs.find(options_.monitor);
  if (found == logs.end()) {
    if (distribution::process_id() == 0) {
      std::string available;
      for (const auto& [name, value] : logs) available += (available.empty() ? "" : ",") + name;
      std::fprintf(stderr, "warning: Learning rate reduction is conditioned on metric `%s` which "
                           "is not available. Available metrics are: %s.\n",
                   options_.monitor.c_str(), available.c_str());
    }
    return;
  }
  const double current = found->second;
  if (cooldown_counter_ > 0) {
    cooldown_counter_ -= 1;
    wait_ = 0;
  }
  if (best_.improved(current)) {
    best_.set(current);
    wait_ = 0;
  } else if (cooldown_counter_ == 0) {  // as Keras: asked after this epoch's countdown

    wait_ += 1;
    if (wait_ >= options_.patience) {
      const double old_learning_rate = optimizer.learning_rate();
      // Keras compares against min_lr as a float32.
      if (old_learning_rate > static_cast<double>(static_cast<float>(options_.min_lr))) {
        const double new_learning_rate =
            std::max(old_learning_rate * options_.factor, options_.min_lr);
        optimizer.set_learning_rate(new_learning_rate);
        if (options_.verbose && distribution::process_id() == 0) {
          std::printf("\nEpoch %d: ReduceLROnPlateau reducing learning rate to %g.\n", epoch + 1,
                      new_learning_rate);
        }
        cooldown_counter_ = options_.cooldown;
        wait_ = 0;
      }
    }
  }
}

}  // namespace keras
