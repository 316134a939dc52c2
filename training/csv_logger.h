// Keras' CSVLogger: one row per epoch of the logs ("epoch" then the log names in sorted
// order), written and flushed as each epoch ends, so a crashed run keeps the rows it reached.
// scripts/plot_history.py draws the file. On several processes process 0 writes (the logs are
// global, the same on every process).
#pragma once
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "training/callbacks.h"

namespace keras {

class CSVLogger : public Callback {
 public:
  bool needs_batch_logs(std::int64_t) const override { return false; }
  // `separator` is one character, as Python's csv module needs. With `append`, rows go after
  // those of an existing file (the header is written only into an empty one): what a run
  // resumed by BackupAndRestore wants.
  explicit CSVLogger(std::string filename, char separator = ',', bool append = false);

  void on_train_begin(Model& model) override;
  void on_epoch_end(Model& model, int epoch, Logs& logs) override;
  void on_train_end(Model& model) override;

  const std::string& filename() const { return filename_; }

 private:
  void write_row(int epoch, const Logs& logs);
  std::string filename_;
  char separator_;
  bool append_;
  bool write_header_ = true;
  std::vector<std::string> keys_;
  std::shared_ptr<std::FILE> file_;
};

}  // namespace keras
