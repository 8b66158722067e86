// Parsing the sweep section and expanding it into trials.
#include "runner/sweep/sweep_spec.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "runner/config/config.h"
#include "runner/config/diagnostics.h"
#include "runner/config/emit.h"
#include "runner/config/overrides.h"
#include "runner/config/scalar.h"
#include "runner/config/yaml_reader.h"
#include "runner/sweep/objective.h"

namespace trainer::sweep {
namespace {

// The largest integer a double holds exactly (2^53): the most a seed may be.
constexpr double kLargestExactInteger = 9007199254740992.0;
constexpr std::int64_t kLargestSeed = 9007199254740992;  // 2^53, exact in a JSON reader
// The most times a failed trial is tried again.
constexpr std::int64_t kMaxRetries = 1000;

using config::Diagnostics;
using config::Mark;
using config::Node;

using config::join;

// A list of scalars as one flow-list override text, "[1, 8, 8]" (as a
// --grid value may be written); false when an item is not a scalar.
bool flow_list(const Node& list, std::string& out) {
  out = "[";
  for (const auto& item : list.items()) {
    if (!item.is_scalar()) return false;
    out += (out.size() > 1 ? ", " : "") + config::scalar_to_yaml(item);
  }
  out += "]";
  return true;
}

// The values of a sequence (or one scalar) as override texts: YAML that
// reads back as the value written, so a quoted "1" stays a string and "x #y"
// keeps what a plain override would cut off as a comment. A value may be a
// list of scalars (a data shape), written as a flow list.
std::vector<std::string> scalars(const Node& node, const std::string& path, Diagnostics& diags) {
  std::vector<std::string> out;
  if (node.is_scalar()) return {config::scalar_to_yaml(node)};
  if (!node.is_sequence() || node.items().empty()) {
    diags.add(node.mark(), path, "expected a non-empty list of values");
    return out;
  }
  for (const auto& item : node.items()) {
    std::string list;
    if (item.is_scalar()) {
      out.push_back(config::scalar_to_yaml(item));
    } else if (item.is_sequence() && flow_list(item, list)) {
      out.push_back(list);
    } else {
      diags.add(item.mark(), path,
                "expected scalar values (numbers, strings, booleans) or lists of them",
                "a list value is written as a list inside the list: [[1, 8, 8], [1, 4, 16]]");
    }
  }
  return out;
}

// Reports the i-th key of `map` (at `path`) as unknown, suggesting the
// nearest of `valid`, else listing them.
void unknown_key(const Node& map, std::size_t i, const std::string& path,
                 const std::vector<std::string>& valid, Diagnostics& diags) {
  const std::string& key = map.key_at(i);
  const std::string near = config::nearest(key, valid);
  diags.add(map.key_mark_at(i), path + "." + key, "unknown key '" + key + "'",
            near.empty() ? "valid keys: " + join(valid) : "did you mean '" + near + "'?");
}

bool number(const Node& node, double& out) {
  if (!node.is_scalar()) return false;
  try {
    std::size_t used = 0;
    out = std::stod(node.text(), &used);
    return used == node.text().size() && std::isfinite(out);
  } catch (const std::exception&) {
    return false;
  }
}

// A number by its value: 0.1, 0.10 and 1e-1 are one, and so are 0 and -0.0.
std::string number_identity(double value) {
  if (value == 0) value = 0;
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return std::string("number ") + text;
}

// What a value (an override text) means, for telling values apart, as the
// config reads scalars (config::classify): an integer by its exact value, a
// number by its value (0.1, 0.10 and 1e-1 are one, and so are 0.0 and -0.0)
// but apart from an integer (an integer setting refuses 1.0, so 1 and 1.0
// stay two values, whichever comes first), a boolean by its truth (true, True
// and TRUE), a string by its text whether quoted or not (cosine and "cosine"
// are one), but a quoted number stays a string ("2" is not 2: a number field
// refuses it); a list item by item.
std::string value_identity(const Node& node) {
  if (node.is_sequence()) {
    std::string out = "[";
    for (const auto& item : node.items()) out += value_identity(item) + ",";
    return out + "]";
  }
  switch (config::classify(node)) {
    case config::ScalarKind::null:
      return "null";
    case config::ScalarKind::boolean:
      return *config::as_bool(node) ? "boolean true" : "boolean false";
    case config::ScalarKind::integer:
      if (const auto n = config::as_int(node)) return "integer " + std::to_string(*n);
      break;
    case config::ScalarKind::number:
      if (const auto n = config::as_number(node)) return number_identity(*n);
      break;
    default:
      break;
  }
  return "text " + node.text();
}

std::string value_identity(const std::string& override_text) {
  Diagnostics ignored;
  bool ok = true;
  const Node node = config::parse_yaml(override_text, "<value>", ignored, &ok);
  return ok && (node.is_scalar() || node.is_sequence()) ? value_identity(node)
                                                        : "as written " + override_text;
}

// `values` without those that mean what an earlier one does (value_identity):
// each would run the same trials again.
std::vector<std::string> distinct_values(const std::vector<std::string>& values) {
  std::vector<std::string> out, seen;
  for (const auto& v : values) {
    std::string identity = value_identity(v);
    if (std::find(seen.begin(), seen.end(), identity) != seen.end()) continue;
    seen.push_back(std::move(identity));
    out.push_back(v);
  }
  return out;
}

// Adds a grid key's values, each remembered as written at `mark`; a key
// already in the grid gets the new values appended. Each value once: a
// value written twice (or another way, value_identity) would run the same
// trial twice.
void add_grid(SweepSpec& spec, const std::string& key, const std::vector<std::string>& values,
              const Mark& mark) {
  std::size_t i = 0;
  while (i < spec.grid.size() && spec.grid[i].first != key) ++i;
  if (i == spec.grid.size()) {
    spec.grid.emplace_back(key, std::vector<std::string>{});
    spec.grid_marks.push_back(mark);
    spec.grid_value_marks.emplace_back();
  }
  auto& existing = spec.grid[i].second;
  std::vector<std::string> together = existing;
  together.insert(together.end(), values.begin(), values.end());
  for (const auto& v : distinct_values(together)) {
    if (std::find(existing.begin(), existing.end(), v) != existing.end()) continue;
    existing.push_back(v);
    spec.grid_value_marks[i].push_back(mark);
  }
}

// The first dotted key under a nested map ({optimizer: {lr: ...}} -> optimizer.lr).
std::string first_leaf_key(const Node& node, const std::string& prefix) {
  if (!node.is_map() || node.size() == 0) return prefix;
  return first_leaf_key(node.value_at(0), prefix + "." + node.key_at(0));
}

std::uint64_t saturating_multiply(std::uint64_t a, std::uint64_t b) {
  if (a != 0 && b > UINT64_MAX / a) return UINT64_MAX;
  return a * b;
}

// Refuses a sweep of more than kMaxTrials trials, at the largest factor.
void check_trial_count(const SweepSpec& spec, const Node& section, Diagnostics& diags) {
  const std::uint64_t total = trial_count(spec);
  if (total <= kMaxTrials) return;
  std::string factors;
  Mark mark = section.is_map() ? section.mark() : Mark{config::kGridFlags, 0, 0};
  std::string key = "sweep";
  std::uint64_t largest = 0;
  for (std::size_t i = 0; i < spec.grid.size(); ++i) {
    const std::uint64_t n = spec.grid[i].second.size();
    factors += (factors.empty() ? "" : " x ") + std::to_string(n) + " (" + spec.grid[i].first + ")";
    if (n > largest)
      largest = n, mark = spec.grid_marks[i], key = "sweep.grid." + spec.grid[i].first;
  }
  if (spec.random_trials > 0) {
    const auto n = static_cast<std::uint64_t>(spec.random_trials);
    factors += (factors.empty() ? "" : " x ") + std::to_string(n) + " (random.trials)";
    if (n > largest) {
      largest = n, key = "sweep.random.trials";
      if (const Node* r = section.is_map() ? section.find("random") : nullptr)
        if (const Node* t = r->is_map() ? r->find("trials") : nullptr) mark = t->mark();
    }
  }
  if (!spec.seeds.empty()) {
    factors += (factors.empty() ? "" : " x ") + std::to_string(spec.seeds.size()) + " (seeds)";
    if (spec.seeds.size() > largest)
      if (const Node* seeds = section.is_map() ? section.find("seeds") : nullptr)
        mark = seeds->mark(), key = "sweep.seeds";
  }
  diags.add(mark, key,
            "the sweep expands to " +
                (total == UINT64_MAX ? std::string("more than 10^19") : std::to_string(total)) +
                " trials (" + factors + "); a sweep may have at most " + std::to_string(kMaxTrials),
            "sweep fewer values, or split the search into several sweeps");
}

// An int range samples whole numbers from low to high: its bounds must be
// whole numbers (a range such as [16.5, 16.7] holds none to sample), small
// enough to count exactly.
void check_int_range(const RandomParam& p, const Node& args, const std::string& path,
                     Diagnostics& diags) {
  constexpr double kExact = 9007199254740992.0;  // 2^53
  const bool whole = p.low == std::floor(p.low) && p.high == std::floor(p.high);
  if (whole && std::fabs(p.low) <= kExact && std::fabs(p.high) <= kExact) return;
  const std::string found = "[" + args.items()[0].text() + ", " + args.items()[1].text() + "]";
  if (whole) {
    diags.add(args.mark(), path, "expected bounds of at most 2^53, found " + found);
    return;
  }
  const auto low = static_cast<long long>(std::ceil(p.low));
  const auto high = static_cast<long long>(std::floor(p.high));
  diags.add(args.mark(), path, "expected whole-number bounds, found " + found,
            (low <= high ? "write [" + std::to_string(low) + ", " + std::to_string(high) +
                               "] (the whole numbers it holds)"
                         : std::string("it holds no whole number")) +
                ", or use {uniform: [low, high]} for a real number");
}

RandomParam random_param(const std::string& key, const Node& node, const std::string& path,
                         Diagnostics& diags) {
  RandomParam p;
  p.key = key;
  p.mark = node.mark();
  static const std::vector<std::string> kinds = {"uniform", "log_uniform", "int", "choice"};
  // Reports each key of the map that names no distribution; whether any did.
  const auto unknown_distributions = [&] {
    bool unknown = false;
    for (std::size_t i = 0; node.is_map() && i < node.size(); ++i) {
      const std::string& name = node.key_at(i);
      if (std::find(kinds.begin(), kinds.end(), name) != kinds.end()) continue;
      const std::string near = config::nearest(name, kinds);
      diags.add(node.key_mark_at(i), path, "unknown distribution '" + name + "'",
                near.empty() ? "known: " + join(kinds) : "did you mean '" + near + "'?");
      unknown = true;
    }
    return unknown;
  };
  if (unknown_distributions()) return p;
  if (!node.is_map() || node.size() != 1) {
    diags.add(node.mark(), path,
              "expected one distribution: {uniform: [low, high]}, {log_uniform: [low, high]}, "
              "{int: [low, high]} or {choice: [a, b, ...]}");
    return p;
  }
  p.distribution = node.key_at(0);
  const Node& args = node.value_at(0);
  if (p.distribution == "choice") {
    p.choices = scalars(args, path + ".choice", diags);
    return p;
  }
  if (!args.is_sequence() || args.items().size() != 2 || !number(args.items()[0], p.low) ||
      !number(args.items()[1], p.high) || p.low > p.high) {
    diags.add(args.mark(), path + "." + p.distribution, "expected [low, high] with low <= high");
    return p;
  }
  if (p.distribution == "log_uniform" && p.low <= 0)
    diags.add(args.mark(), path + ".log_uniform", "expected low > 0 for a log-uniform range");
  if (p.distribution == "int") check_int_range(p, args, path + ".int", diags);
  return p;
}

// splitmix64: the sweep's own generator, so a sweep expands the same everywhere.
std::uint64_t next_random(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double unit(std::uint64_t& state) {
  return static_cast<double>(next_random(state) >> 11) * 0x1.0p-53;
}

std::string sample(const RandomParam& p, std::uint64_t& state) {
  char text[64];
  if (p.distribution == "choice") return p.choices[next_random(state) % p.choices.size()];
  if (p.distribution == "int") {
    const auto low = static_cast<std::int64_t>(std::ceil(p.low)),
               high = static_cast<std::int64_t>(std::floor(p.high));
    const auto span = static_cast<std::uint64_t>(std::max<std::int64_t>(0, high - low) + 1);
    return std::to_string(low + static_cast<std::int64_t>(next_random(state) % span));
  }
  const double u = unit(state);
  const bool uniform = p.distribution == "uniform";
  const double v = uniform ? p.low + u * (p.high - p.low)
                           : std::exp(std::log(p.low) + u * (std::log(p.high) - std::log(p.low)));
  // The fewest digits (at least 6) that keep the sample within 1e-4 of the
  // range of its value and inside the range: a narrow range far from 0
  // ([0.99999, 0.999999]) needs more than 6, a usual one does not.
  const auto scale = [&](double x) { return uniform ? x : std::log(x); };
  const double tolerance = 1e-4 * (scale(p.high) - scale(p.low));
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, v);
    const double written = std::strtod(text, nullptr);
    if (written >= p.low && written <= p.high && std::abs(scale(written) - scale(v)) <= tolerance)
      break;
  }
  return text;
}

// `objective: {metric: M, mode: max | min}`: M one a trial's summary holds;
// without a mode, the metric's better way (an error for one that has none).
void parse_objective(const Node& value, const std::string& path, SweepSpec& spec,
                     Diagnostics& diags) {
  static const std::vector<std::string> keys = {"metric", "mode"};
  bool unknown = false;
  for (std::size_t i = 0; value.is_map() && i < value.size(); ++i)
    if (std::find(keys.begin(), keys.end(), value.key_at(i)) == keys.end()) {
      unknown_key(value, i, path, keys, diags);
      unknown = true;
    }
  const Node* metric = value.is_map() ? value.find("metric") : nullptr;
  const Node* mode = value.is_map() ? value.find("mode") : nullptr;
  std::vector<std::string> names;
  for (const auto& m : objective_metrics()) names.push_back(m.name);
  if (unknown && !metric) return;  // a misspelt metric: said at its key
  if (!value.is_map() || !metric || !metric->is_scalar()) {
    diags.add(value.mark(), path,
              "expected {metric: eval.accuracy | eval.loss | train.loss ..., mode: max | min}");
    return;
  }
  const ObjectiveMetric* known = find_objective_metric(metric->text());
  if (!known) {
    const std::string near = config::nearest(metric->text(), names);
    diags.add(metric->mark(), path + ".metric",
              "unknown metric '" + metric->text() + "': the trials' summaries never hold it",
              near.empty() ? "metrics: " + join(names) : "did you mean '" + near + "'?");
    return;
  }
  spec.metric = known->name;
  spec.metric_mark = metric->mark();
  spec.objective_given = true;
  if (mode) {
    if (!mode->is_scalar() || (mode->text() != "max" && mode->text() != "min"))
      diags.add(mode->mark(), path + ".mode", "expected max or min");
    spec.maximize = mode->text() != "min";
  } else if (known->better.empty()) {
    diags.add(metric->mark(), path + ".mode",
              known->name + " is neither better larger nor smaller: say which to rank first",
              "add mode: max or mode: min");
  } else {
    spec.maximize = known->better == "max";
  }
}

// Every point followed by every option's overrides (points varying slowest).
std::vector<Trial> crossed(const std::vector<Trial>& points, const std::vector<Trial>& options) {
  std::vector<Trial> out;
  for (const auto& point : points)
    for (const auto& option : options) {
      Trial t = point;
      t.overrides.insert(t.overrides.end(), option.overrides.begin(), option.overrides.end());
      t.sources.insert(t.sources.end(), option.sources.begin(), option.sources.end());
      out.push_back(std::move(t));
    }
  return out;
}

// One option per value of the grid's i-th key (a spec not from parse_sweep
// may lack the values' marks: then they are unknown).
std::vector<Trial> grid_options(const SweepSpec& spec, std::size_t i) {
  const auto& [key, values] = spec.grid[i];
  std::vector<Trial> options;
  for (std::size_t v = 0; v < values.size(); ++v) {
    const bool known = i < spec.grid_value_marks.size() && v < spec.grid_value_marks[i].size();
    options.push_back({"",
                       {key + "=" + values[v]},
                       {{known ? spec.grid_value_marks[i][v] : Mark{}, "sweep.grid." + key}}});
  }
  return options;
}

// The random search's samples, drawn in order (sample by sample, parameter by
// parameter) from the sweep's seed.
std::vector<Trial> random_samples(const SweepSpec& spec) {
  std::uint64_t state = spec.random_seed;
  std::vector<Trial> samples;
  for (std::int64_t t = 0; t < spec.random_trials; ++t) {
    Trial s;
    for (const auto& p : spec.random) {
      s.overrides.push_back(p.key + "=" + sample(p, state));
      s.sources.push_back({p.mark, "sweep.random.params." + p.key});
    }
    samples.push_back(std::move(s));
  }
  return samples;
}

std::vector<Trial> seed_options(const SweepSpec& spec) {
  std::vector<Trial> options;
  for (const auto& seed : spec.seeds)
    options.push_back({"", {"seed=" + seed}, {{spec.seeds_mark, "sweep.seeds"}}});
  return options;
}

// One place where the sweep sets a config key: the grid (the file's or a
// --grid flag), the random search or the seeds.
struct SweptPlace {
  std::string key;    // the config key it sets
  std::string where;  // sweep.grid, sweep.random.params or sweep.seeds
  Mark mark;
};

// "--grid flag 2", or the part of the sweep section.
std::string owner(const SweptPlace& place) {
  if (place.mark.file == config::kGridFlags) return config::to_string(place.mark);
  return place.where;
}

std::string describe(const SweptPlace& place) {
  if (place.mark.file == config::kGridFlags) return owner(place);
  return place.where + " at " + config::to_string(place.mark);
}

// A key set by two of the grid, the random search and the seeds would be set
// twice in every trial, the last value winning: an error at its second place
// (in the order written, the --grid flags last), naming the first. The file's
// grid and --grid flags are one grid (their values of a key are added up).
void check_swept_once(const std::vector<SweptPlace>& places, Diagnostics& diags) {
  for (std::size_t i = 0; i < places.size(); ++i)
    for (std::size_t j = 0; j < i; ++j) {
      const SweptPlace &first = places[j], &second = places[i];
      if (first.key != second.key || first.where == second.where) continue;
      diags.add(second.mark,
                second.where == "sweep.seeds" ? second.where : second.where + "." + second.key,
                second.key + " is swept by " + describe(first) +
                    " too: every trial would set it twice, the last value replacing the other",
                "sweep " + second.key + " in one place: drop it from " + owner(second) +
                    " or from " + owner(first));
      break;
    }
}

// The sweep's own settings are no trial's: the trials' configs have no sweep
// section, so sweeping one would run the same trial again and again. Nor is
// output.dir (the trials run in the sweep's directory), nor `extends`, which
// is written in a file, never set as an override.
void check_swept_keys(const std::vector<SweptPlace>& places, Diagnostics& diags) {
  for (const SweptPlace& place : places) {
    if (place.key == "sweep" || place.key.rfind("sweep.", 0) == 0)
      diags.add(place.mark, place.where + "." + place.key,
                place.key +
                    " is a setting of the sweep, not of its trials (their configs have "
                    "no sweep section): every trial would be the same",
                "set it once under sweep:, and sweep trial settings only");
    if (place.key == "output.dir")
      diags.add(place.mark, place.where + "." + place.key,
                "every trial runs in the sweep's own directory (SWEEP_DIR/trials/trial-NNN), "
                "wherever output.dir points: every trial would be the same",
                "choose where the sweep goes with `trainer sweep --out DIR` (or output.dir, "
                "set once)");
    if (place.key == "extends" || place.key.rfind("extends[", 0) == 0)
      diags.add(place.mark, place.where + "." + place.key,
                "extends is read from the config file before any value is set, so a sweep "
                "cannot set it",
                "sweep the settings the bases differ in (sweep: {grid: {optimizer.lr: [...]}}), "
                "or write a config that extends each base and sweep each");
  }
}

}  // namespace

