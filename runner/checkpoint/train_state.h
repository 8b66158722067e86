// TrainState: everything besides tensors that a training run needs to continue
// exactly where it stopped (step, epoch and position in it, the logging
// window's partial sums, evaluation history, schedule position, loss-scaler
// state, seeds, and how far metrics.jsonl had been written). Stored as JSON
// in the checkpoint's state file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace trainer::checkpoint {

struct TrainState {
  std::int64_t step = 0;   // optimizer steps done
  std::int64_t epoch = 0;  // the epoch in progress
  std::int64_t epoch_step =
      0;  // optimizer steps done in `epoch` (== steps per epoch: its evaluation is pending)
  std::int64_t steps_per_epoch = 0;
  std::int64_t accumulation =
      1;  // micro-batches per step: loader cursor = epoch_step * accumulation
  // The global batch in samples per step (0 in checkpoints of earlier
  // versions): with steps_per_epoch and accumulation, where the loader stands.
  std::int64_t batch_size = 0;
  // The training set's samples (0 in checkpoints of earlier versions): a
  // resume that finds another count says the data changed.
  std::int64_t train_samples = 0;
  // The training set's content digest (Dataset::content_digest, 16 hex
  // digits; "" in checkpoints of earlier versions): a resume that finds
  // another says the data changed though its count did not.
  std::string train_digest;
  // The evaluation set's content digest ("" without evaluation data, and in
  // checkpoints of earlier versions): a resume that finds another warns that
  // the evaluations before and after it measured different data.
  std::string eval_digest;
  std::int64_t total_steps = 0;
  std::int64_t seed = 0;  // every random stream is a pure function of (seed, step / epoch / sample)
  std::string schedule;   // learning-rate schedule type; its position is `step` of `total_steps`
  // The optimizer whose moments the checkpoint holds ("" in checkpoints of
  // earlier versions): adam and adamw keep moments of the same shapes.
  std::string optimizer;
  double lr = 0;  // the last learning rate applied
  // optimizer.lr as the run applied it, after optimizer.lr_scaling by its
  // ranks (0 in checkpoints of earlier versions).
  double base_lr = 0;
  nlohmann::json loss_scale =
      nlohmann::json::object();  // {scale, good_steps} with dynamic loss scaling

  // The logging window in progress (restored so the next train record matches).
  double window_loss = 0;
  // The steps whose losses window_loss sums: those with a row that counts (a
  // rank's mean over the ranks). Older checkpoints: window_steps.
  double window_loss_steps = 0;
  std::int64_t window_top1 = 0, window_rows = 0, window_steps = 0, window_samples = 0;
  // The hits of the run's last step, scored apart while off a log boundary:
  // the last window's record counts them (a longer run's same step is not
  // scored). Absent in checkpoints of earlier versions: 0.
  std::int64_t last_step_top1 = 0, last_step_rows = 0;

  nlohmann::json last_eval, best_eval, last_train;  // metrics records (null when none yet)
  std::uint64_t metrics_bytes = 0;  // metrics.jsonl length when this state was taken
  std::uint64_t timing_bytes = 0;   // timing.jsonl length
  // The TensorBoard events file's length (absent in checkpoints of earlier
  // versions: their resumes append to it as it is).
  std::optional<std::uint64_t> events_bytes;
  // checkpoint.metric measured on this checkpoint's weights (an evaluation at
  // its step), for keep_best and `eval --checkpoint best`; and its name
  // ("eval.accuracy"; empty in checkpoints of earlier versions).
  std::optional<double> metric;
  std::string metric_name;
  // train.early_stopping: {best, best_step, bad} (null: nothing followed yet).
  nlohmann::json early_stopping;
  // Saved off the checkpoint schedule (a stop signal, an evaluation that
  // failed, a sample that could not be read): the retention removes it once
  // a newer checkpoint is saved, and keep_last does not count it.
  bool unscheduled = false;

  // Non-finite numbers (a diverged window's loss, an evaluation's) are
  // written as "NaN", "Infinity" and "-Infinity", and read back as they were.
  nlohmann::json to_json() const;
  // Throws CheckpointError naming `path` and the field for a missing or
  // mistyped field, or for values no run can reach: negative counts, a step
  // that is not epoch x steps_per_epoch + epoch_step or is past total_steps,
  // window counts that contradict each other, records of later steps.
  static TrainState from_json(const nlohmann::json& j, const std::string& path);
};

}  // namespace trainer::checkpoint
