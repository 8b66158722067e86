// A sweep directory's record of its sweep, and the check that refuses to
// resume another sweep there.
#include "runner/sweep/sweep_dir.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "runner/checkpoint/durable_file.h"
#include "runner/config/emit.h"
#include "runner/config/value_changes.h"
#include "runner/config/yaml_reader.h"
#include "runner/json_text.h"
#include "runner/train/run_lock.h"
#include "runner/train/sha256.h"

namespace trainer::sweep {
namespace fs = std::filesystem;
namespace {

constexpr const char* kHashKey = "config_sha256: ";

std::string quoted(const std::string& s) {
  return json_text(s);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A recorded config path (a JSON string) spelt as recorded_config_path
// spells it: a record of an earlier trainer may hold "/a/./sw.yaml".
std::string normal_path(const std::string& json_string) {
  const nlohmann::json path = nlohmann::json::parse(json_string, nullptr, false);
  if (!path.is_string()) return json_string;
  return recorded_config_path(path.get<std::string>());
}

// The lines of a sweep.yaml that decide what its trials are: the config
// path, its overrides and every trial's overrides (not the objective or
// --parallel, which a resumed sweep may change; the content hash is compared
// on its own, a sweep.yaml of an older trainer having none).
std::vector<std::string> identity_lines(const std::string& yaml) {
  std::vector<std::string> out;
  std::istringstream in(yaml);
  bool in_trials = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("trials:", 0) == 0) {
      in_trials = true;
      continue;
    }
    if (line.rfind("config: ", 0) == 0 && !in_trials)
      out.push_back("config: " + quoted(normal_path(line.substr(8))));
    else if (in_trials ? line.rfind("  ", 0) == 0 : line.rfind("overrides:", 0) == 0)
      out.push_back(line);
    else if (line.rfind("  ", 0) != 0)
      in_trials = false;
  }
  return out;
}

}  // namespace

std::string config_path_of_record(const std::string& sweep_yaml) {
  for (const std::string& line : identity_lines(sweep_yaml))
    if (line.rfind("config: ", 0) == 0) return normal_path(line.substr(8));
  return "";
}

namespace {

// The recorded config hash ("" in a sweep.yaml without one).
std::string recorded_hash(const std::string& yaml) {
  std::istringstream in(yaml);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(kHashKey, 0) == 0) return line.substr(std::string(kHashKey).size());
  return "";
}

// "it recorded X, this sweep has Y" for the first line that differs, or "".
std::string first_difference(const std::vector<std::string>& was,
                             const std::vector<std::string>& now) {
  const auto trim = [](const std::string& l) { return l.substr(l.find_first_not_of(' ')); };
  for (std::size_t i = 0; i < std::max(was.size(), now.size()); ++i) {
    const std::string a = i < was.size() ? trim(was[i]) : "(nothing)";
    const std::string b = i < now.size() ? trim(now[i]) : "(nothing)";
    if (a != b) return "it recorded " + a + ", this sweep has " + b;
  }
  return "";
}

std::string another_sweep(const std::string& dir, const std::string& difference) {
  return "the sweep directory '" + dir + "' holds a different sweep (" + difference +
         "); resuming there would mix up its trials.\n    use a new --out directory, or "
         "repeat the command that started it to resume it";
}

// The config (with the files it extends) resolved to other values than the
// trials there started from.
std::string changed_config(const std::string& dir, const std::string& was, const std::string& now) {
  std::string changes = config::value_changes(was, now);
  if (changes.empty()) changes = "its content hash differs";
  return "the sweep directory '" + dir +
         "' holds trials of another version of the config: since they started, " + changes +
         "; resuming there would rank trials of both versions together.\n    use a new --out "
         "directory for the config as it is now, or restore the config (" +
         (fs::path(dir) / "config.yaml").string() +
         " holds it as the sweep started it, resolved) and repeat the command to resume";
}

// "" when `dir` is missing or empty, or holds only what a sweep that stopped
// before writing its record leaves (its lock, a file being written); else
// the error: a sweep writes config.yaml and its tables there.
std::string holds_other_files(const std::string& dir) {
  std::error_code error;
  if (!fs::is_directory(dir, error)) {
    if (!fs::exists(dir, error)) return "";
    return "the sweep directory '" + dir + "' is not a directory";
  }
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name == train::kLockFileName || name.ends_with(".tmp")) continue;
    return "the sweep directory '" + dir + "' holds " + name +
           " and no sweep: a sweep writes config.yaml, its tables and trials there.\n    use "
           "a new --out directory, or an empty one";
  }
  return "";
}

