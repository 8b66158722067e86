// The training loop behind train() (trainer.h), shared by the files that
// define it. A TrainLoop holds what a run carries from step to step (the
// loader, the optimizer and loss scaler, the logging window, the latest
// records, where a resume started) and its methods are the loop's parts:
// train_loop.cpp runs them, train_loop_step.cpp makes a step,
// train_loop_logging.cpp a log point, train_loop_eval.cpp an evaluation,
// train_loop_checkpoint.cpp a checkpoint and train_loop_resume.cpp a resume.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "data/loader.h"
#include "ops/collective.h"
#include "ops/kernel.h"
#include "ops/tensor.h"
#include "ops/update.h"
#include "runner/checkpoint/checkpoint_store.h"
#include "runner/checkpoint/train_state.h"
#include "runner/graph/program.h"
#include "runner/train/loss_log.h"
#include "runner/train/loss_scale.h"
#include "runner/train/metrics.h"
#include "runner/train/progress.h"
#include "runner/train/rank_buffers.h"
#include "runner/train/session.h"
#include "runner/train/tfevents.h"
#include "runner/train/trainer.h"

namespace trainer::train::loop {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t);

// The first error writing the log (train.log on a full disk): the logger
// reports it here, and the loop stops at its next log point.
class LogFailure {
 public:
  void record(const std::string& message) {
    const std::lock_guard lock(mutex_);
    if (first_.empty()) first_ = message;
  }
  std::string first() const {
    const std::lock_guard lock(mutex_);
    return first_;
  }

 private:
  mutable std::mutex mutex_;
  std::string first_;
};

// The root rank logs to the terminal and train.log; other ranks only report warnings.
std::shared_ptr<spdlog::logger> make_logger(const std::string& run_dir,
                                            const Collective& collective,
                                            const std::shared_ptr<LogFailure>& failure);

// Reads `metric` ("eval.accuracy", "train.loss") from the latest records.
std::optional<double> metric_value(const std::string& metric, const nlohmann::json& last_eval,
                                   const nlohmann::json& last_train);

// The training records of one logging window. The window in a checkpoint is
// every rank's (TrainLoop::state_now): its counts go to the root alone, since
// the log point sums them over the ranks; its loss is the ranks' mean, which
// every rank keeps (the log point averages).
struct Window {
  // The sum of the step losses of the steps that counted rows, and how many
  // such steps (a step whose every label is ignore_index has no loss).
  double loss = 0, loss_steps = 0, wait = 0;
  Hits hits;
  // The hits of the run's last step when it is no log step: its record counts
  // them, a checkpoint does not (a longer run resumed from there logs later).
  Hits last_step_hits;
  std::int64_t steps = 0, samples = 0;
  // The window's rates are of the steps this process timed: a resume inside
  // a window restores its counts but not its time.
  std::int64_t timed_steps = 0, timed_samples = 0;
  Clock::time_point start = Clock::now();
  // Time spent outside the steps (evaluations, checkpoints), left out of the
  // rates; `pauses` counts the WindowPauses open.
  double paused = 0;
  int pauses = 0;
  Clock::time_point paused_since;
};

// The window's clock stopped while an evaluation or a checkpoint runs, so
// that they show in neither the step time nor the data wait. Nested pauses
// count once. The steps queued on the device before it are the window's:
// they finish before the clock stops.
class WindowPause {
 public:
  WindowPause(Window& window, Backend& backend) : window_(window) {
    if (window_.pauses++ > 0) return;
    backend.synchronize();
    window_.paused_since = Clock::now();
  }
  ~WindowPause() {
    if (--window_.pauses == 0) window_.paused += seconds_since(window_.paused_since);
  }
  WindowPause(const WindowPause&) = delete;
  WindowPause& operator=(const WindowPause&) = delete;

 private:
  Window& window_;
};

class TrainLoop {
 public:
  TrainLoop(const Session& s, graph::Program& program, const std::string& run_dir,
            Collective& collective, const TrainOptions& options);
  ~TrainLoop() {
    program_.set_update(nullptr);  // the update refers to slots_
    if (!scaler_.enabled()) return;
    try {  // the backend outlives this run: later ones start unscaled
      backend_.vector_ops().stop_loss_scaling();
    } catch (const std::exception& e) {
      log_->warn("loss scaling could not be stopped on the backend: {}", e.what());
    }
  }
  TrainLoop(const TrainLoop&) = delete;
  TrainLoop& operator=(const TrainLoop&) = delete;

  nlohmann::json run();