bool from_sweep_section(const OverrideSource& source) {
  return !source.mark.file.empty() && source.mark.file != config::kGridFlags;
}

bool points_at(const config::Diagnostic& d, const OverrideSource& source) {
  return d.mark == source.mark;
}

bool says_without_effect(const config::Diagnostic& warning) {
  return warning.message.rfind("has no effect", 0) == 0;
}

std::vector<SweptKey> swept_keys(const SweepSpec& spec) {
  std::vector<SweptKey> out;
  for (std::size_t i = 0; i < spec.grid.size(); ++i)
    out.push_back({spec.grid[i].first, spec.grid_marks[i], "sweep.grid." + spec.grid[i].first});
  for (const auto& param : spec.random)
    out.push_back({param.key, param.mark, "sweep.random.params." + param.key});
  if (!spec.seeds.empty()) out.push_back({"seed", spec.seeds_mark, "sweep.seeds"});
  return out;
}

std::vector<config::Diagnostic> swept_without_effect(
    const SweepSpec& spec, const std::vector<config::Diagnostic>& warnings) {
  std::vector<config::Diagnostic> out;
  for (const SweptKey& swept : swept_keys(spec)) {
    const auto about_it = std::find_if(warnings.begin(), warnings.end(), [&](const auto& w) {
      return w.key_path == swept.key && says_without_effect(w);
    });
    if (about_it != warnings.end())
      out.push_back({swept.mark, swept.key_path,
                     "the sweep varies " + swept.key + ", which " + about_it->message +
                         ": the trials that differ only there train alike",
                     about_it->suggestion});
  }
  return out;
}

