// Keras-style progress output for fit/evaluate. On a terminal one line is redrawn in place:
//   123/469 ━━━━━╸━━━━━━━━━━━━━━ 1s 5ms/step - ETA 2s - accuracy: 0.8012 - loss: 0.5634
// When output does not reach a terminal (a log file, CI, mpirun's output redirected: see
// training/progress_output.h), only the finished line of each epoch is printed, so logs stay
// readable.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

namespace keras {

class ProgressBar {
 public:
  // `verbose` 1 redraws a bar in place where the output reaches a terminal; 2 (or 1 where it
  // does not) prints only each finished line.
  ProgressBar(std::int64_t total_steps, int verbose, std::FILE* stream = stdout);
  // Whether a bar of this `verbose` redraws in place on `stream` (and so shows every step's
  // values), rather than printing only finished lines.
  static bool redraws_in_place(int verbose, std::FILE* stream = stdout);
  // Reports that `step` steps are done, with the running values to show.
  void update(std::int64_t step, const std::map<std::string, double>& values, bool finished);

 private:
  std::string render(std::int64_t step, const std::map<std::string, double>& values,
                     bool finished) const;
  std::int64_t total_steps_;
  std::FILE* stream_;
  bool interactive_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

// "3s", "1:05", "1:02:03" as Keras formats durations.
std::string format_duration(double seconds);

}  // namespace keras
