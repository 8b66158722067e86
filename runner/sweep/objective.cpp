// What a trial records of the objective metrics, read off its config: the
// same conditions under which the training loop writes each field of its
// eval and train records (runner/train/train_loop_eval.cpp and
// train_loop_logging.cpp).
#include "runner/sweep/objective.h"

#include "runner/train/session.h"

namespace trainer::sweep {
namespace {

bool is_timing(const std::string& metric) {
  return metric == "train.samples_per_s" || metric == "train.step_ms" ||
         metric == "train.data_wait_pct";
}

bool is_loss_scaling(const std::string& metric) {
  return metric == "train.loss_scale" || metric == "train.skipped_steps";
}

bool has_eval_set(const config::Config& config) {
  return config.data.eval.has_value() || config.data.split > 0;
}

bool is_class_metric(const std::string& metric) {
  return metric.ends_with(".accuracy") || metric == "eval.top5";
}

}  // namespace

const std::vector<ObjectiveMetric>& objective_metrics() {
  static const std::vector<ObjectiveMetric> metrics = {
      {"eval.loss", "min"},           {"eval.accuracy", "max"},
      {"eval.top5", "max"},           {"train.loss", "min"},
      {"train.accuracy", "max"},      {"train.lr", ""},
      {"train.samples_per_s", "max"}, {"train.step_ms", "min"},
      {"train.data_wait_pct", "min"}, {"train.loss_scale", ""},
      {"train.skipped_steps", "min"}, {"train.memory_peak_mib", "min"}};
  return metrics;
}

const ObjectiveMetric* find_objective_metric(const std::string& name) {
  for (const auto& m : objective_metrics())
    if (m.name == name) return &m;
  return nullptr;
}

std::string why_not_recorded(const std::string& metric, const config::Config& config,
                             std::optional<std::int64_t> num_classes) {
  const bool class_metric = is_class_metric(metric);
  if (metric.starts_with("eval.") && !has_eval_set(config))
    return "it has no evaluation set (add data.eval, or data.split)";
  if (class_metric && num_classes && *num_classes == 0)
    return "its data has regression targets, not class labels";
  if (metric == "eval.top5" && num_classes && *num_classes <= 5)
    return "top5 is recorded above 5 classes, and its data has " + std::to_string(*num_classes);
  if (is_timing(metric) && config.deterministic)
    return "deterministic: true leaves timing out of the metrics (it varies run to run)";
  if (is_loss_scaling(metric) && config.precision.mode != "fp16")
    return "only fp16 runs scale the loss, and it runs " + config.precision.mode;
  return "";
}

std::vector<std::string> recorded_metrics(const config::Config& config,
                                          std::optional<std::int64_t> num_classes) {
  std::vector<std::string> out;
  for (const auto& m : objective_metrics())
    if (why_not_recorded(m.name, config, num_classes).empty()) out.push_back(m.name);
  return out;
}

void ObjectiveCheck::learn_classes(const config::Config& config) {
  if (classes_known_) return;
  classes_known_ = true;
  try {
    classes_ = train::training_classes(config);
  } catch (const std::exception&) {
    // The data cannot be opened here: the trial will say why when it runs.
  }
}

void ObjectiveCheck::add(const std::string& trial_id, const config::Config& config) {
  if (is_class_metric(spec_.metric)) learn_classes(config);
  const std::string why = why_not_recorded(spec_.metric, config, classes_);
  if (why.empty()) {
    ++recording_;
    return;
  }
  if (first_why_.empty()) {
    first_why_ = why;
    first_trial_ = trial_id;
    learn_classes(config);
    recorded_ = recorded_metrics(config, classes_);
  }
  ++missing_;
}

std::optional<config::Diagnostic> ObjectiveCheck::error(const std::string& config_path) const {
  if (missing_ == 0) return std::nullopt;
  config::Mark mark = spec_.metric_mark;
  if (mark.file.empty()) mark = {config_path, 0, 0};  // no sweep section: the default metric
  const std::string metric =
      "'" + spec_.metric + "'" + (spec_.objective_given ? "" : " (the default objective)");
  const std::string who =
      recording_ == 0 ? "the trials never record " + metric
                      : std::to_string(missing_) + " of " + std::to_string(missing_ + recording_) +
                            " trials never record " + metric + " (" + first_trial_ + ")";
  return config::Diagnostic{mark, "sweep.objective.metric", who + ": " + first_why_,
                            recorded_.empty()
                                ? "they record none of the objective metrics"
                                : "set it to one they record: " + config::join(recorded_)};
}

void check_objective_recorded(const SweepSpec& spec, const config::Config& config,
                              const std::string& config_path, config::Diagnostics& diags) {
  ObjectiveCheck check(spec);
  check.add("", config);
  if (const auto e = check.error(config_path))
    diags.add(e->mark, e->key_path, e->message, e->suggestion);
}

}  // namespace trainer::sweep
