// EarlyStopping, ModelCheckpoint and TerminateOnNaN.
#include "training/callbacks.h"

#include <cmath>
#include <cstdio>
#include <regex>

#include "engine/errors.h"
#include "distribution/runtime/runtime.h"
#include "training/model.h"
#include "saving/weight_files.h"

namespace keras {

std::string resolve_mode(const std::string& mode, const std::string& monitor) {
  if (mode == "min" || mode == "max") return mode;
  if (mode != "auto") {
    throw ValueError(str("mode must be 'auto', 'min' or 'max', got '", mode, "'"));
  }
  bool is_accuracy = monitor.find("acc") != std::string::npos ||
                     monitor.find("auc") != std::string::npos;
  return is_accuracy ? "max" : "min";
}

MonitoredBest::MonitoredBest(bool maximize, double min_delta)
    : maximize_(maximize), min_delta_(std::abs(min_delta)), best_(0.0) {
  reset();
}

void MonitoredBest::reset() { best_ = maximize_ ? -INFINITY : INFINITY; }

bool MonitoredBest::improved(double value) const {
  return maximize_ ? value - min_delta_ > best_ : value + min_delta_ < best_;
}

EarlyStopping::EarlyStopping() : EarlyStopping(Options{}) {}

EarlyStopping::EarlyStopping(Options options) : options_(std::move(options)) {
  if (options_.patience < 0) {
    throw ValueError(str("EarlyStopping: patience must be >= 0, got ", options_.patience));
  }
  options_.min_delta = std::abs(options_.min_delta);
  best_ = MonitoredBest(resolve_mode(options_.mode, options_.monitor) == "max", options_.min_delta);
}

void EarlyStopping::on_train_begin(Model&) {
  wait_ = 0;
  stopped_epoch_ = -1;
  best_epoch_ = -1;
  best_.reset();
  best_weights_.clear();
}

void EarlyStopping::on_epoch_end(Model& model, int epoch, Logs& logs) {
  auto found = logs.find(options_.monitor);
  if (found == logs.end()) {
    std::string available;
    for (const auto& [name, value] : logs) available += (available.empty() ? "" : ", ") + name;
    throw ValueError(str("EarlyStopping monitors '", options_.monitor,
                         "', which is not in the logs; available: ", available,
                         " (val_* needs validation_data)"));
  }
  if (epoch < options_.start_from_epoch) return;
  wait_ += 1;
  if (best_.improved(found->second)) {
    best_.set(found->second);
    best_epoch_ = epoch;
    wait_ = 0;
    if (options_.restore_best_weights) {
      best_weights_.clear();
      for (const Tensor& weight : model.weights()) best_weights_.push_back(weight.clone());
    }
    return;
  }
  if (wait_ >= options_.patience && epoch > 0) {
    stopped_epoch_ = epoch;
    model.stop_training = true;
  }
}

void EarlyStopping::on_train_end(Model& model) {
  if (stopped_epoch_ >= 0 && options_.restore_best_weights && !best_weights_.empty()) {
    std::vector<Tensor> weights = model.weights();
    for (std::size_t i = 0; i < weights.size() && i < best_weights_.size(); ++i) {
      weights[i].assign(best_weights_[i]);
    }
  }
}

ModelCheckpoint::ModelCheckpoint(std::string filepath)
    : ModelCheckpoint(std::move(filepath), Options{}) {}

ModelCheckpoint::ModelCheckpoint(std::string filepath, Options options)
    : filepath_(std::move(filepath)), options_(std::move(options)) {
  if (!weight_files::has_weights_suffix(filepath_)) {
    throw ValueError(str("ModelCheckpoint: filepath must end in '.weights.h5' or '.safetensors', got '",
                         filepath_, "'"));
  }
  best_ = MonitoredBest(resolve_mode(options_.mode, options_.monitor) == "max");
  path_for_epoch(0);  // rejects malformed placeholders now rather than after an epoch
}

std::string ModelCheckpoint::path_for_epoch(int epoch) const {
  static const std::regex placeholder(R"(\{epoch(?::0?(\d+)d)?\})");
  std::string result;
  auto begin = std::sregex_iterator(filepath_.begin(), filepath_.end(), placeholder);
  std::size_t last = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    result += filepath_.substr(last, it->position() - last);
    char number[32];
    int width = (*it)[1].matched ? std::stoi((*it)[1].str()) : 0;
    std::snprintf(number, sizeof number, "%0*d", width, epoch + 1);
    result += number;
    last = it->position() + it->length();
  }
  result += filepath_.substr(last);
  if (result.find('{') != std::string::npos) {
    throw ValueError(str("ModelCheckpoint: filepath '", filepath_,
                         "' has a placeholder other than {epoch} or {epoch:0Nd}"));
  }
  return result;
}

void ModelCheckpoint::on_epoch_end(Model& model, int epoch, Logs& logs) {
  std::string path = path_for_epoch(epoch);
  if (options_.save_best_only) {
    auto found = logs.find(options_.monitor);
    if (found == logs.end()) {
      throw ValueError(str("ModelCheckpoint monitors '", options_.monitor,
                           "', which is not in the logs (val_* needs validation_data)"));
    }
    bool better = best_.improved(found->second);
    if (!better) return;
    if (options_.verbose) {
      std::printf("Epoch %d: %s improved to %.5f, saving model to %s\n", epoch + 1,
                  options_.monitor.c_str(), found->second, path.c_str());
    }
    best_.set(found->second);
  }
  model.save_weights(path);
}

void TerminateOnNaN::on_train_batch_end(Model& model, std::int64_t batch, const Logs& logs) {
  auto found = logs.find("loss");
  if (found == logs.end() || std::isfinite(found->second)) return;
  if (distribution::process_id() == 0) {
    std::printf("Batch %lld: Invalid loss, terminating training\n", static_cast<long long>(batch));
    std::fflush(stdout);
  }
  stopped_batch_ = batch;
  model.stop_training = true;
}

}  // namespace keras
