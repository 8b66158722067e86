// `trainer validate CONFIG [KEY=VALUE ...]`: every field checked, then the
// registered model checks and the `sweep:` section (what `trainer sweep`
// checks before any trial runs: its keys, distributions, objective and
// whether the config's runs record it, trial count, and each swept value
// against the config, which is read as `trainer sweep` reads it: a rule
// between fields that the swept values mend is no error); prints `ok` or every error (the CLI exits
// 2), and the warnings about settings without effect either way. With --data it then reads every
// sample of the training and evaluation data, as a run would, and reports each source with samples
// that cannot be read.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "data/content_digest.h"
#include "data/read_every_sample.h"
#include "ops/cpu/onednn.h"
#include "runner/commands/config_commands.h"
#include "runner/config/load.h"
#include "runner/config/overrides.h"
#include "runner/config/validate_hooks.h"
#include "runner/sweep/base_config.h"
#include "runner/sweep/objective.h"
#include "runner/sweep/sweep_spec.h"
#include "runner/train/devices.h"
#include "runner/train/session.h"

namespace trainer {
namespace {

// One value a sweep sets, and where the sweep section writes it.
struct SweptValue {
  std::string key;
  std::string value;
  config::Mark mark;
  std::string key_path;  // "sweep.grid.optimizer.lr"
};

std::vector<SweptValue> swept_values(const sweep::SweepSpec& spec) {
  std::vector<SweptValue> out;
  for (std::size_t i = 0; i < spec.grid.size(); ++i)
    for (const auto& v : spec.grid[i].second)
      out.push_back(
          {spec.grid[i].first, v, spec.grid_marks[i], "sweep.grid." + spec.grid[i].first});
  for (const auto& p : spec.random) {
    const std::string path = "sweep.random.params." + p.key;
    if (p.distribution == "choice") {
      for (const auto& c : p.choices) out.push_back({p.key, c, p.mark, path});
      continue;
    }
    for (double bound : {p.low, p.high}) {
      char text[64];
      if (p.distribution == "int")
        std::snprintf(text, sizeof text, "%.0f",
                      bound == p.low ? std::ceil(bound) : std::floor(bound));
      else  // the shortest text that reads back exactly: a bound rounded could leave the range
        for (int digits = 6; digits <= 17; ++digits) {
          std::snprintf(text, sizeof text, "%.*g", digits, bound);
          if (std::strtod(text, nullptr) == bound) break;
        }
      out.push_back({p.key, text, p.mark, path});
    }
  }
  for (const auto& seed : spec.seeds) out.push_back({"seed", seed, spec.seeds_mark, "sweep.seeds"});
  return out;
}

// Each swept value applied alone to the config, read as written in the
// sweep section (as `trainer sweep` applies it): a misspelt key or a value
// out of range is reported at the section, as `trainer sweep` would refuse it.
void check_swept_values(const CommandArgs& args, const std::vector<std::string>& mended_by,
                        const sweep::SweepSpec& spec,
                        const std::vector<config::Diagnostic>& base_errors,
                        config::Diagnostics& diags, std::vector<config::Diagnostic>& warnings) {
  std::set<std::string> seen;
  std::set<std::string> checked_settings;  // what the checks read, each checked once
  for (const SweptValue& sv : swept_values(spec)) {
    const std::string swept = sv.key + "=" + sv.value;
    std::vector<std::string> overrides = args.overrides;
    overrides.insert(overrides.end(), mended_by.begin(), mended_by.end());
    overrides.push_back(swept);
    config::OverrideOrigins origins(overrides.size() - 1);
    origins.push_back(sv.mark);
    try {
      const config::Config config = config::load_config(args.config_path, overrides, origins);
      warnings.insert(warnings.end(), config.warnings.begin(), config.warnings.end());
      // The model's, the data's and the devices' checks (layer types and
      // shapes, the data against the model and the batch, the GPUs listed), as
      // `trainer sweep` runs them for each trial, unless they never read the
      // swept key (the learning rate).
      if (const std::string read = sweep::setting_read_by_checks(swept, sweep::checks_read(config));
          !read.empty() && checked_settings.insert(read).second) {
        config::run_validation_hooks(config);
        if (sv.key == "devices" || sv.key.starts_with("devices.")) {
          config::Diagnostics devices;  // the GPUs a swept `devices` lists, on this machine
          train::check_devices(config, devices);
          devices.throw_if_any();
        }
      }
    } catch (const config::ConfigError& e) {
      for (const config::Diagnostic& d : e.diagnostics().list()) {
        // The command line's own overrides are reported by the config's load;
        // a sweep section given there is where its values' errors point.
        const bool at_swept_override =
            sv.mark.file == config::kCommandLine && d.mark.line == sv.mark.line;
        if (d.mark.file == config::kCommandLine && !at_swept_override) continue;
        // The config's own error, reported once as that: not the value's.
        const bool the_configs_own =
            std::any_of(base_errors.begin(), base_errors.end(), [&](const config::Diagnostic& b) {
              return b.key_path == d.key_path && b.message == d.message;
            });
        if (the_configs_own) continue;
        std::string same_for_every_value;
        config::Diagnostic out =
            sweep::swept_value_error(d, swept, {sv.mark, sv.key_path}, same_for_every_value);
        if (seen.insert(same_for_every_value).second) diags.add(std::move(out));
      }
    }
  }
}

// The sweep section's keys, distributions, swept values and objective (errors
// to `diags`), and the command line's overrides of keys it varies (warnings:
// `trainer run` takes them; `trainer sweep` refuses them). `mended_by`: the
// first trial's values the config needs to pass its checks (each swept value
// is checked with them applied before it). Returns the sweep's trial count
// (0: no sweep section, or one in error).
std::uint64_t check_sweep_section(const CommandArgs& args, const config::Config& config,
                                  const std::vector<std::string>& mended_by,
                                  config::Diagnostics& diags, config::Diagnostics& warnings) {
  const std::vector<config::Diagnostic> base_errors = diags.list();  // the config's own
  if (config.sweep.is_null()) return 0;
  sweep::SweepSpec spec;
  try {
    spec = sweep::parse_sweep(config.sweep, {}, static_cast<std::uint64_t>(config.seed));
  } catch (const config::ConfigError& e) {
    for (const auto& d : e.diagnostics().list()) diags.add(d);
    return 0;
  }
  warnings = sweep::overrides_of_swept_keys(args.overrides, spec);
  std::vector<config::Diagnostic> value_warnings;
  check_swept_values(args, mended_by, spec, base_errors, diags, value_warnings);
  for (auto& w : sweep::swept_without_effect(spec, value_warnings)) warnings.add(std::move(w));
  sweep::check_objective_recorded(spec, config, args.config_path, diags);
  return sweep::trial_count(spec);
}

// Every sample of the training data and of the evaluation data (its own
// source, or the part data.split holds out), read on all cores: the sources
// with samples that cannot be read are errors at their key, listing the first
// few. Prints what it read on success, with each set's content digest (the
// one a run records, and the ranks of a job compare).
void check_every_sample(const config::Config& config, config::Diagnostics& diags) {
  constexpr std::size_t kListed = 10;
  // The sets alone: a normalize computing its statistics would stop at the
  // first sample it cannot read.
  const train::SessionData sets = train::open_session_data(config);
  struct Part {
    std::string key, what;
    const data::Dataset* dataset;
  };
  std::vector<Part> parts = {{"data.train", "training", sets.train.get()}};
  if (sets.eval)
    parts.push_back({config.data.eval ? "data.eval" : "data.split",
                     config.data.eval ? "evaluation" : "held-out evaluation", sets.eval.get()});
  const int threads = cpu::usable_cpus();
  const auto start = std::chrono::steady_clock::now();
  std::string summary, digests;
  for (const Part& part : parts) {
    const data::SampleScan scan =
        data::read_every_sample(*part.dataset, threads, kListed, [&](std::int64_t read) {
          std::fprintf(stderr, "%s: %lld of %lld samples read\n", part.key.c_str(),
                       static_cast<long long>(read), static_cast<long long>(part.dataset->size()));
        });
    if (!summary.empty()) summary += ", ";
    summary += std::to_string(scan.samples) + " " + part.what;
    if (scan.failed == 0) {
      // What a run records of this set: nodes of a job compare theirs.
      digests += (digests.empty() ? "" : ", ") + part.what + " " +
                 data::digest_text(part.dataset->content_digest());
      continue;
    }
    std::string message = std::to_string(scan.failed) + " of " + std::to_string(scan.samples) +
                          " " + part.what + " samples cannot be read";
    if (scan.failed > static_cast<std::int64_t>(scan.first_errors.size()))
      message += " (the first " + std::to_string(scan.first_errors.size()) + " below)";
    for (const auto& [index, error] : scan.first_errors)
      message += "\n  sample " + std::to_string(index) + ": " + error;
    diags.add(train::mark_of(config, part.key), part.key, message,
              "repair or remove these files, then run `trainer validate --data` again");
  }
  if (diags.size() > 0) return;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("data: every sample read (%s) in %.1f s; content digest: %s\n", summary.c_str(),
              seconds, digests.c_str());
}

// Where the run directories go (<output.dir>/<name>), as far as it exists:
// a file there or above it, or a link to nothing, would stop `trainer run`
// (without --out, which validate does not know of) when it makes the run's
// folder. A warning: a run given --out goes elsewhere.
void warn_run_dir_parent(const config::Config& config, std::vector<config::Diagnostic>& warnings) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // As the system walks it: "file/.." fails at the file.
  fs::path path = fs::absolute(fs::path(config.output.dir) / config.name, ec);
  std::vector<fs::path> walk;
  for (fs::path p = path; !ec; p = p.parent_path()) {
    walk.push_back(p);
    if (p == p.parent_path()) break;
  }
  std::string problem;
  for (auto it = walk.rbegin(); it != walk.rend() && problem.empty(); ++it) {
    const fs::file_status link = fs::symlink_status(*it, ec);
    if (ec || link.type() == fs::file_type::not_found) break;  // made by the run from here
    const fs::file_status target = fs::status(*it, ec);
    if (fs::is_symlink(link) && target.type() == fs::file_type::not_found)
      problem = "is a link to nothing (" + fs::read_symlink(*it, ec).string() + ")";
    else if (ec)  // a loop of links, or no permission
      problem = "cannot be followed (" + ec.message() + ")";
    else if (!fs::is_directory(target))
      problem = "is a file";
    if (!problem.empty()) path = *it;
    ec.clear();
  }
  if (problem.empty()) return;
  warnings.push_back(
      {train::mark_of(config, "output.dir"), "output.dir",
       "'" + path.lexically_normal().string() + "' " + problem + ", where the run directories (" +
           (fs::path(config.output.dir) / config.name / "TIME").string() +
           ") need a folder: `trainer " + (config.sweep.is_null() ? "run" : "sweep") +
           "` without --out would stop there",
       "move it aside, or choose another output.dir or name (or `trainer run --out DIR`)"});
}

}  // namespace