 private:
  void resume_or_initialize();
  void warn_if_newer_checkpoint_gone(std::int64_t loaded_step);
  // A resume whose evaluation data is not what the checkpoint's run evaluated
  // on: a warning, since the metrics before and after it (and the best so far
  // that keep_best and early stopping compare with) measured other data.
  void warn_if_eval_data_changed(const checkpoint::TrainState& st, const std::string& path) const;
  void open_metrics();
  // summary.json for a resumed session that trains, until it records its end.
  void record_session_running() const;
  void prepare_optimizer();
  // The learning rate, momentum and Adam step of the update that ends the
  // step after `at_step`. Under loss scaling the update takes them from the
  // backend's count of applied updates instead (skipped steps hold the
  // schedule).
  void schedule_update(std::int64_t at_step);
  // What the schedule sets for update `update` (0-based).
  ScheduledUpdate scheduled_update(std::int64_t update) const;
  // One optimizer step's micro-batches (`accumulation`, or those left at the
  // end of an epoch), each fed, run and its loss recorded.
  void train_micro_batches();
  // The loader's next batch, its wait counted.
  const data::Batch& next_micro_batch();
  // Forward and backward of micro-batch `micro` of the step, its loss (seeded
  // with `weight`) recorded, its hits counted at a log point and at the last step.
  void run_micro_batch(const data::Batch& batch, std::int64_t micro, double weight);
  // The end of a step whose update is not part of it: reduce over ranks, then
  // update (which checks, unscales, clips or skips on the backend).
  void finish_step();
  // Multiplies this rank's gradients by `factor` through host memory.
  void scale_gradients_on_host(float factor);
  // Plain batchnorm's running statistics, which each rank computes from its
  // own batches, become their mean over the ranks on every rank: after each
  // step on CPU ranks (host memory: a copy and one small reduction, so that
  // every rank holds them alike at every step and a resume from any step is
  // exact), before each evaluation and checkpoint on GPU ranks (a read-back
  // after each step would hold up the device).
  void average_rank_buffers() { average_over_ranks(backend_, rank_buffers_, collective_); }
  // Brings the host's copy of the loss scale up to date from the backend (a
  // read-back: log points and checkpoints only), warns of the steps skipped
  // since, stops a run whose scaling collapsed, and sends the schedule of the
  // updates that can be applied before the next read.
  void sync_loss_scale();
  void send_schedule();
  // train.ema_decay: the weight the update after step_ moves the averaged
  // weights by (train.ema_warmup: smaller decays at first), set on the
  // backend like the optimizer's values.
  void set_average_weight();
  // Folds the losses recorded since the last call into the window, in step
  // order (the same sums as reading each loss at its step).
  void settle_losses();
  // Throws when train.log could not be written (LogFailure).
  void check_log_written() const;
  void log_window();
  // Adds the window just logged (`window_seconds` of steps, this rank's
  // `window_samples`) to what the input-bound check watches; past a second of
  // steps, warns once when the steps waited for data more than a tenth of it.
  void watch_input(double window_seconds, std::int64_t window_samples);
  // Evaluates and records; false when `may_stop` and a stop was asked for
  // before the evaluation finished (a single process: nothing is recorded).
  bool run_eval(std::int64_t at_step, bool may_stop = false);
  // run_eval(step_) after `epoch_step` steps of this epoch. When the
  // evaluation fails on a single process (its data unreadable midway, its
  // record not written), the training since the last checkpoint is saved as
  // it stood before the evaluation (stopped_inside_epoch_ when set), the
  // evaluation still to make, and the error goes on up. A stop asked for
  // during an evaluation before the last step saves the same and sets
  // stopped_by_ (the evaluation at the end of training finishes).
  void evaluate_keeping_training(std::int64_t epoch_step);
  // train.early_stopping after an evaluation: counts it, and sets
  // early_stopped_ when the metric has not improved for `patience`
  // evaluations and `may_stop` (not at the last step).
  void follow_early_stopping(std::int64_t at_step, bool may_stop);
  // The state after `epoch_step` steps of `at_epoch` (== steps_per_epoch: its
  // evaluation is pending).
  checkpoint::TrainState state_now(std::int64_t at_epoch, std::int64_t epoch_step);
  // The record files' lengths now (metrics.jsonl, timing.jsonl, events) into `st`.
  void record_lengths_into(checkpoint::TrainState& st) const;
  void stamp_metric(checkpoint::TrainState& st) const;
  // A resume with no step to train: the run ended at its checkpoint (an
  // evaluation pending there was made and recorded before the run ended).
  bool writes_nothing() const {
    return options_.resume && resumed_.step >= total_steps_ && !end_unrecorded_;
  }
  // The end of a run stopped after its last step's checkpoint, before it
  // recorded that end (summary.json; `last` and the retention too): made
  // again as the run made it, from the checkpoint (the state before the last
  // window's record and the final evaluation, or after them).
  void record_end();
  // checkpoint.keep_best by an eval.* metric ranks checkpoints by an
  // evaluation of their own weights: then every evaluation is followed by one.
  bool keeps_best() const {
    return cfg_.checkpoint.keep_best > 0 && s_.eval_data != nullptr &&
           cfg_.checkpoint.metric.rfind("eval.", 0) == 0;
  }
  // A record into metrics.jsonl, and into the TensorBoard events file.
  void write_metrics(const nlohmann::json& record);
  void save_state(const checkpoint::TrainState& st);
  // Without loss scaling (which skips such steps), an update that left a
  // weight inf or NaN lost the weights: the run stops at the next log point
  // or checkpoint. A read-back on a GPU.
  void stop_if_weights_went_non_finite(bool loss_was_finite);
  void save_checkpoint(std::int64_t at_epoch, std::int64_t epoch_step) {
    save_state(state_now(at_epoch, epoch_step));
  }
  // Whether checkpoint.every_steps / every_epochs (or keep_best, which saves
  // at each evaluation) saves at `step`, the end of an epoch or not, with
  // `epochs_done` epochs ended.
  bool checkpoint_scheduled_at(std::int64_t step, bool epoch_end, std::int64_t epochs_done) const {
    const config::CheckpointConfig& c = cfg_.checkpoint;
    if (c.every_steps > 0 && step % c.every_steps == 0) return true;
    if (epoch_end && c.every_epochs > 0 && epochs_done % c.every_epochs == 0) return true;
    return keeps_best() &&
           (epoch_end || (cfg_.train.eval_every > 0 && step % cfg_.train.eval_every == 0));
  }
  // A checkpoint saved because the run stops (a stop signal; the training
  // before a failure): unless the schedule saves at its step too, it is off
  // the schedule, and the retention removes it once a newer one is saved. (A
  // run's last checkpoint, its result, is never off the schedule.)
  void save_unscheduled(checkpoint::TrainState st) {
    // At an epoch's end: its evaluation pending (epoch_step == steps per
    // epoch), or made (the next epoch at its step 0).
    const bool pending = st.epoch_step == steps_per_epoch_;
    const bool epoch_end = pending || (st.epoch_step == 0 && st.step > 0);
    st.unscheduled = !checkpoint_scheduled_at(st.step, epoch_end, st.epoch + (pending ? 1 : 0));
    save_state(st);
  }
  // The step's first batch holds a sample that cannot be read: none of the
  // step ran, so the training up to it is saved (one rank; unless a
  // checkpoint of this step exists). Returns what the loader's error goes on
  // with: where the training is kept, and how to resume once the file is
  // repaired (empty when nothing is kept).
  std::string keep_training_before(std::int64_t epoch_step);
  // The run's summary, written to summary.json unless `record` is false.
  nlohmann::json summary(bool record = true);
  // The loop itself: steps, log points, evaluations and checkpoints to the end
  // (or to a stop signal).
  void train_to_end();
  // After a checkpoint of a step before the last: whether a stop signal came
  // meanwhile (agreed over the ranks; sets stopped_by_), so that it stops there.
  bool stop_asked_while_saving();
  // summary.json for a run that stopped on an error: status "failed", the
  // error, and how far it got (the last checkpoint to resume from).
  void write_failure_summary(const std::string& error);
  // The summary.json of a resumed run that had already finished at
  // `at_step` (its checkpoint's step); nullopt when it had not.
  std::optional<nlohmann::json> finished_summary(std::int64_t at_step) const;
  // That summary, for a resume of a run that had finished (nothing to train).
  std::optional<nlohmann::json> finished_;
  // Resumed at the run's last step without that summary: record_end() is due.
  bool end_unrecorded_ = false;
  // A resume with nothing to do leaves the directory as it was: the run had
  // finished, or its checkpoint is past the steps this config trains (a
  // lower train.max_steps given to an interrupted run), whose config.yaml
  // and summary.json must go on describing what the run trained.
  bool keeps_directory_ = false;
  // The resumed checkpoint is where early stopping ended the run: as many
  // evaluations without improvement as train.early_stopping.patience allows.
  bool early_stopped_at_checkpoint() const;
  // A run that max_steps stopped inside an epoch on an eval_every step wrote
  // its checkpoint before that last evaluation, which a longer run makes
  // too: resumed further, the evaluation is made again, as the longer run
  // makes it (early stopping included). Returns whether it was.
  bool replay_evaluation_at_checkpoint();

