// What the sweep knows about one trial: its overrides, run directory, status
// (pending, running, done, failed, interrupted), failed runs, objective, the
// steps it took (and whether early stopping ended it) and the error of its
// last failure. Kept in <sweep>/trials.json between invocations.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runner/sweep/sweep_spec.h"

namespace trainer::sweep {

struct TrialRecord {
  Trial trial;
  std::string run_dir;
  std::string status = "pending";
  std::int64_t failures = 0;  // runs that ended in failure (interruptions do not count)
  std::optional<double> objective;
  std::int64_t steps = 0;      // optimizer steps the finished run took
  bool early_stopped = false;  // train.early_stopping ended it before its last step
  std::string error;
};

// When the trial's run directory holds a completed run: fills in its
// objective (an eval metric's best value over the run's evaluations, in the
// objective's direction, as keep_best would keep it; a train metric's last
// logged value), the steps it took and whether early stopping ended it.
bool read_completed_run(const SweepSpec& spec, TrialRecord& record);

// When the run directory's summary.json says the run stopped on a signal
// with its checkpoint written (status "interrupted"): it resumes.
bool run_was_interrupted(const std::string& run_dir);

// The objective metrics a completed run's summary holds ("eval.loss", ...).
std::vector<std::string> summary_metrics(const std::string& run_dir);

// Restores status, failures and errors saved by an earlier invocation (by
// trial id; a state file that counts them as "attempts" is read too). A
// damaged file (not JSON, or a value of the wrong type) is no error: what
// cannot be read is ignored, as the run directories say which trials
// finished and their results; returns a warning for each such thing, naming
// the file, the trial and the field.
std::vector<std::string> load_trial_state(const std::string& path,
                                          std::vector<TrialRecord>& records);
void save_trial_state(const std::string& path, const std::vector<TrialRecord>& records);

// The finished trial with the best objective (the first of equals), or null
// when no finished trial recorded it; and its line on stdout: "trial-002:
// eval.accuracy 0.7522 (optimizer.lr=0.05)".
const TrialRecord* best_trial(const std::vector<TrialRecord>& records, const SweepSpec& spec);
std::string best_trial_text(const TrialRecord& best, const SweepSpec& spec);

// trials.csv (one row per trial, a column per swept key) and results.md (a
// Markdown table sorted by the objective, best first; failures last with their
// error; a line saying so when no finished trial recorded the objective).
void write_trials_csv(const std::string& path, const std::vector<TrialRecord>& records);
void write_results_table(const std::string& path, const std::vector<TrialRecord>& records,
                         const SweepSpec& spec);

}  // namespace trainer::sweep
