// Runs a sweep's trials as child processes of this same `trainer` binary
// (/proc/self/exe), so a crashing trial cannot take the sweep down. Up to
// `parallel` at once, each with its share of the CPU cores (backend.threads)
// or its own GPU, unless the trial sets its own. Finished trials are skipped, interrupted ones
// resumed from their checkpoints (`run --resume`), failed ones retried up to max_retries;
// trials.json, trials.csv and results.md are rewritten as each trial ends.
// SIGINT / SIGTERM: stop every running trial (each checkpoints) and exit 130 / 143.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runner/sweep/sweep_spec.h"

namespace trainer::sweep {

// The most trials `--parallel` runs at once (each is a process of its own).
inline constexpr std::int64_t kMaxParallelTrials = 1024;

// How a trial starts: from its own config, resolved when the sweep started
// (editing the config file meanwhile changes no trial), and with what the
// sweep may choose for it when trials share the machine.
struct TrialLaunch {
  std::string config_path;         // DIR/configs/<trial id>.yaml
  bool sweep_sets_threads = true;  // its backend.threads is 0: each gets a share of the CPUs
  bool sweep_sets_gpu = true;      // its devices.gpus are the config's: each gets one of them
};

struct SweepJob {
  std::string config_path;
  std::vector<std::string> overrides;  // applied to every trial, before the trial's own
  std::string dir;                     // the sweep directory
  SweepSpec spec;
  std::vector<Trial> trials;
  std::vector<TrialLaunch> launches;  // parallel to `trials`
  std::int64_t parallel = 1;          // trials at once: 1 to kMaxParallelTrials
  std::vector<std::int64_t> gpus;     // the config's GPUs: one per running trial
};

// Returns the exit code: 0 every trial done, 1 some failed or none of those
// done recorded the objective (nothing to rank), 130 / 143 when stopped.
int run_sweep(const SweepJob& job);

}  // namespace trainer::sweep
