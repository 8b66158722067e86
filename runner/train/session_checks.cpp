// The checks of a session against its model and settings (session_checks.h).
#include "runner/train/session_checks.h"

#include <algorithm>

#include "data/loader.h"

namespace trainer::train {

// The training set fills at least one optimizer step per epoch.
void check_batch_fills(const config::Config& config, const Session& s, config::Diagnostics& diags) {
  const std::int64_t micro_batches = data::Loader::batches_per_epoch(
      s.train_data->size(), s.batch.micro, s.batch.world, config.data.drop_last);
  if (micro_batches < s.batch.accumulation) {
    const std::int64_t samples = s.train_data->size();
    diags.add(mark_of(config, "train.batch_size"), "train.batch_size",
              "the training set's " + std::to_string(samples) + " samples" +
                  (s.batch.world > 1 ? " over " + std::to_string(s.batch.world) + " ranks" : "") +
                  " do not fill one batch of " + std::to_string(s.batch.global) +
                  (config.data.drop_last ? " (data.drop_last: true drops a short one)" : ""),
              "use a batch_size of at most " + std::to_string(samples) +
                  (config.data.drop_last ? ", or data.drop_last: false" : ""));
  }
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
  if (eval_shape != s.sample_shape)
    diags.add(mark, "data.eval",
              "its samples are " + to_string(eval_shape) + " after the transforms, but " +
                  "data.train's are " + to_string(s.sample_shape) + " (the model's input)",
              "use an evaluation set of the same shape as the training set");
  const std::int64_t train_classes = train.num_classes(), eval_classes = eval.num_classes();
  if ((train_classes > 0) != (eval_classes > 0)) {
    const auto kind = [](std::int64_t classes) {
      return classes > 0 ? std::string("class labels") : std::string("regression targets");
    };
    diags.add(mark, "data.eval",
              "it has " + kind(eval_classes) + ", but data.train has " + kind(train_classes),
              "use an evaluation set of the same kind as the training set");
  } else if (eval_classes > train_classes) {
    diags.add(mark, "data.eval",
              "it has " + std::to_string(eval_classes) + " classes, but the model predicts " +
                  "data.train's " + std::to_string(train_classes),
              "if the training set lacks some classes, set data.train.classes: " +
                  std::to_string(eval_classes) + " (and the last layer's size)");
  } else if (train_classes == 0 && eval.target_shape() != train.target_shape()) {
    diags.add(mark, "data.eval",
              "its targets are " + to_string(eval.target_shape()) + ", but data.train's are " +
                  to_string(train.target_shape()),
              "use an evaluation set of the same shape as the training set");
  }
}

// keep_best ranks checkpoints by a metric the run records: the evaluation's
// (with an evaluation set) or the training log's loss, and accuracy (top5
// above 5 classes) for class labels. Any other name would keep nothing.
void check_checkpoint_metric(const config::Config& config, const Session& s,
                             config::Diagnostics& diags) {
  if (config.checkpoint.keep_best <= 0) return;
  std::vector<std::string> recorded;
  const bool classes = s.num_classes > 0;
  if (s.eval_data) {
    recorded.push_back("eval.loss");
    if (classes) recorded.push_back("eval.accuracy");
    if (s.num_classes > 5) recorded.push_back("eval.top5");
  }
  recorded.push_back("train.loss");
  if (classes) recorded.push_back("train.accuracy");
  const std::string& metric = config.checkpoint.metric;
  if (std::find(recorded.begin(), recorded.end(), metric) != recorded.end()) {
    // A loss is better smaller: the default mode would keep the worst checkpoints.
    if (metric.ends_with(".loss") && config.checkpoint.mode == "max" &&
        mark_of(config, "checkpoint.mode").is_default())
      diags.add(mark_of(config, "checkpoint.metric"), "checkpoint.mode",
                "keep_best would keep the checkpoints of the largest " + metric +
                    " (checkpoint.mode defaults to max)",
                "set checkpoint.mode: min");
    return;
  }
  std::string listed;
  for (const auto& name : recorded) listed += (listed.empty() ? "" : ", ") + name;
  // A default metric is reported where keep_best asks for it.
  config::Mark mark = mark_of(config, "checkpoint.metric");
  const bool defaulted = mark.is_default();
  if (defaulted) mark = mark_of(config, "checkpoint.keep_best");
  std::string why = "keep_best ranks checkpoints by '" + metric + "'" +
                    (defaulted ? " (checkpoint.metric's default)" : "") +
                    ", which this run never records";
  std::string near;  // for a name no run records
  const bool eval_metric = metric.rfind("eval.", 0) == 0;
  const bool class_metric = metric.ends_with(".accuracy") || metric == "eval.top5";
  if (eval_metric && !s.eval_data)
    why += ": it has no evaluation set (add data.eval, or data.split)";
  else if (class_metric && !classes)
    why += ": its data has regression targets, not class labels";
  else if (metric == "eval.top5")
    why += ": top5 needs more than 5 classes, and the data has " + std::to_string(s.num_classes);
  else
    near = config::nearest(metric, recorded);
  diags.add(mark, "checkpoint.metric", why,
            (near.empty() ? "it records " : "did you mean '" + near + "'? It records ") + listed);
}

}  // namespace trainer::train
