// A sweep directory's record of its sweep, and the check that refuses to
// resume another sweep there.
#include "runner/sweep/sweep_dir.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runner/checkpoint/durable_file.h"
#include "runner/config/diagnostics.h"
#include "runner/config/emit.h"
#include "runner/config/load.h"
#include "runner/config/yaml_reader.h"
#include "runner/train/sha256.h"

namespace trainer::sweep {
namespace fs = std::filesystem;
namespace {

constexpr const char* kHashKey = "config_sha256: ";

std::string quoted(const std::string& s) {
  return nlohmann::json(s).dump();
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
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
    if (in_trials ? line.rfind("  ", 0) == 0
                  : line.rfind("config:", 0) == 0 || line.rfind("overrides:", 0) == 0)
      out.push_back(line);
    else if (line.rfind("  ", 0) != 0)
      in_trials = false;
  }
  return out;
}

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

using Leaves = std::vector<std::pair<std::string, std::string>>;

// Every scalar of a YAML tree by its key path ("model.layers[1].out_features").
void collect_leaves(const config::Node& node, const std::string& path, Leaves& out) {
  if (node.is_map()) {
    for (std::size_t i = 0; i < node.size(); ++i)
      collect_leaves(node.value_at(i), path.empty() ? node.key_at(i) : path + "." + node.key_at(i),
                     out);
  } else if (node.is_sequence()) {
    for (std::size_t i = 0; i < node.items().size(); ++i)
      collect_leaves(node.items()[i], path + "[" + std::to_string(i) + "]", out);
    if (node.items().empty()) out.emplace_back(path, "[]");
  } else {
    out.emplace_back(path, node.is_null() ? "null" : node.text());
  }
}

Leaves leaves_of(const std::string& yaml) {
  config::Diagnostics diags;
  const config::Node root = config::parse_yaml(yaml, "config.yaml", diags);
  Leaves out;
  if (diags.empty()) collect_leaves(root, "", out);
  return out;
}

// "model.layers[1].out_features: 512 -> 64, train.epochs: 20 -> 2" (at most
// a few, then how many more), or "" when the texts hold the same values.
std::string config_changes(const std::string& was, const std::string& now) {
  constexpr std::size_t kShown = 4;
  const Leaves old_leaves = leaves_of(was), new_leaves = leaves_of(now);
  std::map<std::string, std::string> old_values(old_leaves.begin(), old_leaves.end());
  std::vector<std::string> changes;
  for (const auto& [key, value] : new_leaves) {
    const auto old = old_values.find(key);
    if (old == old_values.end())
      changes.push_back(key + ": (not set) -> " + value);
    else if (old->second != value)
      changes.push_back(key + ": " + old->second + " -> " + value);
    if (old != old_values.end()) old_values.erase(old);
  }
  for (const auto& [key, value] : old_leaves)
    if (old_values.count(key)) changes.push_back(key + ": " + value + " -> (not set)");
  std::string out;
  for (std::size_t i = 0; i < std::min(changes.size(), kShown); ++i)
    out += (i ? ", " : "") + changes[i];
  if (changes.size() > kShown) out += " and " + std::to_string(changes.size() - kShown) + " more";
  return out;
}

std::string another_sweep(const std::string& dir, const std::string& difference) {
  return "the sweep directory '" + dir + "' holds a different sweep (" + difference +
         "); resuming there would mix up its trials.\n    use a new --out directory, or "
         "repeat the command that started it to resume it";
}

// The config (with the files it extends) resolved to other values than the
// trials there started from.
std::string changed_config(const std::string& dir, const std::string& was, const std::string& now) {
  std::string changes = config_changes(was, now);
  if (changes.empty()) changes = "its content hash differs";
  return "the sweep directory '" + dir +
         "' holds trials of another version of the config: since they started, " + changes +
         "; resuming there would rank trials of both versions together.\n    use a new --out "
         "directory for the config as it is now, or restore the config (" +
         (fs::path(dir) / "config.yaml").string() +
         " holds it as the sweep started it, resolved) and repeat the command to resume";
}

// Whether `was`, the base config a sweep directory recorded, resolves today to
// `now`: then only the defaults this trainer fills in differ (a sweep started
// by an older trainer that filled fewer), not what its trials train.
bool resolves_to(const std::string& was, const std::string& now) {
  try {
    const config::Node today = config::load_config_text(was, "config.yaml").resolved;
    return config_changes(trial_base_config(today), now).empty();  // in any key order
  } catch (const std::exception&) {  // it no longer loads: another config
    return false;
  }
}

}  // namespace

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

std::string reuse_conflict(const std::string& dir, const std::string& record,
                           const std::string& base_config) {
  if (!fs::exists(fs::path(dir) / "sweep.yaml")) return "";
  const std::string old_record = read_text(fs::path(dir) / "sweep.yaml");
  if (const std::string d = first_difference(identity_lines(old_record), identity_lines(record));
      !d.empty())
    return another_sweep(dir, d);
  const std::string old_hash = recorded_hash(old_record);
  if (old_hash.empty() || old_hash == recorded_hash(record)) return "";
  const std::string old_config = read_text(fs::path(dir) / "config.yaml");
  if (resolves_to(old_config, base_config)) return "";
  return changed_config(dir, old_config, base_config);
}

void write_sweep_record(const std::string& dir, const std::string& record,
                        const std::string& base_config) {
  checkpoint::write_file_atomically((fs::path(dir) / "config.yaml").string(), base_config);
  checkpoint::write_file_atomically((fs::path(dir) / "sweep.yaml").string(), record);
}

}  // namespace trainer::sweep
