// Callbacks for fit(): the Callback interface, EarlyStopping, ModelCheckpoint and
// TerminateOnNaN, with Keras' arguments and defaults.
#pragma once
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace keras {

class Model;
using Logs = std::map<std::string, double>;

class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin(Model&) {}
  virtual void on_train_end(Model&) {}
  virtual void on_epoch_begin(Model&, int /*epoch*/) {}
  // `logs` may be added to, as in Keras (the learning-rate callbacks add "learning_rate");
  // callbacks after this one and the History returned by fit() see the additions.
  virtual void on_epoch_end(Model&, int /*epoch*/, Logs& /*logs*/) {}
  virtual void on_train_batch_end(Model&, std::int64_t /*batch*/, const Logs& /*logs*/) {}
  // Whether on_train_batch_end(batch) reads its logs. Reading them makes the host wait for the
  // device (and, under data parallelism, sums over the processes), so fit() reads them only
  // after the batches some callback asks for, every batch while a progress bar is drawn in
  // place, and after each epoch's last batch; at other batches every callback gets empty logs.
  // The default asks at every batch, as a callback written for Keras expects: answer false
  // where on_train_batch_end does not read them. Under data parallelism the processes agree
  // (a callback on process 0 only is fine): the logs are read where any process asks.
  virtual bool needs_batch_logs(std::int64_t /*batch*/) const { return true; }
};
using CallbackPtr = std::shared_ptr<Callback>;

// "min" for losses and errors, "max" for accuracies; "auto" picks from the monitored name.
std::string resolve_mode(const std::string& mode, const std::string& monitor);

// The best value so far of a monitored log and whether a new one improves on it by more than
// min_delta (what EarlyStopping and ReduceLROnPlateau both ask; Keras' MonitorCallback).
class MonitoredBest {
 public:
  MonitoredBest(bool maximize = false, double min_delta = 0.0);
  void reset();  // no value seen yet: anything finite improves
  bool improved(double value) const;
  void set(double value) { best_ = value; }
  double best() const { return best_; }

 private:
  bool maximize_;
  double min_delta_;
  double best_;
};

// Stops training when `monitor` has not improved by more than min_delta for `patience`
// epochs; optionally restores the weights of the best epoch.
class EarlyStopping : public Callback {
 public:
  bool needs_batch_logs(std::int64_t) const override { return false; }
  struct Options {
    std::string monitor = "val_loss";
    double min_delta = 0.0;
    int patience = 0;
    std::string mode = "auto";
    bool restore_best_weights = false;
    int start_from_epoch = 0;
  };
  EarlyStopping();
  explicit EarlyStopping(Options options);
  void on_train_begin(Model& model) override;
  void on_epoch_end(Model& model, int epoch, Logs& logs) override;
  void on_train_end(Model& model) override;
  int stopped_epoch() const { return stopped_epoch_; }
  int best_epoch() const { return best_epoch_; }

 private:
  Options options_;
  MonitoredBest best_;
  int wait_ = 0;
  int stopped_epoch_ = -1;
  int best_epoch_ = -1;
  std::vector<Tensor> best_weights_;
};

// Saves the weights (safetensors) after each epoch, or only when `monitor` improved.
// `filepath` may contain "{epoch}" or "{epoch:02d}" (1-based epoch) and must end in
// ".safetensors".
class ModelCheckpoint : public Callback {
 public:
  bool needs_batch_logs(std::int64_t) const override { return false; }
  struct Options {
    std::string monitor = "val_loss";
    bool save_best_only = false;
    std::string mode = "auto";
    bool verbose = false;
  };
  explicit ModelCheckpoint(std::string filepath);
  ModelCheckpoint(std::string filepath, Options options);
  void on_epoch_end(Model& model, int epoch, Logs& logs) override;
  // The path for a 0-based epoch.
  std::string path_for_epoch(int epoch) const;

 private:
  std::string filepath_;
  Options options_;
  MonitoredBest best_;
};

// Stops training at the end of the first batch whose loss is NaN or infinite, printing
// "Batch <n>: Invalid loss, terminating training" (Keras' TerminateOnNaN). Under DataParallel
// the loss in the logs is the global one, so every process stops at the same batch.
class TerminateOnNaN : public Callback {
 public:
  void on_train_batch_end(Model& model, std::int64_t batch, const Logs& logs) override;
  // The batch that stopped training, or -1.
  std::int64_t stopped_batch() const { return stopped_batch_; }

 private:
  std::int64_t stopped_batch_ = -1;
};

}  // namespace keras
