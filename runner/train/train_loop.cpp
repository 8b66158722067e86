// The training loop behind train() (trainer.h), its class in train_loop.h:
// the loop's construction, the loop itself (steps, log points, evaluations
// and checkpoints to the end or to a stop signal), the recording of an end a
// stop cut short, and the summary, of a finished run or a failed one.
#include "runner/train/train_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runner/checkpoint/durable_file.h"
#include "runner/checkpoint/stop_signal.h"
#include "runner/config/diagnostics.h"
#include "runner/json_text.h"
#include "runner/train/loss_log.h"
#include "runner/train/memory_report.h"
#include "runner/train/run_records.h"
#include "runner/train/session_checks.h"
#include "runner/train/trainer.h"

namespace trainer::train {
namespace loop {
namespace {

// SIGINT / SIGTERM received here, or (with several ranks) by any rank: all
// ranks must stop after the same step. A plain sum: the metric reduction
// would close the ranks' load-balance window at every step.
int agreed_stop_signal(Collective& collective) {
  const int local = checkpoint::stop_requested();
  if (collective.world() <= 1) return local;
  // How many ranks were asked to stop, and by which signals: a rank that has
  // none yet (the launcher's copy on its way, or a signal sent to one rank)
  // stops on theirs when they agree on one, else on SIGTERM.
  const double sig = local;
  std::vector<double> asked = {local != 0 ? 1.0 : 0.0, sig, sig * sig};
  collective.all_reduce_statistics(asked);
  if (local != 0 || asked[0] == 0) return local;
  const double mean = asked[1] / asked[0];
  const bool one_signal = asked[2] * asked[0] == asked[1] * asked[1];
  return one_signal ? static_cast<int>(std::lround(mean)) : SIGTERM;
}

// Steps (1-based) whose gradients are overwritten with inf, from the environment
// variable TRAINER_INJECT_OVERFLOW ("5" or "5,9"): a test hook that drives the
// real overflow path (detection, skip, backoff) at chosen steps.
std::set<std::int64_t> injected_overflow_steps() {
  std::set<std::int64_t> steps;
  const char* text = std::getenv("TRAINER_INJECT_OVERFLOW");
  if (!text) return steps;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) steps.insert(std::stoll(item));
  return steps;
}

// Seconds the root sleeps before writing each checkpoint, from the environment
// variable TRAINER_INJECT_CHECKPOINT_DELAY: a test hook standing in for slow
// storage (the other ranks wait for the write under TRAINER_CHECKPOINT_TIMEOUT).
double injected_checkpoint_delay_s() {
  const char* text = std::getenv("TRAINER_INJECT_CHECKPOINT_DELAY");
  return text ? std::max(0.0, std::strtod(text, nullptr)) : 0.0;
}

// Seconds each training step takes longer, from the environment variable
// TRAINER_INJECT_STEP_DELAY: a test hook standing in for a slow model, whose
// step time the records must show.
double injected_step_delay_s() {
  const char* text = std::getenv("TRAINER_INJECT_STEP_DELAY");
  return text ? std::max(0.0, std::strtod(text, nullptr)) : 0.0;
}

// Seconds each evaluation batch takes longer, from the environment variable
// TRAINER_INJECT_EVAL_DELAY: a test hook standing in for a long evaluation
// (a stop asked for during it).
double injected_eval_delay_s() {
  const char* text = std::getenv("TRAINER_INJECT_EVAL_DELAY");
  return text ? std::max(0.0, std::strtod(text, nullptr)) : 0.0;
}

// The optimizer steps the run takes (total_steps), or a config error at
// train.epochs when they cannot be counted.
std::int64_t steps_to_train(const config::Config& config, std::int64_t steps_per_epoch) {
  config::Diagnostics diags;
  const std::optional<std::int64_t> steps = total_steps(config, steps_per_epoch, diags);
  diags.throw_if_any();
  return *steps;
}

// The losses a logging window records: `log_every` steps of `accumulation`
// micro-batches each, but no more steps than the run takes (a log_every
// beyond them logs the last step only), and at most what a LossLog holds.
std::size_t window_losses(std::int64_t log_every, std::int64_t total_steps,
                          std::int64_t accumulation) {
  const auto steps =
      static_cast<std::size_t>(std::max<std::int64_t>(1, std::min(log_every, total_steps)));
  const auto per_step = static_cast<std::size_t>(std::max<std::int64_t>(1, accumulation));
  return steps > LossLog::kMaxCapacity / per_step ? LossLog::kMaxCapacity : steps * per_step;
}

}  // namespace

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

TrainLoop::TrainLoop(const Session& s, graph::Program& program, const std::string& run_dir,
                     Collective& collective, const TrainOptions& options)
    : s_(s),
      cfg_(s.config),
      program_(program),
      backend_(program.backend()),
      collective_(collective),
      options_(options),
      run_dir_(run_dir),
      log_(make_logger(run_dir, collective, log_failure_)),
      world_(collective.world()),
      rank_average_(1.0f / static_cast<float>(world_)),
      loader_(s.train_data, s.train_pipeline, loader_options(s, true, backend_, &collective)),
      accumulation_(s.batch.accumulation),
      steps_per_epoch_(
          steps_in_epoch(loader_.batches_per_epoch(), accumulation_, loader_.options().drop_last)),
      total_steps_(steps_to_train(cfg_, steps_per_epoch_)),
      log_every_(std::max<std::int64_t>(1, cfg_.train.log_every)),
      store_(run_dir),
      retention_{cfg_.checkpoint.keep_last, cfg_.checkpoint.keep_best,
                 cfg_.checkpoint.mode == "max", cfg_.checkpoint.metric},
      timing_in_metrics_(!cfg_.deterministic),
      rank_buffers_(world_ > 1 ? rank_local_buffers(program) : std::vector<TensorRef>{}),
      rank_buffers_each_step_(cfg_.devices.on_cpu()),
      averaging_(cfg_.train.ema_decay > 0),
      scaler_(cfg_.precision.loss_scale, cfg_.precision.mode == "fp16"),
      inject_overflow_(injected_overflow_steps()),
      inject_checkpoint_delay_s_(injected_checkpoint_delay_s()),
      inject_eval_delay_s_(injected_eval_delay_s()),
      inject_step_delay_s_(injected_step_delay_s()),
      logits_(s.num_classes > 0 ? static_cast<std::size_t>(numel(program.logits().shape)) : 0),
      ignored_(ignored_label(s)),
      progress_(collective.is_root(), collective.world() > 1),
      losses_(backend_, window_losses(log_every_, total_steps_, accumulation_)) {
  if (steps_per_epoch_ < 1)
    throw std::runtime_error(
        "the training set gives " + std::to_string(loader_.batches_per_epoch()) +
        " micro-batches per epoch, fewer than one optimizer step (batch_size " +
        std::to_string(s.batch.global) + ")");
  resume_or_initialize();
  // The averaged weights start as the weights; a checkpoint holds its own.
  if (averaging_ && resumed_.step == 0) program_.reset_ema();
  // A finished run resumed with nothing to train keeps its directory as it was.
  if (options_.resume && (resumed_.step >= total_steps_ || early_stopped_at_checkpoint())) {
    finished_ = finished_summary(resumed_.step);
    // Every rank goes the root's way (it reads summary.json, which another
    // node may see otherwise): a rank that recorded the end alone would wait
    // in its collectives for ever.
    if (world_ > 1) {
      const bool root_finished = values_over_ranks(collective_, finished_ ? 1.0 : 0.0)[0] > 0;
      if (!root_finished) finished_.reset();
      if (root_finished && !finished_) finished_ = nlohmann::json::object();
    }
  }
  // At the run's last step (an early stop counted by its final evaluation
  // too: that one could not stop it), without the summary of its end.
  end_unrecorded_ =
      options_.resume && !resumed_from_.empty() && resumed_.step == total_steps_ && !finished_;
  keeps_directory_ = options_.resume && (finished_ || resumed_.step > total_steps_);
  // Before anything in the directory changes: a refusal leaves it as it was.
  if (collective.is_root() && !keeps_directory_) {
    store_.check_writable();
    const std::int64_t kept =
        cfg_.checkpoint.keep_last > 0 ? cfg_.checkpoint.keep_last + cfg_.checkpoint.keep_best : 0;
    if (const std::string warning = store_.check_room(checkpoint::checkpoint_size(program), kept);
        !warning.empty())
      log_->warn("{}", warning);
  }
  if (options_.before_writing && !keeps_directory_) options_.before_writing();
  open_metrics();
  if (options_.resume && !keeps_directory_) record_session_running();
  const std::int64_t frozen = s.graph.frozen_parameter_count();
  log_->info(
      "model: {} parameters{}, {} nodes; arena {:.1f} MiB; batch {} = micro {} x accumulation {}",
      s.graph.parameter_count(), frozen > 0 ? fmt::format(" ({} frozen)", frozen) : "",
      s.graph.nodes.size(), static_cast<double>(program.memory_plan().arena_bytes) / (1 << 20),
      s.batch.global, s.batch.micro, accumulation_);
  log_->info("training {} step{} ({} per epoch) on {}", total_steps_, total_steps_ == 1 ? "" : "s",
             steps_per_epoch_, backend_.name());
  prepare_optimizer();

  // The logging window and the records go on from where the checkpoint left them.
  window_.loss = resumed_.window_loss;
  window_.loss_steps = resumed_.window_loss_steps;
  const bool window_owner = collective.is_root();
  window_.hits.top1 = window_owner ? resumed_.window_top1 : 0;
  window_.hits.rows = window_owner ? resumed_.window_rows : 0;
  window_.steps = resumed_.window_steps;
  window_.samples = window_owner ? resumed_.window_samples : 0;
  best_eval_ = resumed_.best_eval;
  last_eval_ = resumed_.last_eval;
  if (const auto& stop = resumed_.early_stopping; !stop.is_null()) {
    if (stop.at("best").is_number()) stop_best_ = stop.at("best").get<double>();
    stop_best_step_ = stop.at("best_step").get<std::int64_t>();
    stop_bad_evals_ = stop.at("bad").get<std::int64_t>();
  }
  last_train_ = resumed_.last_train;
  step_ = first_step_ = resumed_.step;
  epoch_ = resumed_.epoch;
  collective.start_at_step(step_);
  window_.start = Clock::now();
}

nlohmann::json TrainLoop::run() {
  run_start_ = Clock::now();
  first_step_ = step_;
  if (options_.resume && step_ >= total_steps_ && !end_unrecorded_) {
    log_->info("nothing to train: the checkpoint is at step {} and this config trains {} steps{}",
               step_, total_steps_,
               step_ > total_steps_ ? "" : "; raise train.epochs or train.max_steps to go on");
    // A run that had finished keeps the summary it wrote (its time and throughput).
    return finished_ ? *finished_ : summary(!keeps_directory_);
  } else if (options_.resume && early_stopped_at_checkpoint() && !end_unrecorded_) {
    log_->info(
        "nothing to train: early stopping stops this run at step {} ({} evaluations without "
        "improvement of {}); raise train.early_stopping.patience to go on",
        step_, stop_bad_evals_, cfg_.train.early_stopping.metric);
    if (finished_) return *finished_;
    early_stopped_ = true;
    return summary();
  }
  try {
    if (end_unrecorded_)
      record_end();
    else
      train_to_end();
  } catch (const std::exception& e) {
    write_failure_summary(e.what());
    throw;
  }
  return summary();
}

void TrainLoop::record_end() {
  log_->info(
      "the run stopped after its last step's checkpoint, before recording its end: "
      "recording it");
  const std::int64_t in_epoch = resumed_.epoch_step;
  // The last step's own hits, which the checkpoint keeps apart for this.
  if (collective_.is_root())
    window_.last_step_hits = {resumed_.last_step_top1, 0, resumed_.last_step_rows};
  checkpoint::TrainState st = state_now(epoch_, in_epoch);
  // What an evaluation that fails saves: the state before the last record.
  stopped_inside_epoch_ = st;
  if (window_.steps > 0) log_window();
  const bool evaluated =
      last_eval_.is_object() && last_eval_.value("step", std::int64_t{-1}) == step_;
  if (s_.eval_data && !evaluated) evaluate_keeping_training(in_epoch);
  stamp_metric(st);
  save_state(st);  // again: `last` and the retention with it
  // Saved inside the epoch (or before its end's bookkeeping): the run's end
  // counts the epoch, as the run did.
  if (in_epoch > 0) ++epoch_;
}

void TrainLoop::write_failure_summary(const std::string& error) {
  if (!collective_.is_root()) return;
  // Only what the loop holds: the backend may be the thing that failed.
  const nlohmann::json summary = {{"status", "failed"},
                                  {"error", error},
                                  {"steps", step_},
                                  {"epochs", epoch_},
                                  {"session_steps", step_ - first_step_},
                                  {"wall_seconds", seconds_since(run_start_)},
                                  {"final_eval", last_eval_},
                                  {"best_eval", best_eval_},
                                  {"last_train", last_train_},
                                  {"last_checkpoint", recorded_path(last_checkpoint_)}};
  try {
    checkpoint::write_file_atomically(run_dir_ + "/summary.json", json_text(summary, 2) + "\n");
  } catch (const std::exception& e) {
    log_->warn("could not write summary.json: {}", e.what());  // the run's own error follows
  }
  // The error ends train.log too (the console gets it from the command line).
  log_failure(run_dir_, error);
}

// A stop asked for while a checkpoint of a step before the last was written
// (a large model's write takes seconds): that checkpoint is the stop's, with
// no step more and no second checkpoint after it.
bool TrainLoop::stop_asked_while_saving() {
  if (step_ >= total_steps_ || early_stopped_) return false;
  stopped_by_ = agreed_stop_signal(collective_);
  return stopped_by_ != 0;
}

void TrainLoop::train_to_end() {
  if (replay_evaluation_at_checkpoint()) {
    if (early_stopped_) return;
    if (keeps_best() && stop_asked_while_saving()) return;  // saved again, with its metric
  }
  std::int64_t resume_in_epoch = resumed_.epoch_step;
  while (step_ < total_steps_ || resume_in_epoch >= steps_per_epoch_) {
    std::int64_t in_epoch = resume_in_epoch;
    resume_in_epoch = 0;
    if (in_epoch < steps_per_epoch_) loader_.start_epoch(epoch_, in_epoch * accumulation_);
    bool step_checkpoint_due = false;
    for (; in_epoch < steps_per_epoch_ && step_ < total_steps_;) {
      const data::Cursor step_start = loader_.cursor();
      try {
        train_micro_batches();
      } catch (const data::SampleReadError& e) {
        if (loader_.cursor().position != step_start.position) throw;
        throw data::SampleReadError(e.what() + keep_training_before(in_epoch));
      }
      if (!update_in_step_) finish_step();
      if (inject_step_delay_s_ > 0)
        std::this_thread::sleep_for(std::chrono::duration<double>(inject_step_delay_s_));
      ++step_;
      ++in_epoch;
      ++window_.steps;
      ++window_.timed_steps;
      if (progress_.due()) {
        settle_losses();
        progress_.update(epoch_, step_, total_steps_, last_loss_, seconds_left());
      }
      const bool stops_inside_epoch = step_ == total_steps_ && in_epoch < steps_per_epoch_;
      // The last step off a log boundary (inside an epoch or at its end): the
      // state before the short window's record, which a longer run does not
      // write (its window goes on).
      if (step_ == total_steps_ && step_ % log_every_ != 0)
        stopped_inside_epoch_ = state_now(epoch_, in_epoch);
      if (step_ % log_every_ == 0 || step_ == total_steps_) {
        log_window();
        // On a log boundary the record is one the longer run writes too: keep it.
        if (stops_inside_epoch && step_ % log_every_ == 0)
          stopped_inside_epoch_ = state_now(epoch_, in_epoch);
      }
      // The backend's schedule window reaches no further (log_every above
      // kMaxScheduledUpdates).
      if (scaler_.enabled() && step_ - synced_at_step_ >= schedule_window_) sync_loss_scale();
      // The end of the epoch (or of training) evaluates anyway: once per step.
      bool evaluated = false;
      if (cfg_.train.eval_every > 0 && step_ % cfg_.train.eval_every == 0 && step_ < total_steps_ &&
          in_epoch < steps_per_epoch_) {
        evaluate_keeping_training(in_epoch);
        if (stopped_by_ != 0) break;  // saved, the evaluation to make
        evaluated = true;
        if (early_stopped_) {
          save_checkpoint(epoch_, in_epoch);
          break;
        }
      }
      const bool steps_due =
          (cfg_.checkpoint.every_steps > 0 && step_ % cfg_.checkpoint.every_steps == 0) ||
          (evaluated && keeps_best());
      if (step_ < total_steps_) stopped_by_ = agreed_stop_signal(collective_);
      if (stopped_by_ != 0) {
        save_unscheduled(state_now(epoch_, in_epoch));
        break;
      }
      if (steps_due && in_epoch < steps_per_epoch_ && step_ < total_steps_) {
        save_checkpoint(epoch_, in_epoch);
        if (stop_asked_while_saving()) break;
      }
      step_checkpoint_due = steps_due;
    }
    if (stopped_by_ != 0 || early_stopped_) break;
    if (in_epoch < steps_per_epoch_) {
      evaluate_keeping_training(in_epoch);
      if (stopped_inside_epoch_) {
        stamp_metric(*stopped_inside_epoch_);  // that evaluation measured these weights
        save_state(*stopped_inside_epoch_);
      }
      ++epoch_;
      break;
    }
    evaluate_keeping_training(steps_per_epoch_);
    if (stopped_by_ != 0) break;  // saved, the evaluation to make
    if (stopped_inside_epoch_) {
      // The last step ends the epoch off a log boundary: the checkpoint is the
      // state before the short window's record and this evaluation, which a
      // longer run resumed from it makes again (the end of the epoch's work).
      stamp_metric(*stopped_inside_epoch_);
      save_state(*stopped_inside_epoch_);
      ++epoch_;
      break;
    }
    ++epoch_;
    const bool epochs_due =
        cfg_.checkpoint.every_epochs > 0 && epoch_ % cfg_.checkpoint.every_epochs == 0;
    if (step_ >= total_steps_ || epochs_due || step_checkpoint_due || early_stopped_ ||
        keeps_best()) {
      save_checkpoint(epoch_, 0);
      if (stop_asked_while_saving()) break;
    }
    if (early_stopped_) break;
  }
}

nlohmann::json TrainLoop::summary(bool record) {
  sync_loss_scale();
  progress_.clear();
  const double wall = seconds_since(run_start_);
  const double samples_per_s = static_cast<double>(total_samples_ * world_) / wall;
  // steps and epochs are the run's; the time, rate, data wait and memory
  // peak this session's (session_steps of them, after resumed_at_step).
  nlohmann::json summary = {{"status", stopped_by_ != 0 ? "interrupted" : "complete"},
                            {"steps", step_},
                            {"epochs", epoch_},
                            {"session_steps", step_ - first_step_},
                            {"wall_seconds", wall},
                            {"mean_samples_per_s", samples_per_s},
                            {"data_wait_pct", 100.0 * total_wait_ / wall},
                            {"memory_peak_mib", memory_figures(backend_).peak_mib},
                            {"final_eval", last_eval_},
                            {"best_eval", best_eval_},
                            {"last_train", last_train_},
                            {"last_checkpoint", recorded_path(last_checkpoint_)},
                            {"step_execution", program_.step_execution()},
                            {"optimizer_update", update_placement_}};
  if (!resumed_from_.empty()) summary["resumed_from"] = recorded_path(resumed_from_);
  if (first_step_ > 0) summary["resumed_at_step"] = first_step_;
  if (scaler_.enabled()) {
    summary["loss_scale"] = scaler_.scale();
    summary["skipped_steps"] = scaler_.skipped_steps();
  }
  if (stopped_by_ != 0) summary["signal"] = stopped_by_;
  if (early_stopped_)
    summary["early_stopped"] = {
        {"step", step_},
        {"metric", cfg_.train.early_stopping.metric},
        {"best", stop_best_ ? nlohmann::json(*stop_best_) : nlohmann::json()},
        {"best_step", stop_best_step_},
        {"evaluations_without_improvement", stop_bad_evals_}};
  if (collective_.is_root() && record)
    checkpoint::write_file_atomically(run_dir_ + "/summary.json", json_text(summary, 2) + "\n");
  if (stopped_by_ != 0) {
    if (collective_.is_root())  // the other ranks know no run directory or checkpoint
      log_->warn(
          "stopped by signal {} after step {}: checkpoint {}; continue with `trainer run "
          "--resume {}`",
          stopped_by_, step_, last_checkpoint_, run_dir_);
  } else if (first_step_ > 0) {  // a resume: the time and rate are this session's
    log_->info("done: {} steps ({} in this session, {:.1f} s, {:.0f} samples/s)", step_,
               step_ - first_step_, wall, samples_per_s);
  } else {
    log_->info("done: {} step{} in {:.1f} s, {:.0f} samples/s", step_, step_ == 1 ? "" : "s", wall,
               samples_per_s);
  }
  if (const int late = checkpoint::stop_requested();
      stopped_by_ == 0 && late != 0 && collective_.is_root())
    log_->info(
        "signal {} came after the last step: the run made its final evaluation and "
        "checkpoint, and is complete",
        late);
  return summary;
}

}  // namespace loop

nlohmann::json train(const Session& s, graph::Program& program, const std::string& run_dir,
                     Collective& collective, const TrainOptions& options) {
  return loop::TrainLoop(s, program, run_dir, collective, options).run();
}

nlohmann::json train(const Session& s, graph::Program& program, const std::string& run_dir,
                     Collective& collective) {
  return train(s, program, run_dir, collective, TrainOptions{});
}

nlohmann::json train(const Session& s, graph::Program& program, const std::string& run_dir) {
  SingleProcess single;
  return train(s, program, run_dir, single, TrainOptions{});
}

}  // namespace trainer::train