ChecksRead checks_read(const config::Config& trial) {
  return {trial.devices.gpus.empty(), !trial.data.eval && trial.data.split > 0};
}

std::string setting_read_by_checks(const std::string& override_text, ChecksRead checks) {
  const std::string key = config::override_key(override_text);
  for (const char* ignored : {"optimizer.lr", "optimizer.weight_decay", "optimizer.beta1",
                              "optimizer.beta2", "optimizer.eps", "optimizer.nesterov"})
    if (key == ignored) return {};
  // The seed picks the samples data.split holds out; nothing else the checks
  // read depends on it (the weights it draws are not built by them).
  if (key == "seed" && !checks.seed_splits_data) return {};
  // The schedule's warmup and decay steps are checked against the run's
  // length; anything else but the optimizer is read as it is.
  if (!key.starts_with("optimizer.")) return override_text;
  // The rest of the optimizer counts only in the memory plan, and there only
  // by the state the optimizer keeps: its type, and whether SGD has momentum.
  if (!checks.plans_memory) return {};
  if (key == "optimizer.momentum") {
    const std::string value = override_text.substr(override_text.find('=') + 1);
    char* end = nullptr;
    const double momentum = std::strtod(value.c_str(), &end);
    const bool zero = end != value.c_str() && *end == '\0' && momentum == 0;
    return key + (zero ? "=0" : "=not 0");
  }
  return override_text;
}