  const Session& s_;
  const config::Config& cfg_;
  graph::Program& program_;
  Backend& backend_;
  Collective& collective_;
  const TrainOptions options_;
  const std::string run_dir_;
  std::shared_ptr<LogFailure> log_failure_ = std::make_shared<LogFailure>();
  std::shared_ptr<spdlog::logger> log_;
  const int world_;
  const float rank_average_;

  data::Loader loader_;
  const std::int64_t accumulation_, steps_per_epoch_, total_steps_, log_every_;

  checkpoint::CheckpointStore store_;
  checkpoint::TrainState resumed_;
  std::string resumed_from_;
  const checkpoint::RetentionPolicy retention_;
  MetricsWriter metrics_, timing_;
  EventsWriter events_;  // output.tensorboard
  // With output.tensorboard: false, the length of the events file an earlier
  // part of the run wrote, as this part leaves it (cut back to the
  // checkpoint): its checkpoints record it.
  std::optional<std::uint64_t> unwritten_events_bytes_;
  // Timing can never repeat bit for bit: with `deterministic: true` it lives only in timing.jsonl.
  const bool timing_in_metrics_;

  std::vector<ParamSlot> slots_;
  std::vector<TensorRef> grads_;
  // The buffers each rank computes on its own (empty on one rank), and
  // whether they are averaged after every step (CPU ranks) or only before an
  // evaluation or a checkpoint reads them (GPU ranks).
  const std::vector<TensorRef> rank_buffers_;
  const bool rank_buffers_each_step_;
  OptimizerStep opt_;
  float configured_momentum_ = 0;  // optimizer.momentum (sgd) or beta1 (adam)
  const bool averaging_;           // train.ema_decay > 0: the program keeps averaged weights
  float average_weight_ = -1;      // the weight set on the backend last (-1: none yet)
  LossScaler scaler_;
  const std::set<std::int64_t> inject_overflow_;
  const double inject_checkpoint_delay_s_;
  const double inject_eval_delay_s_;
  const double inject_step_delay_s_;
  bool update_in_step_ = false;
  // Loss scaling: how many updates' schedule the backend holds, and the step
  // of the last read of its state (read again at least that often).
  std::int64_t schedule_window_ = 0, synced_at_step_ = 0;
  // Where the optimizer update runs, for the summary: "in the step", or
  // "after the step: <why>".
  std::string update_placement_;