// "" when each name the sweep writes in `dir` is free or of the kind it
// writes there; else the error naming the first that is not (a folder where
// it rewrites a file, which a rename cannot replace, or a file where it keeps
// a folder). Asked before a trial runs, so none is lost to a table it could
// not write.
std::string misplaced_entry(const std::string& dir) {
  constexpr const char* kFiles[] = {"sweep.yaml", "config.yaml", "trials.json", "trials.csv",
                                    "results.md"};
  constexpr const char* kFolders[] = {"trials", "logs", "configs"};
  std::error_code error;
  for (const char* name : kFiles)
    if (fs::is_directory(fs::path(dir) / name, error))
      return "'" + (fs::path(dir) / name).string() + "' is a folder where the sweep writes its " +
             name + " file.\n    move it aside and repeat the command (the trials' results are " +
             "read again from their run directories)";
  for (const char* name : kFolders) {
    const fs::path path = fs::path(dir) / name;
    if (fs::exists(fs::symlink_status(path, error)) && !fs::is_directory(path, error))
      return "'" + path.string() + "' is not a folder, and the sweep keeps its " + name +
             " folder there.\n    move it aside and repeat the command";
  }
  return "";
}

// The model.init_from path a run's manifest keeps as it was given (its
// config.yaml names the file a checkpoints/last link led to), or "".
std::string init_from_as_given(const fs::path& run_dir) {
  std::ifstream in(run_dir / "manifest.json");
  const nlohmann::json manifest = nlohmann::json::parse(in, nullptr, false);
  if (manifest.is_discarded() || !manifest.is_object()) return "";
  const auto from = manifest.find("init_from");
  if (from == manifest.end() || !from->is_object()) return "";
  const auto path = from->find("path");
  return path != from->end() && path->is_string() ? path->get<std::string>() : "";
}

// `yaml`, a resolved config, as the sweep gives it to a trial: without what
// the sweep sets per launch (the threads and the GPU of the slot it ran in),
// model.init_from as given (`init_from` when not empty). nullopt when it
// does not parse as a config.
std::optional<std::string> as_given(const std::string& yaml, const std::string& init_from = "") {
  config::Diagnostics ignored;
  bool ok = true;
  config::Node tree = config::parse_yaml(yaml, "<config>", ignored, &ok);
  if (!ok || !tree.is_map()) return std::nullopt;
  tree.erase("devices");
  if (config::Node* backend = tree.find("backend"); backend && backend->is_map())
    backend->erase("threads");
  config::Node* model = tree.find("model");
  if (config::Node* from = model && model->is_map() ? model->find("init_from") : nullptr;
      from && !init_from.empty())
    *from = config::Node::scalar(init_from, from->mark(), from->quoted());
  return config::to_yaml(tree);
}

}  // namespace

std::string recorded_config_path(const std::string& config_path) {
  const fs::path path = fs::absolute(config_path);
  // "sub/.." is spelt away where sub is a folder; after a link it leads
  // elsewhere than the text does, and such a path is kept as spelt.
  fs::path out;
  for (const auto& part : path) {
    if (part.empty() || part == ".") continue;
    if (part != "..") {
      out /= part;
      continue;
    }
    std::error_code error;
    if (fs::is_symlink(out, error) || error) return path.string();
    if (out.has_relative_path()) out = out.parent_path();  // "/.." is "/"
  }
  return out.string();
}

