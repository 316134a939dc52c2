// Progress bar rendering.
#include "training/progress_bar.h"

#include <cmath>

#include "training/progress_output.h"

namespace keras {

std::string format_duration(double seconds) {
  auto total = static_cast<long>(std::lround(seconds));
  char text[32];
  if (total < 60) {
    std::snprintf(text, sizeof text, "%lds", total);
  } else if (total < 3600) {
    std::snprintf(text, sizeof text, "%ld:%02ld", total / 60, total % 60);
  } else {
    std::snprintf(text, sizeof text, "%ld:%02ld:%02ld", total / 3600, (total / 60) % 60, total % 60);
  }
  return text;
}

bool ProgressBar::redraws_in_place(int verbose, std::FILE* stream) {
  return verbose == 1 && progress_reaches_terminal(stream);
}

ProgressBar::ProgressBar(std::int64_t total_steps, int verbose, std::FILE* stream)
    : total_steps_(total_steps), stream_(stream),
      interactive_(redraws_in_place(verbose, stream)),
      start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

std::string ProgressBar::render(std::int64_t step, const std::map<std::string, double>& values,
                                bool finished) const {
  constexpr int kWidth = 20;
  double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double fraction = total_steps_ > 0 ? static_cast<double>(step) / double(total_steps_) : 1.0;
  int filled = static_cast<int>(fraction * kWidth);
  std::string bar;
  for (int i = 0; i < kWidth; ++i) bar += i < filled ? "━" : (i == filled && !finished ? "╸" : "─");
  int digits = static_cast<int>(std::to_string(total_steps_).size());
  char head[96];
  std::snprintf(head, sizeof head, "%*lld/%lld ", digits, static_cast<long long>(step),
                static_cast<long long>(total_steps_));
  std::string line = std::string(head) + bar + " " + format_duration(elapsed);
  if (step > 0) {
    double per_step = elapsed / double(step);
    char rate[48];
    if (per_step >= 1.0) {
      std::snprintf(rate, sizeof rate, " %.0fs/step", per_step);
    } else if (per_step >= 1e-3) {
      std::snprintf(rate, sizeof rate, " %.0fms/step", per_step * 1e3);
    } else {
      std::snprintf(rate, sizeof rate, " %.0fus/step", per_step * 1e6);
    }
    line += rate;
    if (!finished) line += " - ETA " + format_duration(per_step * double(total_steps_ - step));
  }
  for (const auto& [name, value] : values) {
    char entry[128];
    std::snprintf(entry, sizeof entry, " - %s: %.4f", name.c_str(), value);
    line += entry;
  }
  return line;
}

void ProgressBar::update(std::int64_t step, const std::map<std::string, double>& values,
                         bool finished) {
  auto now = std::chrono::steady_clock::now();
  if (interactive_) {
    // Redraw at most every 50 ms: printing every step of a 1 ms step would cost more than it shows.
    if (!finished && now - last_draw_ < std::chrono::milliseconds(50) && step != 1) return;
    last_draw_ = now;
    std::fprintf(stream_, "\r\033[K%s%s", render(step, values, finished).c_str(),
                 finished ? "\n" : "");
    std::fflush(stream_);
  } else if (finished) {
    std::fprintf(stream_, "%s\n", render(step, values, finished).c_str());
    std::fflush(stream_);
  }
}

}  // namespace keras
