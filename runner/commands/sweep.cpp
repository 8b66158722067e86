// `trainer sweep CONFIG [KEY=VALUE ...] [--grid KEY=V1,V2 ...] [--parallel N] [--out DIR]`:
// runs every trial of the config's `sweep:` section (and the --grid flags),
// each as a full run directory under DIR/trials/. Re-running the same command
// continues the same sweep (DIR defaults to <output.dir>/<name>/sweep-<hash>).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runner/checkpoint/durable_file.h"
#include "runner/commands.h"
#include "runner/config/emit.h"
#include "runner/config/load.h"
#include "runner/config/validate_hooks.h"
#include "runner/sweep/sweep_runner.h"
#include "runner/sweep/sweep_spec.h"
#include "runner/train/run_lock.h"
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

// The lines of a sweep.yaml that decide what its trials are and hold: the
// config, its overrides and every trial's overrides (not the objective or
// --parallel, which a resumed sweep may change).
std::vector<std::string> identity_lines(const std::string& yaml) {
  std::vector<std::string> out;
  std::istringstream in(yaml);
  bool in_trials = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("trials:", 0) == 0) {
      in_trials = true;
      continue;
    }
    if (in_trials ? line.rfind("  ", 0) == 0
                  : line.rfind("config:", 0) == 0 || line.rfind("overrides:", 0) == 0)
      out.push_back(line);
    else if (line.rfind("  ", 0) != 0)
      in_trials = false;
  }
  return out;
}

// A sweep directory holds one sweep: re-running the same command resumes it,
// but a different sweep there would relabel the recorded trials. Returns an
// error message naming the first difference, or "".
std::string reuse_conflict(const std::string& dir, const std::string& new_yaml) {
  std::ifstream in(std::filesystem::path(dir) / "sweep.yaml", std::ios::binary);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  const auto old_lines = identity_lines(text.str());
  const auto new_lines = identity_lines(new_yaml);
  if (old_lines == new_lines) return {};
  std::string what;
  for (std::size_t i = 0; i < std::max(old_lines.size(), new_lines.size()); ++i) {
    const std::string was = i < old_lines.size() ? old_lines[i] : "(nothing)";
    const std::string now = i < new_lines.size() ? new_lines[i] : "(nothing)";
    if (was == now) continue;
    const auto trim = [](const std::string& l) { return l.substr(l.find_first_not_of(' ')); };
    what = "it recorded " + trim(was) + ", this sweep has " + trim(now);
    break;
  }
  return "the sweep directory '" + dir + "' holds a different sweep (" + what +
         "); resuming there would mix up its trials.\n    use a new --out directory, or "
         "repeat the command that started it to resume it";
}

// Every trial's config, checked field by field before any trial runs: a
// typo in a swept key or a value out of range would otherwise fail each
// trial in turn. Prints the errors of the first few failing trials and
// returns how many failed. A trial that sets `model.` keys also gets the
// model's checks (built once per distinct setting); the rest of the data and
// model checks are each trial's.
std::size_t report_trial_config_errors(const sweep::SweepJob& job) {
  constexpr std::size_t kShown = 3;
  std::size_t failed = 0;
  std::set<std::string> models_checked;  // each distinct setting of the swept model keys once
  for (const auto& trial : job.trials) {
    std::vector<std::string> overrides = job.overrides;
    overrides.insert(overrides.end(), trial.overrides.begin(), trial.overrides.end());
    try {
      const config::Config trial_config = config::load_config(job.config_path, overrides);
      // The model's own checks (layer types, attributes, shapes) when the sweep changes it.
      std::string model;
      for (const auto& o : trial.overrides)
        if (o.rfind("model.", 0) == 0) model += o + "\n";
      if (!model.empty() && models_checked.insert(model).second)
        config::run_validation_hooks(trial_config);
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
  const std::string record = sweep_yaml(job);
  if (const std::string conflict = reuse_conflict(job.dir, record); !conflict.empty()) {
    std::fprintf(stderr, "error: %s\n", conflict.c_str());
    return 2;
  }
  std::filesystem::create_directories(job.dir);
  // One sweep process at a time: two would run the same trials into the same folders.
  const train::RunDirLock lock(job.dir, "sweep directory");
  checkpoint::write_file_atomically(job.dir + "/sweep.yaml", record);
  const int code = sweep::run_sweep(job);
  std::printf("sweep directory: %s\n", job.dir.c_str());
  return code;
}

}  // namespace trainer
