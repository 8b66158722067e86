// The checks of a session against its model and settings (session_checks.h).
#include "runner/train/session_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "data/attr_values.h"
#include "data/loader.h"
#include "data/quote.h"
#include "runner/config/diagnostics.h"
#include "runner/config/emit.h"
#include "runner/graph/builder.h"

namespace trainer::train {
namespace {

// "1 sample", "3 samples".
std::string counted(std::int64_t n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

}  // namespace

// The training set fills at least one optimizer step per epoch.
void check_batch_fills(const config::Config& config, const Session& s, config::Diagnostics& diags) {
  const std::int64_t micro_batches = data::Loader::batches_per_epoch(
      s.train_data->size(), s.batch.micro, s.batch.world, config.data.drop_last);
  // drop_last: false trains a short step of the micro-batches there are.
  if (micro_batches < (config.data.drop_last ? s.batch.accumulation : 1)) {
    const std::int64_t samples = s.train_data->size();
    // A default batch is reported at the data that does not fill it.
    const bool written = !mark_of(config, "train.batch_size").is_default();
    // The largest batch that fills a step: a multiple of the ranks.
    const std::int64_t world = s.batch.world;
    const std::int64_t largest = samples / world * world;
    const std::string drop_last = config.data.drop_last ? "data.drop_last: false" : "";
    std::string advice =
        largest > 0
            ? "set train.batch_size to at most " + std::to_string(largest) +
                  (world > 1 ? " (a multiple of the " + std::to_string(world) + " ranks)" : "") +
                  (drop_last.empty() ? "" : ", or " + drop_last)
            : "there are fewer samples than ranks: " +
                  (drop_last.empty() ? std::string() : "set " + drop_last + ", or ") +
                  "use at most " + counted(samples, "rank");
    diags.add(written ? mark_of(config, "train.batch_size") : written_mark_of(config, "data.train"),
              "train.batch_size",
              "the training set's " + counted(samples, "sample") +
                  (s.batch.world > 1 ? " over " + std::to_string(s.batch.world) + " ranks" : "") +
                  (samples == 1 ? " does" : " do") + std::string(" not fill one batch of ") +
                  std::to_string(s.batch.global) +
                  (written ? "" : ", the default train.batch_size") +
                  (config.data.drop_last ? " (data.drop_last: true drops a short one)" : ""),
              advice);
  }
}

std::int64_t steps_in_epoch(std::int64_t micro_batches, std::int64_t accumulation, bool drop_last) {
  return drop_last ? micro_batches / accumulation
                   : (micro_batches + accumulation - 1) / accumulation;
}

std::optional<std::int64_t> total_steps(const config::Config& config, std::int64_t steps_per_epoch,
                                        config::Diagnostics& diags) {
  const config::TrainConfig& train = config.train;
  if (train.max_steps > 0) return train.max_steps;
  if (steps_per_epoch <= 0 ||
      train.epochs <= std::numeric_limits<std::int64_t>::max() / steps_per_epoch)
    return train.epochs * steps_per_epoch;
  diags.add(mark_of(config, "train.epochs"), "train.epochs",
            std::to_string(train.epochs) + " epochs of " + std::to_string(steps_per_epoch) +
                " steps are more steps than a run can count (at most 9223372036854775807)",
            "lower train.epochs, or set train.max_steps");
  return std::nullopt;
}

namespace {

// The optimizer steps of one epoch of the session's training data.
std::int64_t session_steps_per_epoch(const config::Config& config, const Session& s) {
  const std::int64_t micro_batches = data::Loader::batches_per_epoch(
      s.train_data->size(), s.batch.micro, s.batch.world, config.data.drop_last);
  return steps_in_epoch(micro_batches, s.batch.accumulation, config.data.drop_last);
}

}  // namespace

void check_total_steps(const config::Config& config, const Session& s, config::Diagnostics& diags) {
  total_steps(config, session_steps_per_epoch(config, s), diags);
}

namespace {

// The evaluations a run of `total` steps makes before its last step, which
// alone can stop it early: at the end of each epoch of `per_epoch` steps and
// every `every` steps (0: none between).
std::int64_t evaluations_before_last_step(std::int64_t total, std::int64_t per_epoch,
                                          std::int64_t every) {
  const std::int64_t before = total - 1;
  std::int64_t count = before / per_epoch;
  if (every > 0) {
    count += before / every;
    const std::int64_t common = std::gcd(per_epoch, every);
    if (per_epoch / common <= before / every)  // both at once: counted twice
      count -= before / (per_epoch / common * every);
  }
  return count;
}

}  // namespace

void warn_early_stopping_cannot_stop(const config::Config& config, const Session& s,
                                     config::Diagnostics& warnings) {
  const std::int64_t patience = config.train.early_stopping.patience;
  if (patience <= 0 || !s.eval_data) return;
  const std::int64_t per_epoch = session_steps_per_epoch(config, s);
  config::Diagnostics ignored;  // an uncountable run is an error of its own
  const std::optional<std::int64_t> total = total_steps(config, per_epoch, ignored);
  if (per_epoch <= 0 || !total || *total <= 0) return;
  const std::int64_t every = config.train.eval_every;
  const std::int64_t evaluations = evaluations_before_last_step(*total, per_epoch, every);
  if (evaluations > patience) return;  // a best, then `patience` without improvement
  const std::string when =
      (every > 0 ? "every " + std::to_string(every) + " steps and " : std::string()) +
      "at the end of each epoch of " + std::to_string(per_epoch) + " steps";
  const std::string evaluates = evaluations == 0 ? "never evaluates"
                                : evaluations == 1
                                    ? "evaluates once"
                                    : "evaluates " + std::to_string(evaluations) + " times";
  warnings.add(mark_of(config, "train.early_stopping.patience"), "train.early_stopping.patience",
               std::to_string(patience) +
                   ": early stopping takes an evaluation that sets the best and " +
                   std::to_string(patience) + " more without improvement, but this run of " +
                   std::to_string(*total) + " steps " + evaluates + " before its last step (" +
                   when + "), so it can never stop the run",
               "evaluate more often (train.eval_every: N steps), train longer" +
                   (evaluations >= 2
                        ? ", or lower patience to " + std::to_string(evaluations - 1) + " or less"
                        : std::string()));
}

void warn_batch_beyond_set(const config::Config& config, const Session& s,
                           config::Diagnostics& warnings) {
  const std::int64_t samples = s.train_data->size();
  if (config.data.drop_last || s.batch.global <= samples) return;
  warnings.add(mark_of(config, "train.batch_size"), "train.batch_size",
               std::to_string(s.batch.global) + " is more than the training set's " +
                   counted(samples, "sample") +
                   ": with data.drop_last: false every step is the whole set as one short batch, "
                   "in memory planned for " +
                   std::to_string(s.batch.global) + " rows",
               "set train.batch_size to at most " +
                   std::to_string(samples / s.batch.world * s.batch.world) +
                   (s.batch.world > 1 ? " (the set's size, as a multiple of the " +
                                            std::to_string(s.batch.world) + " ranks)"
                                      : " (the set's size)"));
}

namespace {

// The largest magnitude among the first training samples (read as the loader
// reads them); nullopt when one cannot be read (reported where the data is
// checked).
std::optional<float> largest_stored_value(const data::Dataset& train) {
  std::vector<float> sample(static_cast<std::size_t>(numel(train.sample_shape())));
  std::vector<float> target(
      static_cast<std::size_t>(std::max<std::int64_t>(1, numel(train.target_shape()))));
  float largest = 0;
  try {
    for (std::int64_t i = 0; i < std::min<std::int64_t>(train.size(), 16); ++i) {
      std::int64_t label = 0;
      train.read(i, sample.data(), &label, target.data());
      for (const float x : sample) largest = std::max(largest, std::abs(x));
    }
  } catch (const std::runtime_error&) {
    return std::nullopt;
  }
  return largest;
}

}  // namespace

void warn_normalize_unscaled(const config::Config& config, const Session& s,
                             config::Diagnostics& warnings) {
  const auto transforms_type = [&](const char* type) {
    return std::any_of(config.data.transforms.begin(), config.data.transforms.end(),
                       [&](const config::TypedItem& item) { return item.type == type; });
  };
  // Images (samples of two or more dimensions) as stored, bytes up to 255,
  // with neither scale nor normalize: a network trains poorly, or not at all.
  // (Standardised values rarely pass 25; bytes of an image nearly always do.)
  if (s.train_data->sample_shape().size() >= 2 && !transforms_type("scale") &&
      !transforms_type("normalize")) {
    const std::optional<float> largest = largest_stored_value(*s.train_data);
    if (largest && *largest > 25)
      warnings.add(written_mark_of(
                       config, config.data.transforms.empty() ? "data.train" : "data.transforms"),
                   "data.transforms",
                   "the training samples reach the model as stored, up to " +
                       fmt::format("{:g}", *largest) +
                       ", with neither scale nor normalize: a network trains poorly on values "
                       "that large, or not at all",
                   "add {type: scale} (bytes to [0, 1], as PyTorch's ToTensor does) and "
                   "{type: normalize} (its mean and std computed from the training set when not "
                   "given)");
    return;
  }
  const config::TypedItem* unscaled = nullptr;
  for (const config::TypedItem& item : config.data.transforms) {
    if (item.type == "scale") return;  // scaled before any normalize that follows
    if (item.type != "normalize") continue;
    const std::vector<double> mean = data::numbers_or(item.attrs, "mean", {});
    const std::vector<double> deviation = data::numbers_or(item.attrs, "std", {});
    const auto within_one = [](const std::vector<double>& v) {
      return !v.empty() &&
             std::all_of(v.begin(), v.end(), [](double x) { return std::abs(x) <= 1; });
    };
    if (within_one(mean) && within_one(deviation)) unscaled = &item;
    break;
  }
  if (!unscaled) return;
  const std::optional<float> stored = largest_stored_value(*s.train_data);
  if (!stored || *stored <= 2) return;
  const float largest = *stored;
  const std::vector<double> mean = data::numbers_or(unscaled->attrs, "mean", {});
  const std::vector<double> deviation = data::numbers_or(unscaled->attrs, "std", {});
  const double normalized = (largest - mean.front()) / deviation.front();
  warnings.add(unscaled->mark, "data.transforms",
               "normalize's mean and std are those of values in [0, 1], but the training "
               "samples reach it as stored, up to " +
                   fmt::format("{:g}", largest) + " (no scale before it): it makes them up to " +
                   fmt::format("{:.0f}", normalized) + ", and training may diverge",
               "put {type: scale} before it (PyTorch's ToTensor scales bytes to [0, 1] itself)");
}

void warn_class_naming(const config::Config& config, const Session& s,
                       config::Diagnostics& warnings) {
  if (!config.data.eval || !s.eval_data) return;
  const std::vector<std::string> train = s.train_data->class_names();
  const std::vector<std::string> eval = s.eval_data->class_names();
  if (train.empty() == eval.empty()) return;
  const std::vector<std::string>& names = train.empty() ? eval : train;
  // Folders named 0, 1, 2, ...: the numbers are the names.
  bool names_are_numbers = true;
  for (std::size_t i = 0; i < names.size(); ++i)
    names_are_numbers &= names[i] == std::to_string(i);
  if (names_are_numbers) return;
  std::string order;  // "bird 0, cat 1, dog 2"
  for (std::size_t i = 0; i < names.size() && i < 6; ++i)
    order += (i ? ", " : "") + names[i] + " " + std::to_string(i);
  if (names.size() > 6) order += ", ...";
  const std::string named = train.empty() ? "data.eval" : "data.train";
  const std::string numbered = train.empty() ? "data.train" : "data.eval";
  warnings.add(written_mark_of(config, "data.eval"), "data.eval",
               named + " names its classes and " + numbered +
                   " numbers them: the numbers are taken as places among the names in sorted "
                   "order (" +
                   order + "), which nothing checks",
               "check that " + numbered +
                   "'s numbers follow that order, or give both sets "
                   "class names");
}

void warn_channels_last(const config::Config& config, const Session& s,
                        config::Diagnostics& warnings) {
  const Shape& shape = s.sample_shape;  // as the model reads it, after the transforms
  if (shape.size() != 3 || (shape[2] != 3 && shape[2] != 4) || shape[0] <= 4 || shape[1] <= 4)
    return;
  for (const graph::Node& node : s.graph.nodes) {
    const std::string& op = node.op->name;
    if (op != "conv2d" && op != "maxpool2d" && op != "avgpool2d") continue;
    if (node.inputs.empty() || node.inputs[0] != s.graph.input) continue;
    warnings.add(written_mark_of(config, "data.train"), "data.train",
                 node.name + " (" + op + ") reads the samples, " + to_string(shape) +
                     ", as [C, H, W]: " + std::to_string(shape[0]) + " channels of " +
                     std::to_string(shape[1]) + " x " + std::to_string(shape[2]) +
                     " pixels; they look channels-last [H, W, C], as NumPy image arrays often "
                     "are",
                 "store the NPY x array as [N, C, H, W]: np.save(path, "
                 "np.ascontiguousarray(x.transpose(0, 3, 1, 2)))");
    return;
  }
}

void warn_schedule_beyond_run(const config::Config& config, const Session& s,
                              config::Diagnostics& warnings) {
  const config::ScheduleConfig& schedule = config.schedule;
  config::Diagnostics ignored;  // an uncountable run is an error of its own
  const std::optional<std::int64_t> total =
      total_steps(config, session_steps_per_epoch(config, s), ignored);
  if (!total || *total <= 0) return;
  const std::int64_t steps = *total, warmup = schedule.warmup_steps;
  const std::string run = "the run's " + counted(steps, "step");
  const std::string& type = schedule.type;
  const bool warmed = type == "constant" || type == "step" || type == "multistep" ||
                      type == "cosine" || type == "linear";
  const bool decays = warmed && type != "constant";
  if (warmed && (warmup > steps || (decays && warmup == steps))) {
    char reached[32];
    std::snprintf(reached, sizeof reached, "%.3g",
                  static_cast<double>(steps) / static_cast<double>(warmup));
    warnings.add(mark_of(config, "schedule.warmup_steps"), "schedule.warmup_steps",
                 std::to_string(warmup) + " covers all " + run + ": the rate only rises, to " +
                     reached + " x optimizer.lr at the last step" +
                     (decays ? ", and the " + type + " schedule never acts" : std::string()),
                 "set schedule.warmup_steps below " + std::to_string(steps) +
                     " (a tenth of the run is usual)");
    return;  // what follows is beyond the warm-up too
  }
  if (type == "step" && warmup + schedule.step_size >= steps)
    warnings.add(mark_of(config, "schedule.step_size"), "schedule.step_size",
                 std::to_string(schedule.step_size) + ": the first decay would be at step " +
                     std::to_string(warmup + schedule.step_size) +
                     (warmup > 0 ? " (after the warm-up)" : std::string()) + ", past " + run +
                     " (steps 0 to " + std::to_string(steps - 1) + "): the rate stays optimizer.lr",
                 "set schedule.step_size below " + std::to_string(steps - warmup));
  if (type == "multistep") {
    std::vector<std::string> beyond;
    for (const std::int64_t m : schedule.milestones)
      if (m >= steps) beyond.push_back(std::to_string(m));
    if (!beyond.empty())
      warnings.add(mark_of(config, "schedule.milestones"), "schedule.milestones",
                   config::join(beyond) + (beyond.size() == 1 ? " is" : " are") +
                       " at or past the end of " + run + " (steps 0 to " +
                       std::to_string(steps - 1) +
                       "): " + (beyond.size() == 1 ? "it never applies" : "they never apply"),
                   "give milestones below " + std::to_string(steps));
  }
}

std::int64_t short_batch_rows(const config::Config& config, const Session& s) {
  if (config.data.drop_last) return 0;
  return data::Loader::equal_shard_size(s.train_data->size(), s.batch.world, false) % s.batch.micro;
}

// Classes inferred from the labels above what the model predicts: the error
// says where the largest label is (far above: most likely one wrong label).
void check_inferred_classes(const config::Config& config, const Session& s,
                            config::Diagnostics& diags) {
  const data::Dataset& train = *s.train_data;
  if (!train.classes_inferred() || s.num_classes <= 0) return;
  // Integer targets for mse: the model's loss error says how to store them.
  const config::Node loss = graph::loss_spec(config.model.node);
  if (const config::Node* type = loss.find("type");
      type && type->is_scalar() && type->text() == "mse")
    return;
  graph::ModelInput input;
  input.batch = s.batch.micro;
  input.sample_shape = s.sample_shape;
  input.num_classes = s.num_classes;
  config::Diagnostics scratch;  // the model's own errors are reported when it is built
  const graph::Graph g = graph::build_graph(config.model.node, input, scratch);
  if (g.logits == graph::kNoValue) return;
  const Shape& logits = g.values[static_cast<std::size_t>(g.logits)].shape;
  if (logits.size() != 2 || logits[1] <= 0 || s.num_classes <= logits[1]) return;
  const std::string outputs = std::to_string(logits[1]);
  const std::int64_t largest = train.max_label();
  // largest + 1 as unsigned: a label of INT64_MAX makes 2^63 classes.
  const std::string classes = std::to_string(static_cast<std::uint64_t>(largest) + 1);
  if (s.num_classes <= 2 * logits[1]) {  // near: the model's size is as likely wrong
    diags.add(g.nodes.back().mark, "model.layers",
              "the last layer gives " + outputs + " outputs but the data has " + classes +
                  " classes (its largest label, " + std::to_string(largest) + ", is at " +
                  train.max_label_origin() + ")",
              logits[1] == 1 && s.num_classes == 2
                  ? std::string("set the last layer's size to 2: cross_entropy takes one output "
                                "per class, two for a binary classifier (not the one output of "
                                "PyTorch's BCEWithLogitsLoss)")
                  : "set the last layer's size to " + classes + ", or check that label" +
                        (s.num_classes == logits[1] + 1
                             ? " (if the labels count from 1, as 1.." + outputs +
                                   ", they make one class more: class labels count from 0)"
                             : std::string()));
    return;
  }
  diags.add(config.data.train->mark, "data.train",
            "the last layer gives " + outputs + " outputs, but data.train has no `classes:` and " +
                "its largest label, " + std::to_string(largest) + " at " +
                train.max_label_origin() + ", makes " + classes + " classes",
            "check that label; set data.train.classes: " + outputs +
                " to report every label outside the model's classes, or the last layer's size "
                "to " +
                classes + " if the data has that many");
}

// An evaluation set of its own must give what the model was built for from
// the training set: the same sample shape after its transforms, and class
// labels the model predicts (or regression targets of the same shape).
void check_eval_matches_train(const config::Config& config, const Session& s,
                              config::Diagnostics& diags) {
  const data::Dataset& train = *s.train_data;
  const data::Dataset& eval = *s.eval_data;
  const config::Mark mark = config.data.eval->mark;
  Shape eval_shape;
  try {
    eval_shape = s.eval_pipeline->output_shape(eval.sample_shape());
  } catch (const std::runtime_error& e) {
    diags.add(mark, "data.eval", std::string("its samples do not fit the transforms: ") + e.what());
    return;
  }
  if (eval_shape != s.sample_shape && eval.sample_shape() == train.sample_shape()) {
    // The same samples made different: by the evaluation transforms.
    const auto& given = config.data.eval_transforms;
    diags.add(given.empty() ? mark : given.front().mark, "data.eval_transforms",
              "they make the evaluation samples " + to_string(eval_shape) +
                  ", but data.transforms makes the training samples " + to_string(s.sample_shape) +
                  " (the model's input) from samples of the same shape",
              "give data.eval_transforms the same shape-changing steps (a random_crop of the "
              "training's size, which evaluation takes as a centre crop)");
  } else if (eval_shape != s.sample_shape) {
    diags.add(mark, "data.eval",
              "its samples are " + to_string(eval_shape) + " after the transforms, but " +
                  "data.train's are " + to_string(s.sample_shape) + " (the model's input)",
              "use an evaluation set of the same shape as the training set");
  }
  const std::int64_t train_classes = train.num_classes(), eval_classes = eval.num_classes();
  if ((train_classes > 0) != (eval_classes > 0)) {
    const auto kind = [](std::int64_t classes) {
      return classes > 0 ? std::string("class labels") : std::string("regression targets");
    };
    diags.add(mark, "data.eval",
              "it has " + kind(eval_classes) + ", but data.train has " + kind(train_classes),
              "use an evaluation set of the same kind as the training set");
  } else if (eval_classes > train_classes) {
    const std::int64_t max_label = eval.classes_inferred() ? eval.max_label() : eval_classes - 1;
    const std::string largest = eval.classes_inferred()
                                    ? " (its largest label, " + std::to_string(max_label) +
                                          ", is at " + eval.max_label_origin() + ")"
                                    : "";
    // max_label + 1 as unsigned: a label of INT64_MAX makes 2^63 classes.
    const std::string count = std::to_string(static_cast<std::uint64_t>(max_label) + 1);
    diags.add(mark, "data.eval",
              "it has " + count + " classes" + largest + ", but the model predicts data.train's " +
                  std::to_string(train_classes),
              "if the training set lacks some classes, set data.train.classes: " + count +
                  " (and the last layer's size)");
  } else if (train_classes == 0 && eval.target_shape() != train.target_shape()) {
    diags.add(mark, "data.eval",
              "its targets are " + to_string(eval.target_shape()) + ", but data.train's are " +
                  to_string(train.target_shape()),
              "use an evaluation set of the same shape as the training set");
  }
  check_eval_feature_order(train.feature_names(), eval.feature_names(), mark, diags);
}

void check_eval_feature_order(const std::vector<std::string>& train,
                              const std::vector<std::string>& eval, const config::Mark& mark,
                              config::Diagnostics& diags) {
  if (train.size() != eval.size()) return;
  for (std::size_t at = 0; at < eval.size(); ++at) {
    const auto in_train = std::find(train.begin(), train.end(), eval[at]);
    if (in_train == train.end() || in_train == train.begin() + static_cast<std::ptrdiff_t>(at))
      continue;
    // A column both headers name, in another place: read by place, the model
    // would take it for another feature.
    constexpr std::size_t kListed = 50;
    std::string order;
    for (std::size_t i = 0; i < std::min(train.size(), kListed); ++i)
      order += (i ? ", " : "") + config::scalar_to_yaml(config::Node::scalar(train[i], {}));
    diags.add(
        mark, "data.eval",
        "its CSV header has feature " + data::quote(eval[at]) + " in column " +
            std::to_string(at + 1) + " of the features, where data.train's has it in column " +
            std::to_string(in_train - train.begin() + 1) +
            ": features are read in the file's order, not by name, so the model would take "
            "one feature for another",
        train.size() <= kListed
            ? "list them in data.train's order: data.eval.features: [" + order + "]"
            : "write the evaluation file with data.train's order of columns (pandas: "
              "df[train_columns].to_csv(...)), or list them in that order in data.eval.features");
    return;
  }
}

namespace {

// A setting that follows a metric: where its keys are, what it does with the
// metric, and which metrics it may follow.
struct MetricUse {
  std::string metric, mode;
  std::string metric_key, mode_key, enabling_key;  // enabling_key: reported for a default metric
  std::string action;                              // "keep_best ranks checkpoints by"
  std::string worst_pick;                          // "keep_best would keep the checkpoints of"
  bool eval_only = false;
};

// `use.metric` is one the run records (the evaluation's with an evaluation
// set, the training log's unless eval_only; accuracy, and top5 above 5
// classes, for class labels), and a default mode does not pick its worst.
void check_metric_use(const config::Config& config, const Session& s, const MetricUse& use,
                      config::Diagnostics& diags) {
  std::vector<std::string> recorded;
  const bool classes = s.num_classes > 0;
  if (s.eval_data) {
    recorded.push_back("eval.loss");
    if (classes) recorded.push_back("eval.accuracy");
    if (s.num_classes > 5) recorded.push_back("eval.top5");
  }
  if (!use.eval_only) {
    recorded.push_back("train.loss");
    if (classes) recorded.push_back("train.accuracy");
  }
  const std::string& metric = use.metric;
  if (std::find(recorded.begin(), recorded.end(), metric) != recorded.end()) {
    // A loss is better smaller, an accuracy larger: a default mode must not
    // pick the worst.
    const bool loss = metric.ends_with(".loss");
    const std::string better = loss ? "min" : "max";
    // A mode written against the default metric is the same mistake: a
    // mode only makes sense with the metric it was written for.
    const bool mode_default = mark_of(config, use.mode_key).is_default();
    const bool metric_default = mark_of(config, use.metric_key).is_default();
    if (use.mode != better && mode_default)
      diags.add(mark_of(config, use.metric_key), use.mode_key,
                use.worst_pick + " the " + (loss ? "largest " : "smallest ") + metric + " (" +
                    use.mode_key + " defaults to " + use.mode + ")",
                "set " + use.mode_key + ": " + better);
    else if (use.mode != better && metric_default)
      diags.add(
          mark_of(config, use.mode_key), use.mode_key,
          use.worst_pick + " the " + (loss ? "largest " : "smallest ") + metric + " (" +
              use.metric_key + " defaults to " + metric + ")",
          "set " + use.metric_key + " to the metric meant, or " + use.mode_key + ": " + better);
    return;
  }
  const std::string listed = config::join(recorded);
  // A default metric is reported where the setting that uses it is.
  config::Mark mark = mark_of(config, use.metric_key);
  const bool defaulted = mark.is_default();
  if (defaulted) mark = mark_of(config, use.enabling_key);
  std::string why = use.action + " '" + metric + "'" +
                    (defaulted ? " (" + use.metric_key + "'s default)" : "") +
                    ", which this run never records" + (use.eval_only ? " at its evaluations" : "");
  std::string near;  // for a name no run records
  const bool eval_metric = metric.rfind("eval.", 0) == 0;
  const bool class_metric = metric.ends_with(".accuracy") || metric == "eval.top5";
  if (eval_metric && !s.eval_data)
    why += ": it has no evaluation set (add data.eval, or data.split)";
  else if (class_metric && !classes)
    why += ": its data has regression targets, not class labels";
  else if (metric == "eval.top5")
    why += ": top5 needs more than 5 classes, and the data has " + std::to_string(s.num_classes);
  else if (use.eval_only && metric.rfind("train.", 0) == 0)
    why += ": it follows the evaluations";
  else
    near = config::nearest(metric, recorded);
  const std::string records =
      recorded.empty() ? "records none (add data.eval, or data.split)" : "records " + listed;
  diags.add(mark, use.metric_key, why,
            near.empty() ? "it " + records : "did you mean '" + near + "'? It " + records);
}

}  // namespace

void check_checkpoint_metric(const config::Config& config, const Session& s,
                             config::Diagnostics& diags) {
  if (config.checkpoint.keep_best > 0)
    check_metric_use(config, s,
                     {config.checkpoint.metric, config.checkpoint.mode, "checkpoint.metric",
                      "checkpoint.mode", "checkpoint.keep_best", "keep_best ranks checkpoints by",
                      "keep_best would keep the checkpoints of", false},
                     diags);
  const config::EarlyStoppingConfig& stop = config.train.early_stopping;
  if (stop.patience > 0)
    check_metric_use(config, s,
                     {stop.metric, stop.mode, "train.early_stopping.metric",
                      "train.early_stopping.mode", "train.early_stopping.patience",
                      "early stopping follows", "early stopping would wait for", true},
                     diags);
}

void warn_checkpoint_ranking(const config::Config& config, const Session& s,
                             config::Diagnostics& warnings) {
  // By value: a run's config.yaml writes the defaults out.
  const config::CheckpointConfig defaults;
  if (config.checkpoint.keep_best > 0 ||
      (config.checkpoint.metric == defaults.metric && config.checkpoint.mode == defaults.mode))
    return;
  check_metric_use(
      config, s,
      {config.checkpoint.metric, config.checkpoint.mode, "checkpoint.metric", "checkpoint.mode",
       "checkpoint.mode", "trainer eval --checkpoint best ranks checkpoints by",
       "trainer eval --checkpoint best would pick the checkpoint of", false},
      warnings);
}

}  // namespace trainer::train
