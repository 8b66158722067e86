// The training loop's evaluations (train_loop.h): an evaluation and its
// record, the training kept in a checkpoint when one fails or a stop comes
// during it, and train.early_stopping.
#include "runner/train/train_loop.h"

#include <chrono>
#include <cmath>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "data/loader.h"
#include "runner/checkpoint/stop_signal.h"

namespace trainer::train::loop {
namespace {

// The averaged weights (train.ema_decay) in the parameters' place while it
// lives, when `active`: an evaluation of them that then lets training go on.
class AveragedWeightsInPlace {
 public:
  AveragedWeightsInPlace(graph::Program& program, bool active)
      : program_(active ? &program : nullptr) {
    if (program_) program_->swap_ema();
  }
  ~AveragedWeightsInPlace() {
    if (program_) program_->swap_ema();
  }
  AveragedWeightsInPlace(const AveragedWeightsInPlace&) = delete;
  AveragedWeightsInPlace& operator=(const AveragedWeightsInPlace&) = delete;

 private:
  graph::Program* program_;
};

}  // namespace

std::optional<double> metric_value(const std::string& metric, const nlohmann::json& last_eval,
                                   const nlohmann::json& last_train) {
  const auto dot = metric.find('.');
  if (dot == std::string::npos) return std::nullopt;
  const std::string split = metric.substr(0, dot), key = metric.substr(dot + 1);
  const nlohmann::json& record = split == "eval" ? last_eval : last_train;
  if (!record.is_object() || !record.contains(key) || !record[key].is_number()) return std::nullopt;
  return record[key].get<double>();
}

bool TrainLoop::run_eval(std::int64_t at_step, bool may_stop) {
  if (!s_.eval_data) return true;
  const WindowPause pause(window_, backend_);
  // Weights gone inf or NaN can evaluate to a finite loss (a relu turns NaN
  // into 0): no record of them.
  stop_if_weights_went_non_finite(false);
  if (!rank_buffers_each_step_) average_rank_buffers();
  const auto stop_early = [&] {
    if (inject_eval_delay_s_ > 0) {
      log_->warn("TRAINER_INJECT_EVAL_DELAY: an evaluation batch {} s late", inject_eval_delay_s_);
      std::this_thread::sleep_for(std::chrono::duration<double>(inject_eval_delay_s_));
    }
    return checkpoint::stop_requested() != 0;
  };
  const EvalResult e = [&] {
    const AveragedWeightsInPlace averaged(program_, averaging_);
    return evaluate(s_, program_, collective_,
                    may_stop ? std::function<bool()>(stop_early) : nullptr);
  }();
  if (e.interrupted) return false;
  // Every rank has the same sums: every rank stops alike.
  if (!std::isfinite(e.loss)) {
    const std::string what = std::string("the evaluation loss is ") +
                             (std::isnan(e.loss) ? "NaN" : "infinite") + " at step " +
                             std::to_string(at_step) + " (over " + std::to_string(e.samples) +
                             " samples): ";
    // Under fp16 the evaluation's forward pass overflows where an activation
    // passes fp16's largest value, which no loss scale covers.
    if (scaler_.enabled())
      throw DivergedError(
          what +
          "under precision: fp16 an activation of the evaluation data passed 65504, fp16's "
          "largest value (the loss scale covers gradients, not the forward pass), or the "
          "weights diverged; use precision: bf16 (float32's range), normalise the inputs, or "
          "lower optimizer.lr; check the evaluation data (trainer validate --data)");
    throw DivergedError(what +
                        "the weights have diverged, or the evaluation data holds values the "
                        "model overflows on; lower optimizer.lr (or set train.clip_grad_norm), "
                        "or check the evaluation data (trainer validate --data)");
  }
  nlohmann::json record = {{"step", at_step},
                           {"epoch", epoch_},
                           {"split", "eval"},
                           {"loss", e.loss},
                           {"samples", e.samples}};
  if (s_.num_classes > 0) {
    record["accuracy"] = e.accuracy;
    if (s_.num_classes > 5) record["top5"] = e.top5;
  }
  write_metrics(record);
  last_eval_ = record;
  if (best_eval_.is_null() || (s_.num_classes > 0 ? e.accuracy > best_eval_.value("accuracy", 0.0)
                                                  : e.loss < best_eval_.value("loss", 1e300)))
    best_eval_ = record;
  progress_.clear();
  if (s_.num_classes > 0)
    log_->info("eval  epoch {} step {}: loss {:.4f} accuracy {:.4f}", epoch_, at_step, e.loss,
               e.accuracy);
  else
    log_->info("eval  epoch {} step {}: loss {:.6f}", epoch_, at_step, e.loss);
  // The evaluation at the end of training has nothing left to stop, but it
  // counts: a resume that trains further stops where a longer run would.
  if (cfg_.train.early_stopping.patience > 0) follow_early_stopping(at_step, step_ < total_steps_);
  return true;
}

void TrainLoop::evaluate_keeping_training(std::int64_t epoch_step) {
  // What a stopped or failed evaluation saves (a single process: with
  // several ranks neither is saved): the training since the last checkpoint,
  // its record lengths those from before the evaluation, so that a record
  // of it (one metrics.jsonl took before the events file refused it: a full
  // disk) is not counted; the resume's evaluation writes it again.
  const bool saves = world_ == 1 && !writes_nothing();
  checkpoint::TrainState lengths_before;  // its record lengths alone
  record_lengths_into(lengths_before);
  const auto save_before = [&] {
    if (stopped_inside_epoch_) return save_unscheduled(*stopped_inside_epoch_);  // its lengths
    checkpoint::TrainState st = state_now(epoch_, epoch_step);
    st.metrics_bytes = lengths_before.metrics_bytes;
    st.timing_bytes = lengths_before.timing_bytes;
    st.events_bytes = lengths_before.events_bytes;
    save_unscheduled(st);
  };
  try {
    // The ranks of a job stop together after a step; the end of training
    // has its evaluation to make, then nothing more.
    if (run_eval(step_, world_ == 1 && step_ < total_steps_)) return;
    stopped_by_ = checkpoint::stop_requested();
    if (saves) save_before();
    log_->warn(
        "signal {} during the evaluation at step {}: the evaluation is left for the "
        "resume to make",
        stopped_by_, step_);
  } catch (const DivergedError&) {
    throw;  // weights not worth keeping
  } catch (const std::exception& e) {
    // With several ranks the others wait in the evaluation's reductions: no
    // checkpoint can be agreed on.
    if (!saves) throw;
    // A sample that cannot be read is said once, with what was kept and what
    // to do (as one met in training is); any other failure is logged first.
    const bool unreadable_sample = dynamic_cast<const data::SampleReadError*>(&e) != nullptr;
    const std::string failed = fmt::format("the evaluation at step {} failed: {}", step_, e.what());
    if (!unreadable_sample) log_->error("{}", failed);
    try {
      save_before();
    } catch (const std::exception& save_error) {
      if (unreadable_sample) log_->error("{}", failed);
      log_->error("the training since the last checkpoint could not be saved: {}",
                  save_error.what());
      throw;
    }
    const std::string kept =
        step_ < total_steps_
            ? fmt::format(
                  "the training up to step {} is kept in checkpoint {}: once what failed "
                  "is put right, `trainer run --resume` makes this evaluation again and "
                  "goes on",
                  step_, last_checkpoint_)
            : fmt::format(
                  "the training up to step {} (its end) is kept in checkpoint {}: once "
                  "what failed is put right, `trainer eval` evaluates it",
                  step_, last_checkpoint_);
    if (unreadable_sample) throw data::SampleReadError(failed + "; " + kept);
    log_->error("{}", kept);
    throw;
  }
}

// Every rank sees the same evaluation (its sums are reduced over the ranks),
// so every rank decides alike.
void TrainLoop::follow_early_stopping(std::int64_t at_step, bool may_stop) {
  const config::EarlyStoppingConfig& rule = cfg_.train.early_stopping;
  const std::optional<double> value = metric_value(rule.metric, last_eval_, last_train_);
  const bool improved =
      value && std::isfinite(*value) &&
      (!stop_best_ || (rule.mode == "min" ? *value < *stop_best_ - rule.min_delta
                                          : *value > *stop_best_ + rule.min_delta));
  if (improved) {
    stop_best_ = *value;
    stop_best_step_ = at_step;
    stop_bad_evals_ = 0;
    return;
  }
  if (++stop_bad_evals_ < rule.patience || !may_stop) return;
  early_stopped_ = true;
  log_->info(
      "early stopping at step {}: {} has not improved on {:.6g} (step {}){} in {} evaluations",
      at_step, rule.metric, stop_best_.value_or(std::nan("")), stop_best_step_,
      rule.min_delta > 0 ? fmt::format(" by more than min_delta {:g}", rule.min_delta)
                         : std::string(),
      stop_bad_evals_);
}

}  // namespace trainer::train::loop
