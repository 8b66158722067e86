// A one-line progress bar on a terminal (redrawn in place at most 5 times a
// second); silent when stdout is a file or a pipe, so logs stay clean.
#pragma once

#include <chrono>
#include <cstdint>

namespace trainer::train {

class ProgressBar {
 public:
  // `enabled`: this process may draw (only the root rank of a job does).
  explicit ProgressBar(bool enabled = true);
  // Redraws "epoch E [=====>    ] step/total loss L" if enough time has passed.
  void update(std::int64_t epoch, std::int64_t step, std::int64_t total, double loss);
  // Whether update() would redraw now (so the caller fetches the loss only then).
  bool due() const;
  // Erases the bar (before a log line is printed, and at the end).
  void clear();
  bool enabled() const { return enabled_; }

 private:
  bool enabled_ = false;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace trainer::train
