// A one-line progress bar on a terminal (redrawn in place at most 5 times a
// second); silent when stdout is a file or a pipe, so logs stay clean.
#pragma once

#include <chrono>
#include <cstdint>

namespace trainer::train {

// The variable trainer's own launcher sets for its ranks: "1" when its
// stdout is a terminal, else "0".
inline constexpr const char* kStdoutTerminalVariable = "TRAINER_STDOUT_TERMINAL";

// Whether this process's stdout reaches a terminal. A rank's stdout is its
// launcher's pipe or pty, which says nothing of where the output ends up:
// a rank trusts kStdoutTerminalVariable, and without it draws nothing.
bool stdout_is_terminal(bool rank_of_job);

class ProgressBar {
 public:
  // `enabled`: this process may draw (only the root rank of a job does);
  // it draws when its output reaches a terminal (stdout_is_terminal).
  ProgressBar(bool enabled, bool rank_of_job);
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
