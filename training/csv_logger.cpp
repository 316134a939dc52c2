// CSVLogger with Keras' columns and rules: keys fixed at the first epoch (sorted, plus the
// val_ twins of each when validation has not run yet), "NA" for a key an epoch lacks, values
// as the shortest text that reads back to the same double (std::to_chars: "1" and "1e-04"
// where Python would write "1.0" and "0.0001"; both read back to the same double).
#include "training/csv_logger.h"

#include <charconv>
#include <cmath>
#include <filesystem>

#include "distribution/runtime/runtime.h"
#include "distribution/runtime/shared_outcome.h"
#include "engine/errors.h"

namespace keras {
namespace {

std::string shortest(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char text[64];
  auto [end, error] = std::to_chars(text, text + sizeof text, value);
  (void)error;
  return std::string(text, end);
}

}  // namespace

CSVLogger::CSVLogger(std::string filename, char separator, bool append)
    : filename_(std::move(filename)), separator_(separator), append_(append) {
  if (filename_.empty()) throw ValueError("CSVLogger: filename must not be empty");
  if (separator_ == '\n' || separator_ == '\r' || separator_ == '"' || separator_ == '\0') {
    throw ValueError(str("CSVLogger: separator must be a printable character other than '\"', "
                         "got character code ", static_cast<int>(separator_)));
  }
}

void CSVLogger::on_train_begin(Model&) {
  keys_.clear();
  file_.reset();
  // Process 0 writes when processes train together; every process learns whether it could
  // (distribution/runtime/shared_outcome.h).
  if (distribution::processes_train_together() && distribution::process_id() != 0) {
    distribution::agree_on_failure(nullptr, str("CSVLogger: opening '", filename_, "'"));
    return;
  }
  write_header_ = true;
  if (append_) {
    std::error_code error;
    write_header_ = !std::filesystem::exists(filename_, error) ||
                    std::filesystem::file_size(filename_, error) == 0;
  }
  std::FILE* file = std::fopen(filename_.c_str(), append_ ? "a" : "w");
  std::exception_ptr failure;
  if (file == nullptr) {
    failure = std::make_exception_ptr(
        FileNotFoundError(str("CSVLogger: cannot open '", filename_, "' for writing")));
  } else {
    file_.reset(file, std::fclose);
  }
  distribution::agree_on_failure(failure, str("CSVLogger: opening '", filename_, "'"));
}

void CSVLogger::on_epoch_end(Model&, int epoch, Logs& logs) {
  std::exception_ptr failure;
  if (file_) {
    try {
      write_row(epoch, logs);
    } catch (const Error&) {
      failure = std::current_exception();
    }
  }
  distribution::agree_on_failure(failure, str("CSVLogger: writing '", filename_, "'"));
}

void CSVLogger::write_row(int epoch, const Logs& logs) {
  if (keys_.empty()) {
    for (const auto& [key, value] : logs) keys_.push_back(key);  // std::map: sorted
    bool has_validation = false;
    for (const std::string& key : keys_) has_validation = has_validation || key.rfind("val_", 0) == 0;
    // As Keras: when validation runs later than the first epoch, its columns exist from the
    // start.
    if (!has_validation && !keys_.empty()) {
      std::size_t count = keys_.size();
      for (std::size_t i = 0; i < count; ++i) keys_.push_back("val_" + keys_[i]);
    }
  }
  std::string line;
  if (write_header_) {
    line = "epoch";
    for (const std::string& key : keys_) line += separator_ + key;
    line += "\n";
    write_header_ = false;
  }
  line += std::to_string(epoch);
  for (const std::string& key : keys_) {
    auto found = logs.find(key);
    line += separator_;
    line += found == logs.end() ? std::string("NA") : shortest(found->second);
  }
  line += "\n";
  if (std::fputs(line.c_str(), file_.get()) < 0 || std::fflush(file_.get()) != 0) {
    throw Error(str("CSVLogger: writing to '", filename_, "' failed"));
  }
}

void CSVLogger::on_train_end(Model&) { file_.reset(); }

}  // namespace keras