void print_config_warnings(const config::Config& config) {
  for (const auto& warning : config.warnings)
    std::fprintf(stderr, "%s\n", config::format(warning, "warning").c_str());
}

int command_validate(const CommandArgs& args) {
  // A config with a sweep section is read as `trainer sweep` reads it: a
  // rule between fields that every trial's values mend is no error.
  const sweep::BaseConfig base =
      sweep::load_base_config(args.config_path, args.overrides, {}, "validate");
  const config::Config& config = base.config;
  config::Diagnostics diags;
  std::vector<config::Diagnostic> session_warnings;
  try {
    session_warnings = config::run_validation_hooks(config);
  } catch (const config::ConfigError& e) {
    // A sample the session could not read computing normalize's statistics
    // is one of those --data lists: listed with the others instead.
    bool unread_sample = false;
    for (const auto& d : e.diagnostics().list()) {
      const bool unread =
          d.key_path == "data.train" && d.message.starts_with(train::kStatisticsReadError);
      if (!(args.read_data && unread)) diags.add(d);
      unread_sample = unread_sample || unread;
    }
    if (args.read_data && unread_sample) try {
        check_every_sample(config, diags);
      } catch (const config::ConfigError&) {  // the data did not open: said above
      }
  }
  config::Diagnostics sweep_warnings;
  const std::uint64_t trials =
      check_sweep_section(args, config, base.mended_by, diags, sweep_warnings);
  train::check_devices(config, diags);  // the GPUs it lists, on this machine
  warn_run_dir_parent(config, session_warnings);
  diags.throw_if_any();
  if (args.read_data) check_every_sample(config, diags);  // the config is sound: read the data
  diags.throw_if_any();
  print_config_warnings(config);
  for (const auto& warning : session_warnings)
    std::fprintf(stderr, "%s\n", config::format(warning, "warning").c_str());
  for (const auto& warning : sweep_warnings.list())
    std::fprintf(stderr, "%s\n", config::format(warning, "warning").c_str());
  // The sweep's values mend these; `trainer run` of the config alone does
  // not take them.
  for (config::Diagnostic alone : base.alone_errors) {
    alone.suggestion =
        "`trainer run` of this config refuses it; `trainer sweep` sets what it "
        "needs in every trial (" +
        config::join(base.mended_by, " ") + " in the first)";
    std::fprintf(stderr, "%s\n", config::format(alone, "warning").c_str());
  }
  if (trials > 0)
    std::printf("ok: a sweep of %llu trial%s (trainer sweep runs them)\n",
                static_cast<unsigned long long>(trials), trials == 1 ? "" : "s");
  else
    std::printf("ok\n");
  return 0;
}

}  // namespace trainer
