// The `sweep:` section and `--grid` flags, and their expansion into trials.
//
//   sweep:
//     grid: {optimizer.lr: [0.1, 0.01], train.batch_size: [32, 64]}
//     random:                      # `trials` samples, each crossed with the grid
//       trials: 4
//       seed: 0
//       params:
//         optimizer.lr: {log_uniform: [1.0e-4, 1.0e-1]}
//         optimizer.momentum: {uniform: [0.8, 0.99]}
//         train.batch_size: {choice: [32, 64]}
//         model.layers[1].out_features: {int: [16, 64]}
//     seeds: [0, 1]                # every trial once per seed
//     objective: {metric: eval.accuracy, mode: max}   # mode defaults to the metric's better way
//     max_retries: 1
//
// Trials are the product grid x random samples x seeds, in a fixed order, so
// the same sweep always expands to the same trials. Each override of a trial
// knows where its value was written (the sweep section, or a --grid flag).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runner/config/diagnostics.h"
#include "runner/config/node.h"

namespace trainer::config {
struct Config;
}  // namespace trainer::config

namespace trainer::sweep {

// The most trials one sweep may expand to; a larger one is refused before
// anything is allocated or run.
inline constexpr std::uint64_t kMaxTrials = 10000;

struct RandomParam {
  std::string key;
  config::Mark mark;                 // where the parameter is written
  std::string distribution;          // uniform | log_uniform | int | choice
  double low = 0, high = 0;          // an int range's are whole numbers
  std::vector<std::string> choices;  // YAML texts, as grid values
};

struct SweepSpec {
  // Key and values; the same key given twice (in the file and by --grid
  // flags) is one entry with the values of both. A value is YAML text that
  // reads back as the value written: a string that would read as something
  // else (a quoted "1", "x #y") is double-quoted; a list of scalars is a
  // flow list ("[1, 8, 8]").
  std::vector<std::pair<std::string, std::vector<std::string>>> grid;
  std::vector<config::Mark> grid_marks;  // where each grid key was written, parallel to `grid`
  // Where each grid value came from, parallel to `grid`: its key's mark for
  // a value of the sweep section, its flag's (<--grid>) for a --grid value.
  std::vector<std::vector<config::Mark>> grid_value_marks;
  std::int64_t random_trials = 0;
  std::uint64_t random_seed = 0;
  std::vector<RandomParam> random;
  std::vector<std::string> seeds;
  config::Mark seeds_mark;
  std::string metric = "eval.accuracy";
  config::Mark metric_mark;  // where the metric is named (the sweep section's, for the default)
  bool objective_given = false;
  bool maximize = true;  // default: the metric's better way (objective_metrics())
  std::int64_t max_retries = 0;
  // Where errors about the sweep as a whole point: the sweep section, or
  // (without one) the config file, set by the caller; else "<sweep>".
  config::Mark section_mark{"<sweep>", 0, 0};
};

// Where a trial's override comes from: the sweep section's key (its mark in
// the config file) or a --grid flag (file config::kGridFlags).
struct OverrideSource {
  config::Mark mark;
  std::string key_path;  // "sweep.grid.optimizer.lr", "sweep.random.params.x", "sweep.seeds"
};

struct Trial {
  std::string id;                       // "trial-003"
  std::vector<std::string> overrides;   // "optimizer.lr=0.01"
  std::vector<OverrideSource> sources;  // parallel to `overrides`
};

// Whether `source` is a value written in the config file's sweep section.
bool from_sweep_section(const OverrideSource& source);

// Whether `d` points at the value `source` wrote (applied with its mark as
// the override's origin: config::OverrideOrigins).
bool points_at(const config::Diagnostic& d, const OverrideSource& source);

// A config key the sweep varies, where it is written and under which path
// of the sweep section ("sweep.grid.optimizer.lr", "sweep.seeds" for seed).
struct SweptKey {
  std::string key;
  config::Mark mark;
  std::string key_path;
};
std::vector<SweptKey> swept_keys(const SweepSpec& spec);

// Whether a config warning says its setting has no effect ("has no effect
// with optimizer.type: adam ..."), rather than warning of one that acts.
bool says_without_effect(const config::Diagnostic& warning);

// The warnings of trial configs (or of the config with each swept value)
// that a key the sweep varies has no effect under the other values (as
// momentum under adam): one per key, at the sweep's place for it.
// A trial whose value is the default has no warning of its own, and trains
// like the others all the same.
std::vector<config::Diagnostic> swept_without_effect(
    const SweepSpec& spec, const std::vector<config::Diagnostic>& warnings);

// What decides which settings a trial's checks read.
struct ChecksRead {
  bool plans_memory = false;      // on the CPU: the memory plan counts the optimizer's state
  bool seed_splits_data = false;  // data.split holds out samples that `seed` picks
};
ChecksRead checks_read(const config::Config& trial);

// What of the setting `override_text` (KEY=VALUE) the model's and the data's
// checks (config::run_validation_hooks) read, so that values differing only
// in what they do not read share one check (a learning-rate sweep opens the
// data once): "" for the optimizer's scalars, for the rest of the optimizer
// unless the checks plan memory, which reads of it only the state it keeps
// (its type, whether SGD has momentum), and for `seed` unless it splits the
// data; the override itself for anything else (the schedule's steps are
// checked against the run's length).
std::string setting_read_by_checks(const std::string& override_text, ChecksRead checks);

// The command line's overrides (KEY=VALUE) that set a key the sweep varies:
// every trial would replace their value, so `trainer sweep` refuses them
// (errors at the override, naming where the sweep varies the key) and
// `trainer validate` warns of them.
config::Diagnostics overrides_of_swept_keys(const std::vector<std::string>& overrides,
                                            const SweepSpec& spec);

// A config error caused by the sweep section's value `swept` ("KEY=VALUE"),
// as reported at the section: under its key path, "with KEY=VALUE: ..."; at
// `source`'s mark when `d` points there, else (a rule between fields) at
// d's. `same_for_every_value` gets the same error without the value, so that
// an error every value of a key has (a misspelt key) is reported once.
config::Diagnostic swept_value_error(const config::Diagnostic& d, const std::string& swept,
                                     const OverrideSource& source,
                                     std::string& same_for_every_value);

// Reads the `sweep:` node (may be null) and `--grid key=v1,v2` flags. Throws
// config::ConfigError pointing at the offending key, also when the sweep would
// expand to more than kMaxTrials trials, an int range holds no whole number,
// the objective has no better direction and no mode, or a key is swept in
// two of the grid, the random search and the seeds.
SweepSpec parse_sweep(const config::Node& section, const std::vector<std::string>& grid_flags,
                      std::uint64_t default_seed);

// How many trials the spec expands to (saturating at UINT64_MAX).
std::uint64_t trial_count(const SweepSpec& spec);

// The values one --grid flag's text V1,V2,... lists: split at the commas
// outside brackets, braces and quotes, so `[0.1,0.2]` is one value; the
// spaces around each are dropped ("0.1, 0.05" as "0.1,0.05": the same trials
// and the same default directory).
std::vector<std::string> split_grid_values(const std::string& text);

// Throws config::ConfigError when the spec yields no parameter to vary.
std::vector<Trial> expand_trials(const SweepSpec& spec);

}  // namespace trainer::sweep