config::Diagnostics overrides_of_swept_keys(const std::vector<std::string>& overrides,
                                            const SweepSpec& spec) {
  config::Diagnostics diags;
  for (std::size_t i = 0; i < overrides.size(); ++i) {
    const std::string key = config::override_key(overrides[i]);
    for (const auto& [swept_key, mark, key_path] : swept_keys(spec)) {
      // The key itself, or a part of it (data.train.shape[0] of a swept shape).
      const bool under = key.size() > swept_key.size() && key.starts_with(swept_key) &&
                         (key[swept_key.size()] == '.' || key[swept_key.size()] == '[');
      if (key != swept_key && !under) continue;
      const bool flag = mark.file == config::kGridFlags;
      diags.add({config::kCommandLine, static_cast<int>(i) + 1, 1}, key,
                "the sweep varies " + swept_key + " (" +
                    (flag ? std::string("a --grid flag") : "at " + config::to_string(mark)) +
                    "), so every trial would replace this value" +
                    (under ? " with its own " + swept_key : std::string()),
                "drop the override, or " +
                    (flag ? std::string("the --grid flag") : "the key from the sweep section"));
    }
  }
  return config::annotate_overrides(diags, overrides);
}

config::Diagnostic swept_value_error(const config::Diagnostic& d, const std::string& swept,
                                     const OverrideSource& source,
                                     std::string& same_for_every_value) {
  std::string message = d.message;
  if (!d.key_path.empty() && d.key_path != config::override_key(swept))
    message = d.key_path + ": " + message;
  config::Diagnostic out{points_at(d, source) ? source.mark : d.mark, source.key_path, message,
                         d.suggestion};
  same_for_every_value = config::format(out);
  out.message = "with " + swept + ": " + message;
  return out;
}

