// The metrics a sweep's objective may name: which way each is better, and
// which of them a trial with a given config records, so that an objective
// its trials never record is refused (by `trainer sweep` and `validate`)
// before any trial runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runner/config/config.h"
#include "runner/config/diagnostics.h"
#include "runner/sweep/sweep_spec.h"

namespace trainer::sweep {

struct ObjectiveMetric {
  std::string name;    // "eval.accuracy": a field of the summary's eval or train record
  std::string better;  // "max" | "min" | "" (no better direction: the mode must be given)
};

// Every metric a trial's summary may hold.
const std::vector<ObjectiveMetric>& objective_metrics();

// nullptr for a name not in objective_metrics().
const ObjectiveMetric* find_objective_metric(const std::string& name);

// The objective metrics a run of `config` records, its training data having
// `num_classes` classes (0: regression targets; nullopt: not known, taken as
// enough for every class metric).
std::vector<std::string> recorded_metrics(const config::Config& config,
                                          std::optional<std::int64_t> num_classes);

// Why a run of `config` never records `metric` ("it has no evaluation set"),
// or "" when it does.
std::string why_not_recorded(const std::string& metric, const config::Config& config,
                             std::optional<std::int64_t> num_classes);

// Gathers, trial config by trial config, whether the trials record the
// sweep's objective (their data's classes learnt once, from the first trial
// whose data opens, and only when the objective or the error needs them).
class ObjectiveCheck {
 public:
  explicit ObjectiveCheck(const SweepSpec& spec) : spec_(spec) {}

  void add(const std::string& trial_id, const config::Config& config);

  // An error at the objective's metric when some trial never records it:
  // why, and what the trials record instead. `config_path` places an error
  // about the default metric in a config without a sweep section.
  std::optional<config::Diagnostic> error(const std::string& config_path) const;

 private:
  void learn_classes(const config::Config& config);

  const SweepSpec& spec_;
  bool classes_known_ = false;
  std::optional<std::int64_t> classes_;
  std::size_t recording_ = 0, missing_ = 0;
  std::string first_why_, first_trial_;
  std::vector<std::string> recorded_;
};

// The check for one config (what `trainer validate` has): adds its error to `diags`.
void check_objective_recorded(const SweepSpec& spec, const config::Config& config,
                              const std::string& config_path, config::Diagnostics& diags);

}  // namespace trainer::sweep
