// `trainer sweep CONFIG [KEY=VALUE ...] [--grid KEY=V1,V2 ...] [--parallel N] [--out DIR]`:
// runs every trial of the config's `sweep:` section (and the --grid flags),
// each as a full run directory under DIR/trials/. Re-running the same command
// continues the same sweep (DIR defaults to <output.dir>/<name>/sweep-<hash>).
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runner/checkpoint/durable_file.h"
#include "runner/commands.h"
#include "runner/config/emit.h"
#include "runner/config/load.h"
#include "runner/sweep/sweep_runner.h"
#include "runner/sweep/sweep_spec.h"
#include "runner/train/sha256.h"

namespace trainer {
namespace {

std::string quoted(const std::string& s) {
  return nlohmann::json(s).dump();
}

// sweep.yaml: what was swept and the trials it expanded to.
std::string sweep_yaml(const sweep::SweepJob& job) {
  std::string out =
      "# written by `trainer sweep`; the trials below are re-created from the config on every "
      "run\n";
  out += "config: " + quoted(job.config_path) + "\noverrides: [";
  for (std::size_t i = 0; i < job.overrides.size(); ++i)
    out += (i ? ", " : "") + quoted(job.overrides[i]);
  out += "]\nobjective: {metric: " + quoted(job.spec.metric) +
         ", mode: " + (job.spec.maximize ? "max" : "min") +
         "}\nmax_retries: " + std::to_string(job.spec.max_retries) +
         "\nparallel: " + std::to_string(job.parallel) + "\ntrials:\n";
  for (const auto& t : job.trials) {
    out += "  " + t.id + ": [";
    for (std::size_t i = 0; i < t.overrides.size(); ++i)
      out += (i ? ", " : "") + quoted(t.overrides[i]);
    out += "]\n";
  }
  return out;
}

// Every trial's config, checked field by field before any trial runs: a
// typo in a swept key or a value out of range would otherwise fail each
// trial in turn. Prints the errors of the first few failing trials and
// returns how many failed. (The data and model are checked by each trial.)
std::size_t report_trial_config_errors(const sweep::SweepJob& job) {
  constexpr std::size_t kShown = 3;
  std::size_t failed = 0;
  for (const auto& trial : job.trials) {
    std::vector<std::string> overrides = job.overrides;
    overrides.insert(overrides.end(), trial.overrides.begin(), trial.overrides.end());
    try {
      config::load_config(job.config_path, overrides);
    } catch (const config::ConfigError& e) {
      if (++failed > kShown) continue;
      std::string swept;
      for (const auto& o : trial.overrides) swept += (swept.empty() ? "" : " ") + o;
      std::fprintf(stderr, "sweep: %s (%s):\n%s", trial.id.c_str(), swept.c_str(),
                   e.diagnostics().format_all().c_str());
    }
  }
  if (failed > kShown)
    std::fprintf(stderr, "sweep: ... and %zu more trials with config errors\n", failed - kShown);
  if (failed)
    std::fprintf(stderr, "sweep: %zu of %zu trials have config errors; none was run\n", failed,
                 job.trials.size());
  return failed;
}

}  // namespace

int command_sweep(const CommandArgs& args) {
  const config::Config config = config::load_config(args.config_path, args.overrides);
  sweep::SweepJob job;
  job.config_path = std::filesystem::absolute(args.config_path).string();
  job.overrides = args.overrides;
  job.spec = sweep::parse_sweep(config.sweep, args.grid, static_cast<std::uint64_t>(config.seed));
  job.trials = sweep::expand_trials(job.spec);
  job.parallel = args.parallel;
  job.gpus = config.devices.gpus;
  std::string grid;
  for (const auto& g : args.grid) grid += g + "\n";
  job.dir =
      !args.out_dir.empty()
          ? args.out_dir
          : (std::filesystem::path(config.output.dir) / config.name /
             ("sweep-" + train::sha256_hex(config::to_yaml(config.resolved) + grid).substr(0, 10)))
                .string();
  if (report_trial_config_errors(job) > 0) return 2;
  std::filesystem::create_directories(job.dir);
  checkpoint::write_file_atomically(job.dir + "/sweep.yaml", sweep_yaml(job));
  const int code = sweep::run_sweep(job);
  std::printf("sweep directory: %s\n", job.dir.c_str());
  return code;
}

}  // namespace trainer
