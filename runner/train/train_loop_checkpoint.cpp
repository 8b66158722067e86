// The training loop's checkpoints (train_loop.h): the state to save (the
// step, the logging window, the records and their files' lengths), the
// metric that ranks it, and its write, refused for non-finite weights.
#include "runner/train/train_loop.h"

#include <chrono>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "data/content_digest.h"
#include "ops/out_of_memory.h"

namespace trainer::train::loop {

void TrainLoop::record_lengths_into(checkpoint::TrainState& st) const {
  st.metrics_bytes = metrics_.bytes_written();
  st.timing_bytes = timing_.bytes_written();
  st.events_bytes =
      cfg_.output.tensorboard ? std::optional(events_.bytes_written()) : unwritten_events_bytes_;
}

checkpoint::TrainState TrainLoop::state_now(std::int64_t at_epoch, std::int64_t epoch_step) {
  settle_losses();
  sync_loss_scale();
  checkpoint::TrainState st;
  st.step = step_;
  st.epoch = at_epoch;
  st.epoch_step = epoch_step;
  st.steps_per_epoch = steps_per_epoch_;
  st.accumulation = accumulation_;
  st.batch_size = s_.batch.global;
  st.train_samples = s_.train_data->size();
  st.train_digest = data::digest_text(s_.train_data->content_digest());
  if (s_.eval_data) st.eval_digest = data::digest_text(s_.eval_data->content_digest());
  st.base_lr = cfg_.optimizer.lr;
  st.total_steps = total_steps_;
  st.seed = cfg_.seed;
  st.schedule = cfg_.schedule.type;
  st.optimizer = cfg_.optimizer.type;
  st.lr = opt_.lr;
  st.loss_scale = scaler_.to_json();
  st.window_loss = window_.loss;
  st.window_loss_steps = window_.loss_steps;
  st.window_top1 = window_.hits.top1;
  st.window_rows = window_.hits.rows;
  st.window_steps = window_.steps;
  st.window_samples = window_.samples;
  st.last_step_top1 = window_.last_step_hits.top1;
  st.last_step_rows = window_.last_step_hits.rows;
  if (world_ > 1 && window_.steps > 0) {  // the window of every rank: resumable on any number
    std::vector<double> w = {window_.loss,
                             static_cast<double>(window_.hits.top1),
                             static_cast<double>(window_.hits.rows),
                             static_cast<double>(window_.samples),
                             window_.loss_steps,
                             static_cast<double>(window_.last_step_hits.top1),
                             static_cast<double>(window_.last_step_hits.rows)};
    collective_.all_reduce_statistics(w);
    st.window_loss = w[0] / world_;
    st.window_loss_steps = w[4] / world_;
    st.window_top1 = static_cast<std::int64_t>(w[1]);
    st.window_rows = static_cast<std::int64_t>(w[2]);
    st.window_samples = static_cast<std::int64_t>(w[3]);
    st.last_step_top1 = static_cast<std::int64_t>(w[5]);
    st.last_step_rows = static_cast<std::int64_t>(w[6]);
  }
  st.last_eval = last_eval_;
  st.best_eval = best_eval_;
  if (stop_best_ || stop_bad_evals_ > 0)
    st.early_stopping = {{"best", stop_best_ ? nlohmann::json(*stop_best_) : nlohmann::json()},
                         {"best_step", stop_best_step_},
                         {"bad", stop_bad_evals_}};
  st.last_train = last_train_;
  // The records up to here reach the disk before the checkpoint that counts
  // their lengths: after a crash, a resume finds them whole.
  metrics_.sync();
  timing_.sync();
  events_.sync();
  record_lengths_into(st);
  stamp_metric(st);
  return st;
}

// Only a record of the state's own step ranks it (an evaluation of these very
// weights, or for train.* the log window ending there): a checkpoint taken
// between them records no metric.
void TrainLoop::stamp_metric(checkpoint::TrainState& st) const {
  const bool train_metric = cfg_.checkpoint.metric.rfind("train.", 0) == 0;
  const nlohmann::json& record = train_metric ? last_train_ : last_eval_;
  if (!record.is_object() || record.value("step", std::int64_t{-1}) != st.step) return;
  st.metric = metric_value(cfg_.checkpoint.metric, last_eval_, last_train_);
  st.metric_name = cfg_.checkpoint.metric;
}

void TrainLoop::stop_if_weights_went_non_finite(bool loss_was_finite) {
  if (scaler_.enabled()) return;
  // Every rank's own flag, agreed on: ranks whose reductions summed in
  // another order may overflow a step apart, and all must stop alike.
  std::vector<double> seen = {backend_.vector_ops().nonfinite_weights_seen() ? 1.0 : 0.0};
  if (world_ > 1) collective_.all_reduce_statistics(seen);  // not a load-balance window
  if (seen[0] == 0) return;
  // A finite loss over inf or NaN inside the network: a relu turns NaN into
  // 0 (oneDNN's, cuDNN's), so the overflow shows only in the gradients.
  throw DivergedError(
      "non-finite weights (inf or NaN) after the updates up to step " + std::to_string(step_) +
      (loss_was_finite
           ? ", while the loss stayed finite: the gradients were inf or NaN (values inside the "
             "network may overflow float32, and a relu turns such a NaN into 0 before the loss "
             "sees it), or an update overflowed; check the data for very large values (trainer "
             "validate --data), lower optimizer.lr, or set train.clip_grad_norm"
           : ": the run diverged (inf or NaN gradients, or an update that overflowed), and no "
             "checkpoint is written of those weights; lower optimizer.lr, set "
             "train.clip_grad_norm, or check the data for very large values (trainer validate "
             "--data)"));
}

void TrainLoop::save_state(const checkpoint::TrainState& st) {
  const WindowPause pause(window_, backend_);
  stop_if_weights_went_non_finite(false);                // weights not worth keeping
  if (!rank_buffers_each_step_) average_rank_buffers();  // the root saves every rank's
  if (collective_.is_root()) {
    if (inject_checkpoint_delay_s_ > 0) {
      log_->warn("TRAINER_INJECT_CHECKPOINT_DELAY: writing the checkpoint {} s late",
                 inject_checkpoint_delay_s_);
      std::this_thread::sleep_for(std::chrono::duration<double>(inject_checkpoint_delay_s_));
    }
    // The run directory removed or replaced under the run: its records (the
    // files it appends to are gone with it) and config could not resume.
    std::error_code ec;
    if (!std::filesystem::exists(run_dir_ + "/config.sha256", ec))
      throw std::runtime_error(
          "the run directory " + run_dir_ +
          " lost its config.sha256: it was removed or replaced while the run trained, and "
          "with it the records this run appends to; start the run again in a new directory");
    std::vector<std::string> problems;
    try {
      last_checkpoint_ = store_.save(program_, st, retention_, [&](const std::string& problem) {
        problems.push_back(problem);
      });
    } catch (const OutOfMemoryError&) {
      throw;  // said with what to change, as any out of memory is
    } catch (const std::runtime_error& e) {
      // Its partial folder is gone and the ones before it stay: say how to go on.
      throw std::runtime_error(std::string(e.what()) +
                               "\n    the checkpoints before it are kept; once there is room "
                               "(or the cause is fixed), trainer run --resume " +
                               run_dir_ + " goes on from the newest");
    }
    last_checkpoint_step_ = st.step;
    progress_.clear();
    log_->info("checkpoint {}", last_checkpoint_);
    for (const std::string& problem : problems) log_->warn("{}", problem);
  }
  // The other ranks wait here, not in the next step's gradient reduction,
  // whose timeout is meant for hung ranks, not for slow storage.
  if (world_ > 1) collective_.wait_for_checkpoint();
}

std::string TrainLoop::keep_training_before(std::int64_t epoch_step) {
  // With several ranks the others wait in this step's reduction: no
  // checkpoint can be agreed on.
  if (world_ > 1) return "";
  const auto resume_from = [&](const std::string& checkpoint, const char* kept) {
    return fmt::format(
        "; the training up to step {} is {}in checkpoint {}: restore that file as it was "
        "(`trainer validate {}/config.yaml --data` lists every sample that cannot be read), then "
        "`trainer run --resume {}` goes on from there (without it the training set is another: "
        "the resume trains other samples, and is refused when an epoch's steps change)",
        step_, kept, checkpoint, run_dir_, run_dir_);
  };
  if (step_ == first_step_ || step_ == last_checkpoint_step_)
    return step_ > 0 ? resume_from(last_checkpoint_.empty() ? resumed_from_ : last_checkpoint_, "")
                     : "";
  try {
    save_unscheduled(state_now(epoch_, epoch_step));
  } catch (const std::exception& e) {
    log_->error("the training since the last checkpoint could not be saved: {}", e.what());
    return "";
  }
  return resume_from(last_checkpoint_, "kept ");
}

}  // namespace trainer::train::loop