SweepSpec parse_sweep(const Node& section, const std::vector<std::string>& grid_flags,
                      std::uint64_t default_seed) {
  SweepSpec spec;
  spec.random_seed = default_seed;
  if (section.is_map()) spec.metric_mark = spec.section_mark = section.mark();
  Diagnostics diags;
  std::vector<SweptPlace> places;  // in the order written
  if (!section.is_null() && !section.is_map()) diags.add(section.mark(), "sweep", "expected a map");
  if (section.is_map()) {
    static const std::vector<std::string> keys = {"grid", "random", "seeds", "objective",
                                                  "max_retries"};
    for (std::size_t i = 0; i < section.size(); ++i) {
      const std::string& key = section.key_at(i);
      const Node& value = section.value_at(i);
      const std::string path = "sweep." + key;
      if (key == "grid") {
        if (!value.is_map()) {
          diags.add(value.mark(), path, "expected a map of config key to a list of values");
          continue;
        }
        for (std::size_t g = 0; g < value.size(); ++g) {
          const Node& values = value.value_at(g);
          if (values.is_map()) {  // {optimizer: {lr: [...]}}: keys are dotted paths
            const std::string leaf = first_leaf_key(values, value.key_at(g));
            if (leaf.rfind("sweep.", 0) == 0) {  // no way to write it would be taken
              check_swept_keys({{leaf, path, values.mark()}}, diags);
              continue;
            }
            // An override's path cannot hold a dotted grid key: a map can.
            const bool overridden = values.mark().file == config::kCommandLine;
            diags.add(values.mark(), path + "." + value.key_at(g),
                      "expected a list of values, found a map: grid keys are dotted config keys",
                      overridden
                          ? "give the grid as a map: 'sweep.grid={" + leaf +
                                ": [...]}' (trainer sweep also takes --grid " + leaf + "=V1,V2,...)"
                          : "write `" + leaf + ": [...]` directly under sweep.grid");
            continue;
          }
          add_grid(spec, value.key_at(g), scalars(values, path + "." + value.key_at(g), diags),
                   value.key_mark_at(g));
          places.push_back({value.key_at(g), path, value.key_mark_at(g)});
        }
      } else if (key == "random") {
        if (!value.is_map()) {
          diags.add(value.mark(), path,
                    "expected {trials: N, seed: S, params: {key: distribution}}");
          continue;
        }
        for (std::size_t r = 0; r < value.size(); ++r) {
          const std::string& rk = value.key_at(r);
          const Node& rv = value.value_at(r);
          double n = 0;
          if (rk == "trials") {
            if (!number(rv, n) || n < 1 || n != std::floor(n)) {
              diags.add(rv.mark(), path + ".trials",
                        "expected an integer >= 1, found " + config::describe(rv));
            } else {
              const auto cap = static_cast<double>(kMaxTrials);
              spec.random_trials = static_cast<std::int64_t>(std::min(n, cap + 1));
              if (n > cap)
                diags.add(rv.mark(), path + ".trials",
                          "expected at most " + std::to_string(kMaxTrials) + " trials, found " +
                              rv.text(),
                          "a sweep may have at most " + std::to_string(kMaxTrials) + " trials");
            }
          } else if (rk == "seed") {
            const std::optional<std::int64_t> seed = config::as_int(rv);
            if (!seed || *seed < 0 || *seed > kLargestSeed)
              diags.add(rv.mark(), path + ".seed",
                        "expected an integer from 0 to 2^53 (9007199254740992), found " +
                            config::describe(rv));
            else
              spec.random_seed = static_cast<std::uint64_t>(*seed);
          } else if (rk == "params") {
            if (!rv.is_map()) {
              diags.add(rv.mark(), path + ".params",
                        "expected a map of config key to a distribution");
              continue;
            }
            for (std::size_t p = 0; p < rv.size(); ++p) {
              spec.random.push_back(random_param(rv.key_at(p), rv.value_at(p),
                                                 path + ".params." + rv.key_at(p), diags));
              places.push_back({rv.key_at(p), path + ".params", rv.key_mark_at(p)});
            }
          } else {
            unknown_key(value, r, path, {"trials", "seed", "params"}, diags);
          }
        }
        if (spec.random_trials > 0 && spec.random.empty())
          diags.add(value.mark(), path + ".params", "random search needs at least one parameter");
        // A `trials` written but refused above is one error, not two.
        if (!spec.random.empty() && spec.random_trials == 0 && !value.find("trials"))
          diags.add(value.mark(), path + ".trials", "random search needs `trials: N`");
      } else if (key == "seeds") {
        spec.seeds = distinct_values(scalars(value, path, diags));
        spec.seeds_mark = section.key_mark_at(i);
        places.push_back({"seed", path, spec.seeds_mark});
      } else if (key == "objective") {
        parse_objective(value, path, spec, diags);
      } else if (key == "max_retries") {
        double n = 0;
        if (!number(value, n) || n < 0 || n != std::floor(n) || n > kMaxRetries)
          diags.add(value.mark(), path,
                    "expected an integer from 0 to " + std::to_string(kMaxRetries) + ", found " +
                        config::describe(value),
                    "max_retries tries a failed trial again that many times");
        else
          spec.max_retries = static_cast<std::int64_t>(n);
      } else {
        unknown_key(section, i, "sweep", keys, diags);
      }
    }
  }
  for (std::size_t f = 0; f < grid_flags.size(); ++f) {
    const std::string& flag = grid_flags[f];
    const Mark mark{config::kGridFlags, static_cast<int>(f) + 1, 1};
    const auto eq = flag.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == flag.size()) {
      diags.add(mark, "--grid", "expected KEY=V1,V2,... , found '" + flag + "'");
      continue;
    }
    add_grid(spec, flag.substr(0, eq), split_grid_values(flag.substr(eq + 1)), mark);
    places.push_back({flag.substr(0, eq), "sweep.grid", mark});
  }
  check_swept_keys(places, diags);
  check_swept_once(places, diags);
  if (diags.empty()) check_trial_count(spec, section, diags);
  diags.throw_if_any();
  return spec;
}

