// Keras' BackupAndRestore: keeps the whole training state in `backup_dir` so that a run killed
// mid-training (SIGKILL, a lost node) and started again the same way goes on from the last
// backup and ends with the weights an uninterrupted run would have had.
//
// The backup is one safetensors file, written atomically: the full weights (gathered under
// ModelParallel, like save_weights), the optimizer's slots (full, likewise) and step count,
// the learning rate, and in its metadata fit()'s position (epoch, batch, the shuffling
// generator, the epoch's loss and metric totals so far), the process-wide seed generator and
// each layer's random counters (Dropout). Keras resumes at the start of the epoch it saved;
// with save_freq in batches this resumes at the batch saved.
//
// Under a distribution every process takes part: process 0 writes, every process reads, so
// `backup_dir` must be a directory all processes see (a shared filesystem across machines).
// Not saved, as in Keras: other callbacks' state (EarlyStopping's patience, ReduceLROnPlateau's
// wait), which start afresh on resume. List it after callbacks that change the learning rate
// in on_epoch_end (ReduceLROnPlateau), so the backup holds the changed rate. A backup of
// another model, or of a fit() over other samples or batch size, is refused.
#pragma once
#include <cstdint>
#include <string>
#include <variant>

#include "training/callbacks.h"

namespace keras {

class BackupAndRestore : public Callback {
 public:
  struct Options {
    // "epoch": at the end of each epoch; an integer N > 0: every N batches.
    std::variant<std::string, std::int64_t> save_freq = std::string("epoch");
    // Keep the previous backup too, and fall back to it when the latest cannot be read.
    bool double_checkpoint = false;
    // Remove the backup when fit() ends (training finished or was stopped by a callback).
    bool delete_checkpoint = true;
  };
  explicit BackupAndRestore(std::string backup_dir);
  BackupAndRestore(std::string backup_dir, Options options);

  void on_train_begin(Model& model) override;
  void on_train_batch_end(Model& model, std::int64_t batch, const Logs& logs) override;
  // A backup taken after a batch holds the epoch's totals so far, which are read with the logs.
  bool needs_batch_logs(std::int64_t batch) const override;
  void on_epoch_end(Model& model, int epoch, Logs& logs) override;
  void on_train_end(Model& model) override;

  // The file the latest backup is in (backup_dir/latest.safetensors).
  std::string latest_path() const;
  std::string previous_path() const;
  // Whether the last on_train_begin restored a backup, and from where.
  bool restored() const { return restored_; }
  int restored_epoch() const { return restored_epoch_; }
  std::int64_t restored_step() const { return restored_step_; }

 private:
  void save(Model& model);

  std::string backup_dir_;
  Options options_;
  std::int64_t save_every_batches_ = 0;  // 0: at epoch ends
  std::int64_t batches_since_save_ = 0;
  bool restored_ = false;
  int restored_epoch_ = -1;
  std::int64_t restored_step_ = -1;
};

}  // namespace keras
