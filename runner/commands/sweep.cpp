// `trainer sweep CONFIG [KEY=VALUE ...] [--grid KEY=V1,V2 ...] [--parallel N] [--out DIR]`:
// runs every trial of the config's `sweep:` section (and the --grid flags),
// each as a full run directory under DIR/trials/. Re-running the same command
// continues the same sweep (DIR defaults to <output.dir>/<name>/sweep-<hash>);
// a DIR holding another sweep, or trials of another version of the config, is
// refused. Before any trial runs, every trial's config is checked, and the
// objective must be one the trials record; the config itself may fail a rule
// between fields that the swept values mend.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "runner/commands.h"
#include "runner/config/emit.h"
#include "runner/config/load.h"
#include "runner/config/overrides.h"
#include "runner/config/validate_hooks.h"
#include "runner/sweep/base_config.h"
#include "runner/sweep/objective.h"
#include "runner/sweep/sweep_dir.h"
#include "runner/sweep/sweep_runner.h"
#include "runner/sweep/sweep_spec.h"
#include "runner/train/devices.h"
#include "runner/train/run_dir.h"
#include "runner/train/run_lock.h"
#include "runner/train/sha256.h"

namespace trainer {
namespace {

// A trial config's error in a value the sweep sets is reported where it is
// written, naming the value, as `trainer validate` reports it: at the config's
// sweep section, or as its --grid flag (which the trial applies as override
// number `command_line_overrides` + 1 + its place among the trial's);
// nullopt for any other error (the command line's own overrides, a rule
// between fields). `same_for_every_value`: see sweep::swept_value_error.
std::optional<config::Diagnostic> at_sweep_section(const config::Diagnostic& d,
                                                   const sweep::Trial& trial,
                                                   std::size_t command_line_overrides,
                                                   std::string& same_for_every_value) {
  for (std::size_t i = 0; i < trial.sources.size(); ++i) {
    const sweep::OverrideSource& source = trial.sources[i];
    if (sweep::from_sweep_section(source) && sweep::points_at(d, source))
      return sweep::swept_value_error(d, trial.overrides[i], source, same_for_every_value);
    const int as_override = static_cast<int>(command_line_overrides + 1 + i);
    if (sweep::from_sweep_section(source) || d.mark.file != config::kCommandLine ||
        d.mark.line != as_override)
      continue;
    config::Diagnostic own = d;  // without the "(in override N ...)" of the trial's list
    if (const auto at = own.message.find(" (in override "); at != std::string::npos)
      own.message.resize(at);
    own.mark = source.mark;  // "--grid flag N"
    return sweep::swept_value_error(own, trial.overrides[i], {own.mark, source.key_path},
                                    same_for_every_value);
  }
  return std::nullopt;
}

// Prints the trials' config errors: each error of the sweep section once (at
// the value that causes it), the others under the first few trials that have
// them.
class TrialErrorReport {
 public:
  explicit TrialErrorReport(const sweep::SweepJob& job) : job_(job) {}

  void add(const sweep::Trial& trial, const config::Diagnostics& diags) {
    ++failed_trials_;
    std::string own;  // this trial's errors that are not the sweep section's
    for (const auto& d : diags.list()) {
      std::string same_for_every_value;
      if (const auto at_section =
              at_sweep_section(d, trial, job_.overrides.size(), same_for_every_value)) {
        if (printed_.insert(same_for_every_value).second)
          std::fprintf(stderr, "%s\n", config::format(*at_section).c_str());
      } else if (printed_.insert(config::format(d) + "\n").second)
        own += config::format(d) + "\n";
    }
    if (own.empty() || ++trials_shown_ > kShown) return;
    std::fprintf(stderr, "sweep: %s (%s):\n%s", trial.id.c_str(),
                 config::join(trial.overrides, " ").c_str(), own.c_str());
  }

  // An error of the sweep as a whole (its objective), not of one trial.
  void add_sweep_error(const config::Diagnostic& d) {
    sweep_error_ = true;
    print_once(config::format(d) + "\n");
  }

  // Prints the totals; returns whether any error was found.
  bool finish() const {
    if (trials_shown_ > kShown)
      std::fprintf(stderr, "sweep: ... and %zu more trials with config errors\n",
                   trials_shown_ - kShown);
    if (failed_trials_)
      std::fprintf(stderr, "sweep: %zu of %zu trials have config errors; none was run\n",
                   failed_trials_, job_.trials.size());
    else if (sweep_error_)
      std::fprintf(stderr, "sweep: none was run\n");
    return failed_trials_ > 0 || sweep_error_;
  }

 private:
  static constexpr std::size_t kShown = 3;

  void print_once(const std::string& text) {
    if (printed_.insert(text).second) std::fprintf(stderr, "%s", text.c_str());
  }

