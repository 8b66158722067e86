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
//     objective: {metric: eval.accuracy, mode: max}
//     max_retries: 1
//
// Trials are the product grid x random samples x seeds, in a fixed order, so
// the same sweep always expands to the same trials.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runner/config/node.h"

namespace trainer::sweep {

struct RandomParam {
  std::string key;
  std::string distribution;  // uniform | log_uniform | int | choice
  double low = 0, high = 0;
  std::vector<std::string> choices;
};

struct SweepSpec {
  std::vector<std::pair<std::string, std::vector<std::string>>> grid;
  std::int64_t random_trials = 0;
  std::uint64_t random_seed = 0;
  std::vector<RandomParam> random;
  std::vector<std::string> seeds;
  std::string metric = "eval.accuracy";
  bool maximize = true;
  std::int64_t max_retries = 0;
};

struct Trial {
  std::string id;                      // "trial-003"
  std::vector<std::string> overrides;  // "optimizer.lr=0.01"
};

// Reads the `sweep:` node (may be null) and `--grid key=v1,v2` flags. Throws
// config::ConfigError pointing at the offending key.
SweepSpec parse_sweep(const config::Node& section, const std::vector<std::string>& grid_flags,
                      std::uint64_t default_seed);

// Throws config::ConfigError when the spec yields no parameter to vary.
std::vector<Trial> expand_trials(const SweepSpec& spec);

}  // namespace trainer::sweep
