// A one-line progress bar on a terminal (redrawn in place at most 5 times a
// second); silent when stdout is a file or a pipe, so logs stay clean. And the
// time left of a run as the log line and the bar show it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace trainer::train {

// The variable trainer's own launcher sets for its ranks: "1" when its
// stdout is a terminal, else "0".
inline constexpr const char* kStdoutTerminalVariable = "TRAINER_STDOUT_TERMINAL";
// The variable trainer's own launcher sets for its ranks: a file the root
// rank writes its run directory's path into, so that the launcher can record
// a job that mpirun ended before the root could (a rank that failed alone).
inline constexpr const char* kRunDirNoteVariable = "TRAINER_RUN_DIR_NOTE";
// Appended to that file's name: the file where each rank's error report
// keeps its first line, "[rank N] error: ...", for the launcher to record.
inline constexpr const char* kRankErrorsSuffix = ".errors";

// Whether this process's stdout reaches a terminal. A rank's stdout is its
// launcher's pipe or pty, which says nothing of where the output ends up:
// a rank trusts kStdoutTerminalVariable, and without it draws nothing.
bool stdout_is_terminal(bool rank_of_job);

// A duration as the log line shows it: "42s", "3m07s", "2h05m", "3d04h".
std::string short_duration(double seconds);

// The time left of a run that took `elapsed` seconds for its `done` steps and
// has `left` to go, at the same pace (evaluations and checkpoints included);
// negative when nothing is done yet.
double time_left(double elapsed, std::int64_t done, std::int64_t left);

class ProgressBar {
 public:
  // `enabled`: this process may draw (only the root rank of a job does);
  // it draws when its output reaches a terminal (stdout_is_terminal).
  ProgressBar(bool enabled, bool rank_of_job);
  // Redraws "epoch E [=====>    ] step/total loss L eta T" if enough time has
  // passed (no eta while `seconds_left` is negative).
  void update(std::int64_t epoch, std::int64_t step, std::int64_t total, double loss,
              double seconds_left);
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
