// Parsing the sweep section and expanding it into trials.
#include "runner/sweep/sweep_spec.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "runner/config/diagnostics.h"

namespace trainer::sweep {
namespace {

using config::Diagnostics;
using config::Mark;
using config::Node;

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

// Scalars of a sequence (or one scalar) as override texts.
std::vector<std::string> scalars(const Node& node, const std::string& path, Diagnostics& diags) {
  std::vector<std::string> out;
  if (node.is_scalar()) return {node.text()};
  if (!node.is_sequence() || node.items().empty()) {
    diags.add(node.mark(), path, "expected a non-empty list of values");
    return out;
  }
  for (const auto& item : node.items()) {
    if (!item.is_scalar()) {
      diags.add(item.mark(), path, "expected scalar values (numbers, strings, booleans)");
      continue;
    }
    out.push_back(item.text());
  }
  return out;
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

// Adds a grid key's values; a key already in the grid gets the new values
// appended (each value once).
void add_grid(SweepSpec& spec, const std::string& key, const std::vector<std::string>& values,
              const Mark& mark) {
  for (std::size_t i = 0; i < spec.grid.size(); ++i) {
    if (spec.grid[i].first != key) continue;
    auto& existing = spec.grid[i].second;
    for (const auto& v : values)
      if (std::find(existing.begin(), existing.end(), v) == existing.end()) existing.push_back(v);
    return;
  }
  spec.grid.emplace_back(key, values);
  spec.grid_marks.push_back(mark);
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
  Mark mark = section.is_map() ? section.mark() : Mark{"<--grid>", 0, 0};
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

RandomParam random_param(const std::string& key, const Node& node, const std::string& path,
                         Diagnostics& diags) {
  RandomParam p;
  p.key = key;
  p.mark = node.mark();
  static const std::vector<std::string> kinds = {"uniform", "log_uniform", "int", "choice"};
  if (!node.is_map() || node.size() != 1) {
    diags.add(node.mark(), path,
              "expected one distribution: {uniform: [low, high]}, {log_uniform: [low, high]}, "
              "{int: [low, high]} or {choice: [a, b, ...]}");
    return p;
  }
  p.distribution = node.key_at(0);
  const Node& args = node.value_at(0);
  if (std::find(kinds.begin(), kinds.end(), p.distribution) == kinds.end()) {
    const std::string near = config::nearest(p.distribution, kinds);
    diags.add(node.key_mark_at(0), path, "unknown distribution '" + p.distribution + "'",
              near.empty() ? "known: " + join(kinds) : "did you mean '" + near + "'?");
    return p;
  }
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
  const double v = p.distribution == "uniform"
                       ? p.low + u * (p.high - p.low)
                       : std::exp(std::log(p.low) + u * (std::log(p.high) - std::log(p.low)));
  std::snprintf(text, sizeof text, "%.6g", v);
  return text;
}

}  // namespace

SweepSpec parse_sweep(const Node& section, const std::vector<std::string>& grid_flags,
                      std::uint64_t default_seed) {
  SweepSpec spec;
  spec.random_seed = default_seed;
  Diagnostics diags;
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
            diags.add(values.mark(), path + "." + value.key_at(g),
                      "expected a list of values, found a map: grid keys are dotted config keys",
                      "write `" + first_leaf_key(values, value.key_at(g)) +
                          ": [...]` directly under sweep.grid");
            continue;
          }
          add_grid(spec, value.key_at(g), scalars(values, path + "." + value.key_at(g), diags),
                   value.key_mark_at(g));
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
              diags.add(rv.mark(), path + ".trials", "expected an integer >= 1");
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
            if (!number(rv, n) || n < 0 || n != std::floor(n))
              diags.add(rv.mark(), path + ".seed", "expected an integer >= 0");
            else
              spec.random_seed = static_cast<std::uint64_t>(n);
          } else if (rk == "params") {
            if (!rv.is_map()) {
              diags.add(rv.mark(), path + ".params",
                        "expected a map of config key to a distribution");
              continue;
            }
            for (std::size_t p = 0; p < rv.size(); ++p)
              spec.random.push_back(random_param(rv.key_at(p), rv.value_at(p),
                                                 path + ".params." + rv.key_at(p), diags));
          } else {
            diags.add(value.key_mark_at(r), path + "." + rk, "unknown key '" + rk + "'",
                      "valid keys: trials, seed, params");
          }
        }
        if (spec.random_trials > 0 && spec.random.empty())
          diags.add(value.mark(), path + ".params", "random search needs at least one parameter");
        if (!spec.random.empty() && spec.random_trials == 0)
          diags.add(value.mark(), path + ".trials", "random search needs `trials: N`");
      } else if (key == "seeds") {
        spec.seeds = scalars(value, path, diags);
      } else if (key == "objective") {
        const Node* metric = value.is_map() ? value.find("metric") : nullptr;
        const Node* mode = value.is_map() ? value.find("mode") : nullptr;
        // The fields a trial's summary holds (final_eval, last_train).
        static const std::vector<std::string> metrics = {
            "eval.loss",           "eval.accuracy",       "eval.top5",
            "train.loss",          "train.accuracy",      "train.lr",
            "train.samples_per_s", "train.step_ms",       "train.data_wait_pct",
            "train.loss_scale",    "train.skipped_steps", "train.memory_peak_mib"};
        if (!value.is_map() || !metric || !metric->is_scalar()) {
          diags.add(
              value.mark(), path,
              "expected {metric: eval.accuracy | eval.loss | train.loss ..., mode: max | min}");
        } else if (std::find(metrics.begin(), metrics.end(), metric->text()) == metrics.end()) {
          const std::string near = config::nearest(metric->text(), metrics);
          diags.add(metric->mark(), path + ".metric",
                    "unknown metric '" + metric->text() + "': the trials' summaries never hold it",
                    near.empty() ? "metrics: " + join(metrics) : "did you mean '" + near + "'?");
        } else {
          spec.metric = metric->text();
        }
        if (mode && (!mode->is_scalar() || (mode->text() != "max" && mode->text() != "min")))
          diags.add(mode->mark(), path + ".mode", "expected max or min");
        spec.maximize =
            mode ? mode->text() != "min" : spec.metric.find("loss") == std::string::npos;
      } else if (key == "max_retries") {
        double n = 0;
        if (!number(value, n) || n < 0 || n != std::floor(n))
          diags.add(value.mark(), path, "expected an integer >= 0");
        else
          spec.max_retries = static_cast<std::int64_t>(n);
      } else {
        const std::string near = config::nearest(key, keys);
        diags.add(section.key_mark_at(i), path, "unknown key '" + key + "'",
                  near.empty() ? "valid keys: " + join(keys) : "did you mean '" + near + "'?");
      }
    }
  }
  for (std::size_t f = 0; f < grid_flags.size(); ++f) {
    const std::string& flag = grid_flags[f];
    const Mark mark{"<--grid>", static_cast<int>(f) + 1, 1};
    const auto eq = flag.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == flag.size()) {
      diags.add(mark, "--grid", "expected KEY=V1,V2,... , found '" + flag + "'");
      continue;
    }
    add_grid(spec, flag.substr(0, eq), split_grid_values(flag.substr(eq + 1)), mark);
  }
  if (diags.empty()) check_trial_count(spec, section, diags);
  diags.throw_if_any();
  return spec;
}

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
      values.push_back(current);
      current.clear();
      continue;
    }
    current += c;
  }
  values.push_back(current);
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
    diags.add(Mark{"<sweep>", 0, 0}, "sweep",
              "the sweep expands to " + std::to_string(total) + " trials; at most " +
                  std::to_string(kMaxTrials) + " are allowed");
    diags.throw_if_any();
  }
  // Grid points (the product, first key varying slowest).
  std::vector<std::vector<std::string>> points = {{}};
  for (const auto& [key, values] : spec.grid) {
    std::vector<std::vector<std::string>> next;
    for (const auto& point : points)
      for (const auto& v : values) {
        auto p = point;
        p.push_back(key + "=" + v);
        next.push_back(std::move(p));
      }
    points = std::move(next);
  }
  // Random samples, each crossed with every grid point.
  if (spec.random_trials > 0) {
    std::uint64_t state = spec.random_seed;
    std::vector<std::vector<std::string>> next;
    std::vector<std::vector<std::string>> samples;
    for (std::int64_t t = 0; t < spec.random_trials; ++t) {
      std::vector<std::string> s;
      for (const auto& p : spec.random) s.push_back(p.key + "=" + sample(p, state));
      samples.push_back(std::move(s));
    }
    for (const auto& point : points)
      for (const auto& s : samples) {
        auto p = point;
        p.insert(p.end(), s.begin(), s.end());
        next.push_back(std::move(p));
      }
    points = std::move(next);
  }
  if (!spec.seeds.empty()) {
    std::vector<std::vector<std::string>> next;
    for (const auto& point : points)
      for (const auto& seed : spec.seeds) {
        auto p = point;
        p.push_back("seed=" + seed);
        next.push_back(std::move(p));
      }
    points = std::move(next);
  }
  if (points.size() == 1 && points[0].empty()) {
    Diagnostics diags;
    diags.add(Mark{"<sweep>", 0, 0}, "sweep",
              "nothing to sweep: add `sweep: {grid: {key: [v1, v2]}}` to the config or pass --grid "
              "key=v1,v2");
    diags.throw_if_any();
  }
  std::vector<Trial> trials;
  for (std::size_t i = 0; i < points.size(); ++i) {
    char id[32];
    std::snprintf(id, sizeof id, "trial-%03zu", i);
    trials.push_back({id, points[i]});
  }
  return trials;
}

}  // namespace trainer::sweep