  const sweep::SweepJob& job_;
  std::set<std::string> printed_;
  std::size_t failed_trials_ = 0, trials_shown_ = 0;
  bool sweep_error_ = false;
};

// What the model's checks (layer types, attributes, shapes), the data's and
// the devices' found: their errors (none when they pass), else their warnings.
struct CheckResult {
  std::optional<config::Diagnostics> errors;
  std::vector<config::Diagnostic> warnings;
};

CheckResult model_and_data_checks(const config::Config& config) {
  try {
    std::vector<config::Diagnostic> warnings = config::run_validation_hooks(config);
    config::Diagnostics devices;
    train::check_devices(config, devices);  // the GPUs a trial lists, on this machine
    if (!devices.empty()) return {devices, {}};
    return {std::nullopt, std::move(warnings)};
  } catch (const config::ConfigError& e) {
    return {e.diagnostics(), {}};
  }
}

// Every trial's config, resolved and checked field by field before any
// trial runs (a typo in a swept key or a value out of range would otherwise
// fail each trial in turn), and the objective against what the trials
// record. A value of the sweep section is read as written there (a relative
// path is relative to its file). The model's and the data's checks run once
// per distinct setting of the swept keys they read (once when the trials
// differ only in, say, the learning rate), and their errors count against
// every trial with that setting. Prints the errors and returns whether there
// were any; else fills `configs` with each trial's resolved config, its
// warnings with those of the checks.
bool resolve_trial_configs(const sweep::SweepJob& job, const std::string& config_path,
                           std::vector<config::Config>& configs) {
  TrialErrorReport report(job);
  sweep::ObjectiveCheck objective(job.spec);
  // The checks' result for each distinct setting of the swept keys they
  // read, so a trial repeating a setting counts too.
  std::map<std::string, CheckResult> checked_settings;
  for (const auto& trial : job.trials) {
    std::vector<std::string> overrides = job.overrides;
    overrides.insert(overrides.end(), trial.overrides.begin(), trial.overrides.end());
    config::OverrideOrigins origins(job.overrides.size());
    for (const auto& source : trial.sources)
      origins.push_back(sweep::from_sweep_section(source) ? std::optional(source.mark)
                                                          : std::nullopt);
    try {
      // Read as the base is: through the path as given (a link's folder).
      config::Config trial_config = config::load_config(config_path, overrides, origins);
      const sweep::ChecksRead checks = sweep::checks_read(trial_config);
      std::string setting;
      for (const auto& o : trial.overrides)
        if (const std::string read = sweep::setting_read_by_checks(o, checks); !read.empty())
          setting += read + "\n";
      auto checked = checked_settings.find(setting);
      if (checked == checked_settings.end())
        checked = checked_settings.emplace(setting, model_and_data_checks(trial_config)).first;
      if (checked->second.errors) {
        report.add(trial, *checked->second.errors);
        continue;
      }
      trial_config.warnings.insert(trial_config.warnings.end(), checked->second.warnings.begin(),
                                   checked->second.warnings.end());
      objective.add(trial.id, trial_config);
      configs.push_back(std::move(trial_config));
    } catch (const config::ConfigError& e) {
      report.add(trial, e.diagnostics());
    }
  }
  if (const auto error = objective.error(config_path)) report.add_sweep_error(*error);
  return report.finish();
}

// The warnings every trial's config has, once, at the user's file (each
// trial's log has them again, at its own config); one that some trial's
// values make moot is not the sweep's. That a key the sweep varies has no
// effect is the sweep's warning, once, at the sweep section, though a trial
// at the default value has none.
void print_shared_warnings(const sweep::SweepSpec& spec,
                           const std::vector<config::Config>& trials) {
  if (trials.empty()) return;
  std::set<std::string> swept;
  for (const auto& key : sweep::swept_keys(spec)) swept.insert(key.key);
  const auto formatted = [](const config::Config& trial) {
    std::set<std::string> out;
    for (const auto& w : trial.warnings) out.insert(config::format(w, "warning"));
    return out;
  };
  std::vector<std::set<std::string>> all;
  std::vector<config::Diagnostic> every_warning;
  for (const auto& trial : trials) {
    all.push_back(formatted(trial));
    every_warning.insert(every_warning.end(), trial.warnings.begin(), trial.warnings.end());
  }
  for (const auto& w : trials.front().warnings) {
    const std::string text = config::format(w, "warning");
    if ((!swept.contains(w.key_path) || !sweep::says_without_effect(w)) &&
        std::all_of(all.begin(), all.end(), [&](const auto& set) { return set.contains(text); }))
      std::fprintf(stderr, "%s\n", text.c_str());
  }
  for (const auto& w : sweep::swept_without_effect(spec, every_warning))
    std::fprintf(stderr, "%s\n", config::format(w, "warning").c_str());
}

// A default sweep directory not there yet, beside others of the same config
// file: the config changed since those ran (their trials are not taken
// over), said before the new sweep starts from its first trial. Sweeps of
// other files that share the config's name are no earlier sweep of it.
void note_earlier_sweeps(const std::string& dir, const std::string& config_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(dir, ec)) return;
  const std::string this_config = sweep::recorded_config_path(config_path);
  std::vector<std::pair<fs::file_time_type, std::string>> found;  // oldest first, once sorted
  for (const auto& entry : fs::directory_iterator(fs::path(dir).parent_path(), ec)) {
    const std::string name = entry.path().filename().string();
    const fs::path record = entry.path() / "sweep.yaml";
    if (name.rfind("sweep-", 0) != 0 || !fs::exists(record, ec)) continue;
    std::ifstream in(record);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (sweep::config_path_of_record(text) == this_config)
      found.emplace_back(fs::last_write_time(record, ec), name);
  }
  if (found.empty()) return;
  std::sort(found.begin(), found.end());
  std::vector<std::string> earlier;
  for (const auto& [time, name] : found) earlier.push_back(name);
  std::fprintf(stderr,
               "note: a new sweep in %s: the config (or its sweep) differs from that of the "
               "earlier sweep%s beside it (%s), whose trials it does not take over; to go on "
               "with one: trainer sweep %s --out %s (which names what changed)\n",
               dir.c_str(), earlier.size() == 1 ? "" : "s", config::join(earlier).c_str(),
               config_path.c_str(), (fs::path(dir).parent_path() / earlier.back()).c_str());
}

}  // namespace