namespace {

// `text` without the spaces and tabs around it.
std::string trimmed(const std::string& text) {
  const std::size_t first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

}  // namespace

std::vector<std::string> split_grid_values(const std::string& text) {
  std::vector<std::string> values;
  std::string current;
  int depth = 0;
  char quote = 0;
  for (char c : text) {
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '[' || c == '{') {
      ++depth;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    } else if (c == ',' && depth == 0) {
      values.push_back(trimmed(current));
      current.clear();
      continue;
    }
    current += c;
  }
  values.push_back(trimmed(current));
  return values;
}

std::uint64_t trial_count(const SweepSpec& spec) {
  std::uint64_t total = 1;
  for (const auto& [key, values] : spec.grid) total = saturating_multiply(total, values.size());
  if (spec.random_trials > 0)
    total = saturating_multiply(total, static_cast<std::uint64_t>(spec.random_trials));
  if (!spec.seeds.empty()) total = saturating_multiply(total, spec.seeds.size());
  return total;
}

std::vector<Trial> expand_trials(const SweepSpec& spec) {
  if (const std::uint64_t total = trial_count(spec); total > kMaxTrials) {
    Diagnostics diags;
    diags.add(spec.section_mark, "sweep",
              "the sweep expands to " + std::to_string(total) + " trials; at most " +
                  std::to_string(kMaxTrials) + " are allowed");
    diags.throw_if_any();
  }
  // Grid points (the product, first key varying slowest), each crossed with
  // every random sample, each of those once per seed.
  std::vector<Trial> points = {Trial{}};
  for (std::size_t i = 0; i < spec.grid.size(); ++i)
    points = crossed(points, grid_options(spec, i));
  if (spec.random_trials > 0) points = crossed(points, random_samples(spec));
  if (!spec.seeds.empty()) points = crossed(points, seed_options(spec));
  if (points.size() == 1 && points[0].overrides.empty()) {
    Diagnostics diags;
    diags.add(spec.section_mark, "sweep",
              "nothing to sweep: add `sweep: {grid: {key: [v1, v2]}}` to the config or pass --grid "
              "key=v1,v2");
    diags.throw_if_any();
  }
  for (std::size_t i = 0; i < points.size(); ++i) {
    char id[32];
    std::snprintf(id, sizeof id, "trial-%03zu", i);
    points[i].id = id;
  }
  return points;
}

}  // namespace trainer::sweep