  std::vector<float> logits_;
  // The label the loss leaves out (cross_entropy's ignore_index): its rows
  // count in neither a step's mean nor the accuracy.
  const std::optional<std::int64_t> ignored_;
  // What this rank's gradients of the step are multiplied by to make them the
  // mean over its counted rows (train_micro_batches); 1 when no row is ignored.
  double count_correction_ = 1;
  Window window_;
  // The windows' time, data wait and samples since the input-bound check
  // last looked: it judges a second of steps or more, never one short window.
  struct InputWatch {
    double seconds = 0, wait = 0;
    std::int64_t samples = 0;
  } input_watch_;
  bool warned_input_bound_ = false;
  ProgressBar progress_;
  double last_loss_ = 0;
  // Each micro-batch's loss stays in backend memory until the window needs it:
  // no device synchronisation per step for the loss.
  LossLog losses_;
  std::vector<double> loss_weights_;  // per recorded loss: its share of its step's counted rows

  Clock::time_point run_start_;
  std::int64_t first_step_ = 0;  // the step this process started from (a resume's checkpoint)
  // The run's time left at its pace since this process started (negative: unknown yet).
  double seconds_left() const {
    return time_left(seconds_since(run_start_), step_ - first_step_, total_steps_ - step_);
  }
  double total_wait_ = 0;
  std::int64_t total_samples_ = 0;
  nlohmann::json best_eval_, last_eval_, last_train_;
  // Early stopping: the best value of its metric and its step, the
  // evaluations since, and whether they ended training.
  std::optional<double> stop_best_;
  std::int64_t stop_best_step_ = 0, stop_bad_evals_ = 0;
  bool early_stopped_ = false;
  std::int64_t step_ = 0, epoch_ = 0;
  int stopped_by_ = 0;
  std::string last_checkpoint_;
  std::int64_t last_checkpoint_step_ = -1;  // the step of last_checkpoint_
  // The run ends inside an epoch (max_steps), or at an epoch's end off a log
  // boundary: the state a longer run resumed from there needs is the one
  // before the forced last record and evaluation.
  std::optional<checkpoint::TrainState> stopped_inside_epoch_;
};

}  // namespace trainer::train::loop