int command_sweep(const CommandArgs& args) {
  const config::Config config =
      sweep::load_base_config(args.config_path, args.overrides, args.grid, "sweep").config;
  sweep::SweepJob job;
  job.config_path = sweep::recorded_config_path(args.config_path);
  job.overrides = args.overrides;
  job.spec = sweep::parse_sweep(config.sweep, args.grid, static_cast<std::uint64_t>(config.seed));
  if (!config.sweep.is_map()) job.spec.section_mark = {args.config_path, 0, 0};
  job.trials = sweep::expand_trials(job.spec);
  sweep::overrides_of_swept_keys(args.overrides, job.spec).throw_if_any();
  job.parallel = args.parallel;
  job.gpus = config.devices.gpus;
  std::vector<config::Config> trial_configs;
  if (resolve_trial_configs(job, args.config_path, trial_configs)) return 2;
  print_shared_warnings(job.spec, trial_configs);
  const std::string base_config = sweep::trial_base_config(config.resolved);
  const std::string record = sweep::sweep_record(job, base_config);
  // The default directory is named by what decides the trials (not the
  // objective, max_retries or --parallel, which a resumed sweep may change).
  job.dir = !args.out_dir.empty()
                ? args.out_dir
                : (std::filesystem::path(config.output.dir) / config.name /
                   ("sweep-" + sweep::sweep_identity_hash(record, base_config).substr(0, 10)))
                      .string();
  if (const std::string conflict = sweep::reuse_conflict(job.dir, record, base_config);
      !conflict.empty()) {
    std::fprintf(stderr, "error: %s\n", conflict.c_str());
    return 2;
  }
  if (const std::string inside = train::refuse_inside_run_checkpoints(job.dir); !inside.empty()) {
    std::fprintf(stderr, "error: %s\n", inside.c_str());
    return 2;
  }
  if (args.out_dir.empty()) note_earlier_sweeps(job.dir, args.config_path);
  std::error_code created;
  std::filesystem::create_directories(job.dir, created);
  train::check_output_directory_created(job.dir, created, "sweep directory");
  // One sweep process at a time: two would run the same trials into the same folders.
  const train::RunDirLock lock(job.dir, "sweep directory");
  for (std::size_t i = 0; i < job.trials.size(); ++i)
    if (const std::string conflict =
            sweep::trial_conflict(job.dir, job.trials[i].id, trial_configs[i].resolved);
        !conflict.empty()) {
      std::fprintf(stderr, "error: %s\n", conflict.c_str());
      return 2;
    }
  sweep::write_sweep_record(job.dir, record, base_config);
  for (std::size_t i = 0; i < job.trials.size(); ++i) {
    const config::Config& trial = trial_configs[i];
    job.launches.push_back(
        {sweep::write_trial_config(job.dir, job.trials[i].id, job.config_path, trial.resolved),
         trial.backend.threads == 0, trial.devices.gpus == config.devices.gpus});
  }
  const int code = sweep::run_sweep(job);
  std::printf("sweep directory: %s\n", job.dir.c_str());
  return code;
}

}  // namespace trainer
