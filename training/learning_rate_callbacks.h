// Callbacks that change the optimizer's learning rate, with Keras' names, arguments and rules:
// LearningRateScheduler (a function of the epoch) and ReduceLROnPlateau (divide it when a
// metric stops improving). Both add "learning_rate" to each epoch's logs, as Keras 3 does, so
// History and CSVLogger record it. Under DataParallel the logs are global, so every process
// makes the same change.
#pragma once
#include <functional>
#include <string>

#include "training/callbacks.h"

namespace keras {

class LearningRateScheduler : public Callback {
 public:
  bool needs_batch_logs(std::int64_t) const override { return false; }
  // schedule(epoch, current learning rate) -> the learning rate for this epoch (0-based).
  using Schedule = std::function<double(int epoch, double learning_rate)>;
  explicit LearningRateScheduler(Schedule schedule, bool verbose = false);
  void on_epoch_begin(Model& model, int epoch) override;
  void on_epoch_end(Model& model, int epoch, Logs& logs) override;

 private:
  Schedule schedule_;
  bool verbose_;
};

class ReduceLROnPlateau : public Callback {
 public:
  bool needs_batch_logs(std::int64_t) const override { return false; }
  struct Options {
    std::string monitor = "val_loss";
    double factor = 0.1;       // new_lr = lr * factor; must be < 1
    int patience = 10;         // epochs without improvement before a reduction
    bool verbose = false;
    std::string mode = "auto";  // "min", "max", or from the monitored name
    double min_delta = 1e-4;    // the least change that counts as an improvement
    int cooldown = 0;           // epochs to wait after a reduction before counting again
    double min_lr = 0.0;        // lower bound on the learning rate
  };
  ReduceLROnPlateau();
  explicit ReduceLROnPlateau(Options options);
  void on_train_begin(Model& model) override;
  void on_epoch_end(Model& model, int epoch, Logs& logs) override;
  int wait() const { return wait_; }

 private:
  Options options_;
  MonitoredBest best_;
  int wait_ = 0;
  int cooldown_counter_ = 0;
};

}  // namespace keras