std::string trial_conflict(const std::string& dir, const std::string& trial_id,
                           const config::Node& resolved) {
  // What the trial trained (its run's config.yaml, once the run has
  // written config.sha256), else what an earlier invocation gave it (configs/).
  const fs::path run_dir = fs::path(dir) / "trials" / trial_id;
  const fs::path given = fs::path(dir) / "configs" / (trial_id + ".yaml");
  std::error_code error;
  const bool started = fs::is_regular_file(run_dir / "config.sha256", error);
  const fs::path recorded = started ? run_dir / "config.yaml" : given;
  if (!fs::is_regular_file(recorded, error)) return "";
  const auto was = as_given(config::resolved_today(read_text(recorded), "sweep"),
                            started ? init_from_as_given(run_dir) : "");
  // One that no longer reads is the run's own to report when it resumes.
  if (!was) return "";
  const std::string changes = config::value_changes(*was, *as_given(trial_base_config(resolved)));
  if (changes.empty()) return "";
  return std::string(started ? "the run directory of " : "") + trial_id +
         " in the sweep directory '" + dir +
         "' holds another config than this sweep gives it: " + changes +
         " (relative paths in overrides and --grid values are read from the working directory; "
         "a trial resumed by hand with overrides keeps them); ranking it with the others would "
         "compare different configs.\n    repeat the command from the directory the sweep "
         "started in, or move " +
         (started ? run_dir.string() + " aside to run it again as this sweep gives it, "
                  : std::string()) +
         "or use a new --out directory";
}

std::string trial_base_config(const config::Node& resolved) {
  config::Node tree = resolved;
  tree.erase("sweep");
  return config::to_yaml(tree);
}

std::string sweep_record(const SweepJob& job, const std::string& base_config) {
  std::string out =
      "# written by `trainer sweep`; the trials below are re-created from the config on every "
      "run\n";
  out += "config: " + quoted(job.config_path) + "\n" + kHashKey + train::sha256_hex(base_config) +
         "\noverrides: [";
  // Those that decide the trials: an objective or max_retries given by
  // override is recorded below with the file's.
  bool first = true;
  for (const auto& o : job.overrides) {
    if (o.rfind("sweep.objective", 0) == 0 || o.rfind("sweep.max_retries", 0) == 0) continue;
    out += (first ? "" : ", ") + quoted(o);
    first = false;
  }
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

std::string reuse_conflict(const std::string& dir, const std::string& record,
                           const std::string& base_config) {
  if (!fs::exists(fs::path(dir) / "sweep.yaml")) return holds_other_files(dir);
  if (const std::string misplaced = misplaced_entry(dir); !misplaced.empty()) return misplaced;
  const std::string old_record = read_text(fs::path(dir) / "sweep.yaml");
  const std::vector<std::string> old_identity = identity_lines(old_record);
  if (old_identity.empty() || old_identity.front().rfind("config: ", 0) != 0)
    return "the sweep directory '" + dir + "' has a sweep.yaml that names no config (" +
           (old_record.empty() ? std::string("it is empty") : "it was edited or damaged") +
           "), so its trials cannot be matched to this sweep's.\n    restore " +
           (fs::path(dir) / "sweep.yaml").string() +
           " (the sweep writes it as it starts), or use a new --out directory";
  if (const std::string d = first_difference(old_identity, identity_lines(record)); !d.empty())
    return another_sweep(dir, d);
  const std::string old_hash = recorded_hash(old_record);
  if (old_hash.empty() || old_hash == recorded_hash(record)) return "";
  // Through today's defaults: a sweep of an older trainer, which filled in
  // fewer, holds the same config.
  const std::string old_config =
      config::resolved_today(read_text(fs::path(dir) / "config.yaml"), "sweep");
  if (config::value_changes(old_config, base_config).empty()) return "";
  return changed_config(dir, old_config, base_config);
}

void write_sweep_record(const std::string& dir, const std::string& record,
                        const std::string& base_config) {
  // sweep.yaml first: from then on the directory is this sweep's (its hash
  // of the config is the one compared), whatever stops the writing after it.
  checkpoint::write_file_atomically((fs::path(dir) / "sweep.yaml").string(), record);
  checkpoint::write_file_atomically((fs::path(dir) / "config.yaml").string(), base_config);
}

std::string sweep_identity_hash(const std::string& record, const std::string& base_config) {
  std::string identity = train::sha256_hex(base_config) + "\n";
  for (const auto& line : identity_lines(record)) identity += line + "\n";
  return train::sha256_hex(identity);
}

std::string write_trial_config(const std::string& dir, const std::string& trial_id,
                               const std::string& config_path, const config::Node& resolved) {
  const fs::path path = fs::path(dir) / "configs" / (trial_id + ".yaml");
  fs::create_directories(path.parent_path());
  checkpoint::write_file_atomically(
      path.string(), config::resolved_from_comment(config_path) + trial_base_config(resolved));
  return path.string();
}

}  // namespace trainer::sweep
