// The training loop behind train() (trainer.h). A TrainLoop holds what a run
// carries from step to step (the loader, the optimizer and loss scaler, the
// logging window, the latest records, where a resume started) and its methods
// are the loop's parts: one optimizer step of micro-batches, the end of a step
// outside the recorded work, a log point, an evaluation, a checkpoint and the
// summary.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <thread>
#include <utility>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "data/content_digest.h"
#include "data/loader.h"
#include "ops/step_values.h"
#include "runner/checkpoint/checkpoint_store.h"
#include "runner/checkpoint/durable_file.h"
#include "runner/checkpoint/safetensors.h"
#include "runner/checkpoint/stop_signal.h"
#include "runner/config/diagnostics.h"
#include "runner/json_text.h"
#include "runner/train/devices.h"
#include "runner/train/input_advice.h"
#include "runner/train/loss_log.h"
#include "runner/train/loss_scale.h"
#include "runner/train/memory_report.h"
#include "runner/train/metrics.h"
#include "runner/train/progress.h"
#include "runner/train/rank_buffers.h"
#include "runner/train/run_dir.h"
#include "runner/train/schedule.h"
#include "runner/train/session_checks.h"
#include "runner/train/tfevents.h"
#include "runner/train/trainer.h"
#include "runner/usage_error.h"

namespace trainer::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

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

// "%*" in a pattern: "warning: " or "error: " before a line of that level,
// as the command line marks its own; nothing before an info line.
class LevelMark final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    const std::string_view mark = msg.level >= spdlog::level::err    ? "error: "
                                  : msg.level == spdlog::level::warn ? "warning: "
                                                                     : "";
    dest.append(mark.data(), mark.data() + mark.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<LevelMark>();
  }
};

std::unique_ptr<spdlog::formatter> line_format(const std::string& pattern) {
  auto format = std::make_unique<spdlog::pattern_formatter>();
  format->add_flag<LevelMark>('*').set_pattern(pattern + "%*%v");
  return format;
}

// The root rank logs to the terminal and train.log; other ranks only report warnings.
std::shared_ptr<spdlog::logger> make_logger(const std::string& run_dir,
                                            const Collective& collective,
                                            const std::shared_ptr<LogFailure>& failure) {
  auto console = std::make_shared<spdlog::sinks::stdout_color_sink_mt>();
  console->set_formatter(line_format(
      collective.world() > 1 ? "[rank " + std::to_string(collective.rank()) + "] " : ""));
  if (!collective.is_root()) {
    auto logger = std::make_shared<spdlog::logger>("trainer", console);
    logger->set_level(spdlog::level::warn);
    return logger;
  }
  auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(run_dir + "/train.log", false);
  file->set_formatter(line_format("[%Y-%m-%d %H:%M:%S.%e] "));
  auto logger = std::make_shared<spdlog::logger>("trainer", spdlog::sinks_init_list{console, file});
  // A line per log point: written through at once, so a run that dies (a
  // full disk, a kill) leaves train.log up to its last line.
  logger->flush_on(spdlog::level::info);
  logger->set_error_handler([failure](const std::string& message) { failure->record(message); });
  return logger;
}

// Reads `metric` ("eval.accuracy", "train.loss") from the latest records.
std::optional<double> metric_value(const std::string& metric, const nlohmann::json& last_eval,
                                   const nlohmann::json& last_train) {
  const auto dot = metric.find('.');
  if (dot == std::string::npos) return std::nullopt;
  const std::string split = metric.substr(0, dot), key = metric.substr(dot + 1);
  const nlohmann::json& record = split == "eval" ? last_eval : last_train;
  if (!record.is_object() || !record.contains(key) || !record[key].is_number()) return std::nullopt;
  return record[key].get<double>();
}

// SIGINT / SIGTERM received here, or (with several ranks) by any rank: all
// ranks must stop after the same step. A plain sum: the metric reduction
// would close the ranks' load-balance window at every step.
int agreed_stop_signal(Collective& collective) {
  const int local = checkpoint::stop_requested();
  if (collective.world() <= 1) return local;
  std::vector<double> any = {local != 0 ? 1.0 : 0.0};
  collective.all_reduce_statistics(any);
  return local != 0 ? local : (any[0] > 0 ? SIGTERM : 0);
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

// Why fp16 loss scaling collapsed, and what to change.
std::string collapse_diagnosis(const LossScaler& scaler, double loss,
                               const std::vector<std::string>& overflowing) {
  const std::int64_t step = scaler.collapsed_at_step();
  const std::string names = config::join(std::vector<std::string>(
      overflowing.begin(),
      overflowing.begin() + std::min<std::ptrdiff_t>(3, std::ssize(overflowing))));
  const bool dynamic = scaler.rule().dynamic;
  std::string text = "fp16 loss scaling collapsed at step " + std::to_string(step) + ": " +
                     std::to_string(scaler.rule().collapse_patience) +
                     " consecutive steps overflowed at the " + (dynamic ? "minimum" : "static") +
                     " loss scale " + fmt::format("{:g}", scaler.scale()) + " (" +
                     std::to_string(scaler.skipped_steps()) + " steps skipped up to step " +
                     std::to_string(scaler.state().steps) + "). ";
  if (!std::isfinite(loss))
    return text + "The forward pass itself overflows fp16 (the loss is " +
           fmt::format("{:g}", loss) +
           "): activations exceed fp16's largest value, 65504, which no loss scale can fix. "
           "Likely cause: inputs that are not normalised, a missing normalisation layer, or "
           "weights grown by too high a learning rate. Use precision: bf16 (float32's range), "
           "normalise the inputs, or lower optimizer.lr.";
  const std::string cause =
      "cause: a learning rate that makes the weights diverge, exploding gradients, or a forward "
      "pass that overflows fp16 where a relu hides it from the loss (it turns the NaN into 0): "
      "inputs or activations beyond 65504. Lower optimizer.lr, set train.clip_grad_norm, "
      "normalise the inputs, or use precision: bf16.";
  return text + "The loss is finite (" + fmt::format("{:.4g}", loss) + ") but the gradients" +
         (names.empty() ? std::string() : " of " + names) + " overflow fp16 even at that scale. " +
         (dynamic ? "Likely " + cause
                  : "Lower precision.loss_scale.static_scale (or set it to 0 for the dynamic "
                    "scale); otherwise the likely " +
                        cause);
}

// The names of the parameters whose gradients hold inf or NaN.
std::vector<std::string> overflowing_parameters(graph::Program& program) {
  std::vector<std::string> names;
  for (auto& p : program.params()) {
    if (!p.grad) continue;
    bool finite = true;
    program.backend().vector_ops().sum_squares({p.grad}, finite);
    if (!finite) names.push_back(p.param->name);
  }
  return names;
}

// A metrics record's numbers as TensorBoard scalars tagged <split>/<key>
// ("train/loss", "eval/accuracy"), at its step.
Scalars scalars_of(const nlohmann::json& record) {
  Scalars scalars;
  const std::string split = record.value("split", "train");
  for (const auto& [key, value] : record.items())
    if (key != "step" && key != "epoch" && value.is_number())
      scalars.emplace_back(split + "/" + key, value.get<float>());
  return scalars;
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

// Cuts a JSON-lines file back to `bytes` (what it held at the checkpoint) before appending.
// The length of the longest prefix of `bytes` made of whole JSON lines.
std::uint64_t whole_lines(const std::string& bytes) {
  const auto end = bytes.rfind('\n');
  return end == std::string::npos ? 0 : end + 1;
}

// The length of the longest prefix of `bytes` made of whole event records
// (8-byte length, 4-byte CRC, data, 4-byte CRC).
std::uint64_t whole_event_records(const std::string& bytes) {
  std::uint64_t at = 0;
  while (bytes.size() - at >= 16) {
    std::uint64_t length = 0;
    std::memcpy(&length, bytes.data() + at, sizeof length);
    if (length > bytes.size() - at - 16) break;
    at += 16 + length;
  }
  return at;
}

// Cuts a record file back to the `bytes` the checkpoint recorded, so the
// records after it are written again. A file shorter than that lost records
// (restored from an older copy, edited): it is cut back to its last whole
// record instead, and the returned warning says so ("" otherwise).
std::string restore_record_file(const std::string& path, std::uint64_t bytes,
                                std::uint64_t (*whole_records)(const std::string&)) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec))
    return bytes == 0 ? ""
                      : path + " is missing (the checkpoint recorded " + std::to_string(bytes) +
                            " bytes): its records up to the checkpoint are lost; the run "
                            "writes the ones after it";
  std::uint64_t keep = bytes;
  std::string warning;
  if (const std::uint64_t size = fs::file_size(path, ec); !ec && size < bytes) {
    std::ifstream in(path, std::ios::binary);
    const std::string content((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
    keep = whole_records(content);
    warning = path + " holds " + std::to_string(size) + " bytes, fewer than the " +
              std::to_string(bytes) + " the checkpoint recorded: records were lost since; it is " +
              "cut back to its last whole record (" + std::to_string(keep) +
              " bytes) and the run appends after it";
  }
  if (!ec && fs::file_size(path, ec) > keep) fs::resize_file(path, keep, ec);
  if (ec)
    throw std::runtime_error("cannot cut " + path +
                             " back to its checkpointed length: " + ec.message());
  return warning;
}

// Keeps the records of the JSON-lines file at `path` up to `step` (the
// resumed checkpoint's), for a file whose length no checkpoint records (the
// ranks' load reports): the steps after it are trained, and recorded, again.
// A line that is no record with a step is kept.
void drop_records_after(const std::string& path, std::int64_t step) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  std::string kept, line;
  bool dropped = false;
  while (std::getline(in, line)) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    if (record.is_object() && record.contains("step") && record["step"].is_number_integer() &&
        record["step"].get<std::int64_t>() > step) {
      dropped = true;
      continue;
    }
    kept += line + '\n';
  }
  in.close();
  if (dropped) checkpoint::write_file_atomically(path, kept);
}

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
  // A resume whose evaluation data is not what the checkpoint's run evaluated
  // on: a warning, since the metrics before and after it (and the best so far
  // that keep_best and early stopping compare with) measured other data.
  void warn_if_eval_data_changed(const checkpoint::TrainState& st, const std::string& path) const;
  void open_metrics();
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
  // evaluation fails on a single process (its data unreadable midway), the
  // training since the last checkpoint is saved first, the evaluation still
  // to make (stopped_inside_epoch_ when set), and the error goes on up. A
  // stop asked for during an evaluation before the last step saves the same
  // and sets stopped_by_ (the evaluation at the end of training finishes).
  void evaluate_keeping_training(std::int64_t epoch_step);
  // The training since the last checkpoint, before the evaluation at
  // `epoch_step` steps of this epoch (which a resume makes).
  void save_before_evaluation(std::int64_t epoch_step);
  // train.early_stopping after an evaluation: counts it, and sets
  // early_stopped_ when the metric has not improved for `patience`
  // evaluations and `may_stop` (not at the last step).
  void follow_early_stopping(std::int64_t at_step, bool may_stop);
  // The state after `epoch_step` steps of `at_epoch` (== steps_per_epoch: its
  // evaluation is pending).
  checkpoint::TrainState state_now(std::int64_t at_epoch, std::int64_t epoch_step);
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
  // The run's summary, written to summary.json unless `record` is false.
  nlohmann::json summary(bool record = true);
  // The loop itself: steps, log points, evaluations and checkpoints to the end
  // (or to a stop signal).
  void train_to_end();
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
  // The run ends inside an epoch (max_steps), or at an epoch's end off a log
  // boundary: the state a longer run resumed from there needs is the one
  // before the forced last record and evaluation.
  std::optional<checkpoint::TrainState> stopped_inside_epoch_;
};

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
      rank_buffers_each_step_(cfg_.devices.cpu || cfg_.devices.gpus.empty()),
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
  if (options_.before_writing && !keeps_directory_) options_.before_writing();
  open_metrics();
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

// Resume: the newest checkpoint that verifies; bad ones are reported and
// skipped (and set aside by the root). With several ranks, every rank must
// have taken the same one, or they would train out of step.
void TrainLoop::resume_or_initialize() {
  if (!options_.resume) return;
  std::optional<checkpoint::LoadedCheckpoint> loaded;
  try {
    loaded = store_.load_newest(program_, collective_.is_root(),
                                [&](const std::string& m) { log_->warn("{}", m); });
  } catch (const checkpoint::CheckpointMismatch& e) {
    throw UsageError(
        std::string("the run's checkpoint does not fit the model (and optimizer) this config "
                    "builds: ") +
        e.what() + "\n  resume with the run's own config (trainer run --resume " + run_dir_ +
        "; train.max_steps / train.epochs may grow); to train the changed model, start a "
        "new run (model.init_from: that file, with model.init_strict: false, starts it from the "
        "tensors that fit)");
  }
  if (collective_.world() > 1) {
    const std::vector<double> steps =
        values_over_ranks(collective_, loaded ? static_cast<double>(loaded->state.step) : -1.0);
    if (std::adjacent_find(steps.begin(), steps.end(), std::not_equal_to<>()) != steps.end()) {
      std::string found;
      for (std::size_t r = 0; r < steps.size(); ++r)
        found += (r ? ", rank " : "rank ") + std::to_string(r) + ": " +
                 (steps[r] < 0 ? "none" : "step " + std::to_string(std::llround(steps[r])));
      throw std::runtime_error("the ranks found different checkpoints to resume from in " +
                               store_.directory() + " (" + found +
                               "): is the run directory on storage every rank sees alike?");
    }
  }
  if (!loaded) {
    log_->warn("no usable checkpoint in {}: starting from the beginning", store_.directory());
    initialize_parameters(s_, program_);
    return;
  }
  const auto& st = loaded->state;
  // A checkpoint of an earlier version records no batch size.
  const bool same_batch = st.batch_size == 0 || st.batch_size == s_.batch.global;
  // Only the accumulation differs: the micro-batch over this number of ranks
  // (train.micro_batch_size fixed, devices.world_size changed) that keeps it.
  std::string keep_accumulation;
  const std::int64_t per_step = s_.batch.global / world_;
  if (st.seed == cfg_.seed && same_batch && st.accumulation != accumulation_ &&
      st.accumulation > 0 && per_step % st.accumulation == 0)
    keep_accumulation = "; the accumulation follows train.micro_batch_size over the " +
                        std::to_string(world_) + (world_ == 1 ? " rank" : " ranks") +
                        " (batch / (micro-batch x ranks)): train.micro_batch_size=" +
                        std::to_string(per_step / st.accumulation) + " keeps the run's " +
                        std::to_string(st.accumulation);
  // Another count of training samples: the data changed under the run (or
  // an override of data.split moved samples between the sets). A checkpoint
  // of an earlier version records no count: the config as the run's but
  // another number of steps per epoch says the same.
  const std::int64_t samples = s_.train_data->size();
  const bool count_changed = st.train_samples > 0 && st.train_samples != samples;
  const bool steps_changed_alone = st.train_samples == 0 && st.batch_size > 0 &&
                                   st.seed == cfg_.seed && same_batch &&
                                   st.accumulation == accumulation_ && world_ == 1;
  if (st.steps_per_epoch != steps_per_epoch_ && (count_changed || steps_changed_alone))
    throw UsageError(
        "checkpoint " + loaded->path + " was written when " +
        (count_changed
             ? "the training set held " + std::to_string(st.train_samples) + " samples (" +
                   std::to_string(st.steps_per_epoch) + " steps per epoch); it now holds " +
                   std::to_string(samples) + " (" + std::to_string(steps_per_epoch_) + ")"
             : "an epoch was " + std::to_string(st.steps_per_epoch) +
                   " steps; the training data now gives " + std::to_string(steps_per_epoch_) +
                   " (" + std::to_string(samples) + " samples)") +
        ": the training data changed since the run started (a file replaced, images added or "
        "removed), or an override changed data.split. Restore the run's data to resume it "
        "exactly, or start a new run from these weights (model.init_from=" +
        loaded->path + "/model.safetensors)");
  if (st.seed != cfg_.seed || st.accumulation != accumulation_ ||
      st.steps_per_epoch != steps_per_epoch_ || !same_batch)
    throw UsageError(
        "checkpoint " + loaded->path + " was written with seed " + std::to_string(st.seed) + ", " +
        (st.batch_size > 0 ? "batch " + std::to_string(st.batch_size) + ", " : "") +
        std::to_string(st.steps_per_epoch) + " steps per epoch and accumulation " +
        std::to_string(st.accumulation) + "; this config gives seed " + std::to_string(cfg_.seed) +
        ", " + (st.batch_size > 0 ? "batch " + std::to_string(s_.batch.global) + ", " : "") +
        std::to_string(steps_per_epoch_) + " and " + std::to_string(accumulation_) +
        ": resume with the run's own config.yaml (only train.max_steps / train.epochs may "
        "grow)" +
        keep_accumulation +
        (world_ > 1 && cfg_.data.drop_last && st.seed == cfg_.seed &&
                 st.accumulation == accumulation_
             ? std::string("; with several ranks and data.drop_last: true, a trainer before "
                           "2026-12-01 counted each rank's shard as ceil(N / ranks) samples, "
                           "wrapping some: finish such a run with the trainer that started it")
             : std::string()));
  if (!st.optimizer.empty() && st.optimizer != cfg_.optimizer.type)
    throw UsageError("checkpoint " + loaded->path + " holds the moments of optimizer " +
                     st.optimizer + "; this config uses " + cfg_.optimizer.type +
                     ": resume with the run's own config.yaml, or start a new run");
  // The base rate as applied: with optimizer.lr_scaling it follows the
  // number of ranks, which a resume may change while the global batch stays.
  if (collective_.is_root() && st.base_lr > 0 &&
      std::abs(st.base_lr - cfg_.optimizer.lr) > 1e-12 * st.base_lr) {
    const bool scaled = cfg_.optimizer.lr_scaling != "none";
    log_->warn(
        "optimizer.lr: the run trained at a base rate of {} and goes on at {}{}; to go on at the "
        "run's rate, resume with optimizer.lr={}{}",
        st.base_lr, cfg_.optimizer.lr,
        scaled ? fmt::format(" (optimizer.lr_scaling: {} scales it by the number of ranks, now {})",
                             cfg_.optimizer.lr_scaling, world_)
               : std::string(),
        st.base_lr, scaled ? " optimizer.lr_scaling=none" : "");
  }
  // The same steps per epoch, another count: it resumes, on other samples.
  if (count_changed && collective_.is_root())
    log_->warn(
        "checkpoint {} was written when the training set held {} samples; it now holds {}: the "
        "training data changed since the run started, so the resume trains on other samples "
        "than the run would have",
        loaded->path, st.train_samples, samples);
  // The same count, other content: a file replaced, labels edited.
  if (const std::string digest = data::digest_text(s_.train_data->content_digest());
      !count_changed && !st.train_digest.empty() && st.train_digest != digest &&
      collective_.is_root())
    log_->warn(
        "checkpoint {} was written when the training data's content digest was {}; it is now {} "
        "(the same {} samples): the data changed since that checkpoint was written (a file "
        "replaced or edited, labels changed), so the resume trains on other data than the run "
        "did; restore that data to resume exactly, or start a new run from these weights "
        "(model.init_from={}/model.safetensors)",
        loaded->path, st.train_digest, digest, samples, loaded->path);
  warn_if_eval_data_changed(st, loaded->path);
  resumed_ = st;
  resumed_from_ = loaded->path;
  log_->info("resuming from {}: step {}, epoch {}, {} of its {} steps done", loaded->path, st.step,
             st.epoch, st.epoch_step, steps_per_epoch_);
}

void TrainLoop::warn_if_eval_data_changed(const checkpoint::TrainState& st,
                                          const std::string& path) const {
  if (!s_.eval_data || st.eval_digest.empty() || !collective_.is_root()) return;
  const std::string digest = data::digest_text(s_.eval_data->content_digest());
  if (digest == st.eval_digest) return;
  const bool early_stopping = cfg_.train.early_stopping.patience > 0;
  const std::string comparing = keeps_best() && early_stopping ? "checkpoint.keep_best and "
                                                                 "train.early_stopping compare"
                                : keeps_best()                 ? "checkpoint.keep_best compares"
                                : early_stopping               ? "train.early_stopping compares"
                                                               : "";
  log_->warn(
      "checkpoint {} was written when the evaluation data's content digest was {}; it is now {} "
      "({} samples): the evaluation data changed since then, so the evaluations from here on "
      "measure other data than the run's earlier ones{}; restore that data to compare them",
      path, st.eval_digest, digest, s_.eval_data->size(),
      comparing.empty()
          ? comparing
          : " (" + comparing + " them with the best so far, measured on the old data)");
}

void TrainLoop::open_metrics() {
  if (!collective_.is_root()) return;
  const std::string metrics_path = run_dir_ + "/metrics.jsonl";
  const std::string timing_path = run_dir_ + "/timing.jsonl";
  const auto restore = [&](const std::string& path, std::uint64_t bytes,
                           std::uint64_t (*whole_records)(const std::string&)) {
    if (const std::string warning = restore_record_file(path, bytes, whole_records);
        !warning.empty())
      log_->warn("{}", warning);
  };
  // The records after the checkpoint are cut, to be written again; a resume
  // that writes none keeps them (a max_steps stop inside an epoch checkpoints
  // the state before its last record and evaluation).
  const bool cut = options_.resume && !writes_nothing();
  if (cut) {
    restore(metrics_path, resumed_.metrics_bytes, whole_lines);
    restore(timing_path, resumed_.timing_bytes, whole_lines);
    drop_records_after(run_dir_ + "/ranks.jsonl", resumed_.step);
  }
  metrics_ = MetricsWriter(metrics_path, options_.resume);
  timing_ = MetricsWriter(timing_path, options_.resume);
  // The events file is cut back to the checkpoint as the records are, also
  // when this part of the run writes none (output.tensorboard turned off):
  // its steps after the checkpoint are trained again, and a later part that
  // turns it on again must not find their old values there. Without a
  // checkpoint the run starts over, and so does the file (its file-version
  // record is written again); a checkpoint that recorded no length (no part
  // of the run had written the file by then) leaves it as it is.
  const std::string events_path = run_dir_ + "/" + kEventsFile;
  std::error_code ec;
  const bool events_exist = std::filesystem::exists(events_path, ec);
  const std::optional<std::uint64_t> events_bytes =
      resumed_from_.empty() ? std::optional<std::uint64_t>(0) : resumed_.events_bytes;
  if (cut && events_bytes && (cfg_.output.tensorboard || events_exist))
    restore(events_path, *events_bytes, whole_event_records);
  if (cfg_.output.tensorboard) {
    events_ = EventsWriter(events_path, options_.resume);
  } else if (events_exist) {
    const std::uintmax_t bytes = std::filesystem::file_size(events_path, ec);
    if (!ec) unwritten_events_bytes_ = bytes;
  }
}

void TrainLoop::write_metrics(const nlohmann::json& record) {
  metrics_.write(record);
  events_.write_scalars(record.value("step", std::int64_t{0}), scalars_of(record));
}

void TrainLoop::prepare_optimizer() {
  // The backend outlives runs (one per process): a flag an earlier run left
  // set is not this run's.
  backend_.vector_ops().nonfinite_weights_seen();
  // Optimizer slots over every trainable parameter.
  slots_ = program_.optimizer_slots();
  for (const auto& p : std::as_const(program_).params())
    if (p.grad) grads_.push_back(p.grad);
  opt_ = configured_optimizer(cfg_);
  configured_momentum_ = momentum_of(opt_);
  opt_.lr = static_cast<float>(resumed_.lr);
  // fp16: the loss is scaled before backward; the update checks the gradients,
  // divides the scale out or skips, and moves the scale on, all on the backend.
  // Its learning rate and momentum follow the updates applied (skipped steps
  // hold the schedule), from a window of the schedule the host sends at each
  // read of the state: at most log_every (and never more than
  // kMaxScheduledUpdates) updates ahead.
  scaler_.restore(resumed_.loss_scale, resumed_.step);
  if (scaler_.enabled()) {
    schedule_window_ = std::min(log_every_, kMaxScheduledUpdates);
    synced_at_step_ = resumed_.step;
    backend_.vector_ops().start_loss_scaling(scaler_.rule(), scaler_.state());
    send_schedule();
  }
  // The update joins the training step (and its recording, a CUDA graph) when
  // nothing is done on the host between backward and the update: one
  // micro-batch and one rank, no injected overflow. Clipping and loss scaling
  // are decided inside the update.
  update_in_step_ = accumulation_ == 1 && world_ == 1 && inject_overflow_.empty();
  update_placement_ =
      update_in_step_     ? "in the step"
      : accumulation_ > 1 ? "after the step: gradients accumulate over micro-batches first"
      : world_ > 1        ? "after the step: gradients are reduced across ranks first"
                          : "after the step: an overflow is injected (TRAINER_INJECT_OVERFLOW)";
  if (update_in_step_)
    program_.set_update([this] {
      backend_.vector_ops().optimizer_update(slots_);
      if (averaging_) program_.update_ema();
    });
}

void TrainLoop::schedule_update(std::int64_t at_step) {
  if (scaler_.enabled()) return;  // the backend knows the applied updates
  const ScheduledUpdate update = scheduled_update(at_step);
  opt_.lr = update.lr;
  set_momentum(opt_, update.momentum);
  opt_.step = at_step + 1;
}

ScheduledUpdate TrainLoop::scheduled_update(std::int64_t update) const {
  return {static_cast<float>(learning_rate(cfg_.schedule, cfg_.optimizer.lr, update, total_steps_)),
          static_cast<float>(
              scheduled_momentum(cfg_.schedule, configured_momentum_, update, total_steps_))};
}

void TrainLoop::train_micro_batches() {
  if (accumulation_ > 1) program_.zero_gradients();
  // The step's gradient is the mean over the step's counted rows (real, and
  // not ignored), as one batch of them would give, even when a micro-batch is
  // short or the epoch's last step has fewer micro-batches (drop_last:
  // false). Each micro-batch's loss is a mean over its own counted rows, so
  // it counts by their number over the step's; the total is known only once
  // every micro-batch is in, so the seeds divide by the count as far as known
  // at the first (its counted rows and the real rows still to come) and
  // count_correction_ makes up the difference (1 when no row is ignored, and
  // whenever the step is one micro-batch). The ranks' shards are equal, so
  // each rank's step holds as many micro-batches and rows.
  const std::int64_t first_batch = loader_.cursor().position;
  const std::int64_t micro_batches =
      std::min(accumulation_, loader_.batches_per_epoch() - first_batch);
  std::int64_t rows_to_come = 0;
  for (std::int64_t micro = 0; micro < micro_batches; ++micro)
    rows_to_come += loader_.rows_of_batch(first_batch + micro);
  double seed_divisor = 0;
  std::int64_t step_counted = 0;
  const std::size_t first_weight = loss_weights_.size();
  for (std::int64_t micro = 0; micro < micro_batches; ++micro) {
    const data::Batch& batch = next_micro_batch();
    feed(program_, batch, s_.num_classes, ignored_);
    const std::int64_t counted = counted_rows(batch, ignored_);
    rows_to_come -= batch.rows;
    if (micro == 0) seed_divisor = static_cast<double>(counted + rows_to_come);
    step_counted += counted;
    run_micro_batch(batch, micro,
                    seed_divisor > 0 ? static_cast<double>(counted) / seed_divisor : 0.0);
    loss_weights_.push_back(static_cast<double>(counted));
  }
  // The step's loss: its micro-batches' losses by their share of its counted rows.
  for (std::size_t i = first_weight; i < loss_weights_.size(); ++i)
    loss_weights_[i] = step_counted > 0 ? loss_weights_[i] / static_cast<double>(step_counted) : 0;
  count_correction_ = step_counted > 0 ? seed_divisor / static_cast<double>(step_counted) : 1.0;
  if (step_counted > 0) window_.loss_steps += 1;
}

const data::Batch& TrainLoop::next_micro_batch() {
  const auto wait_start = Clock::now();
  const data::Batch* batch = loader_.next();
  const double waited = seconds_since(wait_start);
  window_.wait += waited;
  total_wait_ += waited;
  collective_.note_data_wait(waited);
  if (!batch) throw std::logic_error("the loader ran out of batches inside an epoch");
  return *batch;
}

void TrainLoop::run_micro_batch(const data::Batch& batch, std::int64_t micro, double weight) {
  // The loss scale, read on the backend: it may have moved in the last update.
  backend_.vector_ops().fill_loss_seed(program_.loss_seed(), weight);
  if (update_in_step_) {     // the values the step's own update reads
    opt_.grad_scale = 1.0f;  // one rank and one micro-batch: nothing to average or correct
    schedule_update(step_);
    backend_.vector_ops().set_optimizer_step(opt_);
    set_average_weight();
  }
  // One seed for the whole step; row j of this rank's micro-batch is sample
  // rank + world * (micro * micro_size + j) of the step's global batch (the
  // loader's sharding), so dropout draws follow the sample.
  StepValues values;
  values.seed = splitmix64(static_cast<std::uint64_t>(cfg_.seed) ^
                           splitmix64(static_cast<std::uint64_t>(step_)));
  values.valid_rows = batch.rows;
  values.first_position = collective_.rank() + world_ * micro * s_.batch.micro;
  values.position_stride = world_;
  program_.train_step(values);
  if (world_ > 1) collective_.watch_queued_work();  // before any read-back may wait on it
  losses_.record(program_.loss());
  window_.samples += batch.rows;
  window_.timed_samples += batch.rows;
  total_samples_ += batch.rows;
  const bool log_step = (step_ + 1) % log_every_ == 0;
  if (s_.num_classes > 0 && (log_step || step_ + 1 == total_steps_)) {
    backend_.copy_to_host(logits_.data(), program_.logits().data, logits_.size() * sizeof(float));
    const Hits h = count_counted_hits(logits_.data(), batch, s_.num_classes, ignored_);
    Hits& hits = log_step ? window_.hits : window_.last_step_hits;
    hits.top1 += h.top1;
    hits.rows += h.rows;
  }
}

void TrainLoop::finish_step() {
  // Each rank's gradients become the mean over its own counted rows; the
  // ranks then count alike (as PyTorch's DDP averages them), so with several
  // ranks the correction comes before the sum.
  float own_scale = static_cast<float>(count_correction_);
  if (world_ > 1 && own_scale != 1.0f) {
    scale_gradients_on_host(own_scale);
    own_scale = 1.0f;
  }
  // Gradients are means over this rank's micro-batches; average them over ranks.
  if (world_ > 1) collective_.all_reduce_sum(grads_);
  if (inject_overflow_.count(step_ + 1) && !grads_.empty()) {
    const float inf = std::numeric_limits<float>::infinity();
    backend_.copy_to_device(grads_.front().data, &inf, sizeof inf);
  }
  // The update averages over ranks; under loss scaling it also divides the
  // scale out, or skips the step when the gradients overflowed.
  opt_.grad_scale = rank_average_ * own_scale;
  schedule_update(step_);
  backend_.vector_ops().optimizer_step(slots_, opt_);
  set_average_weight();
  if (averaging_) program_.update_ema();
  if (rank_buffers_each_step_) average_rank_buffers();
}

void TrainLoop::set_average_weight() {
  if (!averaging_) return;
  const double t = static_cast<double>(step_);  // the updates before this one
  const double decay = cfg_.train.ema_warmup ? std::min(cfg_.train.ema_decay, (1 + t) / (10 + t))
                                             : cfg_.train.ema_decay;
  const float weight = static_cast<float>(1.0 - decay);
  if (weight == average_weight_) return;  // constant once warmed up: nothing to upload
  backend_.vector_ops().set_average_weight(weight);
  average_weight_ = weight;
}

// A round trip through host memory, taken only by steps with ignored rows on
// several ranks with accumulation (the backend has no scaling of its own).
void TrainLoop::scale_gradients_on_host(float factor) {
  std::vector<float> values;
  for (const TensorRef& grad : grads_) {
    if (grad.dtype != DType::f32) throw std::logic_error("gradients are not float32");
    values.resize(static_cast<std::size_t>(grad.numel()));
    backend_.copy_to_host(values.data(), grad.data, grad.bytes());
    for (float& v : values) v *= factor;
    backend_.copy_to_device(grad.data, values.data(), grad.bytes());
  }
}

void TrainLoop::sync_loss_scale() {
  if (!scaler_.enabled()) return;
  const LossScaleState known = scaler_.state();
  scaler_.sync(backend_.vector_ops().loss_scale_state());
  const LossScaleState& now = scaler_.state();
  synced_at_step_ = step_;
  send_schedule();
  // The learning rate and momentum shown are the ones the last applied
  // update used (before any, the ones the first will use).
  const std::int64_t applied = now.steps - now.skipped;
  const ScheduledUpdate last = scheduled_update(std::max<std::int64_t>(applied - 1, 0));
  opt_.lr = last.lr;
  set_momentum(opt_, last.momentum);
  // Every rank decided alike, from the same reduced gradients: the root reports.
  const std::int64_t skipped = collective_.is_root() ? now.skipped - known.skipped : 0;
  if (skipped > 0) progress_.clear();
  if (skipped == 1)
    log_->warn("step {}: gradients overflow at loss scale {:g}: step skipped, scale now {:g}",
               now.last_overflow_step, now.last_overflow_scale, now.scale);
  else if (skipped > 1)
    log_->warn(
        "steps {} to {}: {} steps' gradients overflowed and were skipped, the last (step {}) "
        "at loss scale {:g}; scale now {:g}",
        known.steps + 1, now.steps, skipped, now.last_overflow_step, now.last_overflow_scale,
        now.scale);
  if (scaler_.collapsed())
    throw DivergedError(collapse_diagnosis(scaler_, last_loss_, overflowing_parameters(program_)));
}

void TrainLoop::send_schedule() {
  const LossScaleState& s = scaler_.state();
  const std::int64_t applied = s.steps - s.skipped;
  std::vector<ScheduledUpdate> updates(static_cast<std::size_t>(schedule_window_));
  for (std::size_t i = 0; i < updates.size(); ++i)
    updates[i] = scheduled_update(applied + static_cast<std::int64_t>(i));
  backend_.vector_ops().set_schedule(applied, updates);
}

void TrainLoop::settle_losses() {
  const std::vector<float> losses = losses_.read();
  if (losses.size() != loss_weights_.size())
    throw std::logic_error("the loss log and its weights disagree");
  for (std::size_t i = 0; i < losses.size(); ++i) {
    last_loss_ = losses[i];
    window_.loss += losses[i] * loss_weights_[i];
  }
  loss_weights_.clear();
}

void TrainLoop::check_log_written() const {
  if (const std::string failure = log_failure_->first(); !failure.empty())
    throw std::runtime_error("cannot write " + run_dir_ + "/train.log (" + failure +
                             "); free space (or make it writable) and resume the run (trainer run "
                             "--resume DIR): it goes on from its last checkpoint");
}

void TrainLoop::log_window() {
  check_log_written();
  settle_losses();
  sync_loss_scale();
  // The time of the steps this process ran in the window, evaluations and
  // checkpoints left out.
  const double elapsed = std::max(1e-9, seconds_since(window_.start) - window_.paused);
  window_.hits.top1 += window_.last_step_hits.top1;
  window_.hits.rows += window_.last_step_hits.rows;
  // This rank's, for its loader's advice (the sums below are the job's).
  const std::int64_t own_timed_samples = window_.timed_samples;
  if (world_ > 1) {  // the window's loss and hits over every rank
    std::vector<double> sums = {window_.loss,
                                static_cast<double>(window_.hits.top1),
                                static_cast<double>(window_.hits.rows),
                                static_cast<double>(window_.samples),
                                window_.loss_steps,
                                static_cast<double>(window_.timed_samples)};
    collective_.all_reduce_sum(sums);
    window_.loss = sums[0] / world_;
    window_.hits.top1 = static_cast<std::int64_t>(sums[1]);
    window_.hits.rows = static_cast<std::int64_t>(sums[2]);
    window_.samples = static_cast<std::int64_t>(sums[3]);
    window_.loss_steps = sums[4] / world_;
    window_.timed_samples = static_cast<std::int64_t>(sums[5]);
  }
  // The mean over the steps that had a loss; none when every row of the
  // window was ignore_index.
  const bool has_loss = window_.loss_steps > 0;
  const double loss = has_loss ? window_.loss / window_.loss_steps : 0.0;
  // With fp16 loss scaling an overflowing forward pass is the scaler's to
  // diagnose (its steps are skipped); anything else non-finite stops here.
  if (!std::isfinite(loss) && !scaler_.enabled())
    throw DivergedError(std::string("the training loss is ") +
                        (std::isnan(loss) ? "NaN" : "infinite") + " at step " +
                        std::to_string(step_) +
                        " (mean of the last logging window): lower optimizer.lr (or set "
                        "train.clip_grad_norm), or check the inputs and labels");
  // No rates for a window whose steps all ran before a resume (its record
  // made again at the run's end).
  const bool timed = window_.timed_steps > 0;
  const double samples_per_s = static_cast<double>(window_.timed_samples) / elapsed;
  const double step_ms =
      1000.0 * elapsed / static_cast<double>(std::max<std::int64_t>(1, window_.timed_steps));
  const double wait_pct = 100.0 * window_.wait / elapsed;
  nlohmann::json record = {{"step", step_}, {"epoch", epoch_}, {"split", "train"}};
  if (has_loss) record["loss"] = loss;
  record["lr"] = opt_.lr;
  if (cycles_momentum(cfg_.schedule)) record["momentum"] = momentum_of(opt_);
  if (timing_in_metrics_ && timed) {
    record["samples_per_s"] = samples_per_s;
    record["step_ms"] = step_ms;
    record["data_wait_pct"] = wait_pct;
  }
  if (window_.hits.rows > 0)
    record["accuracy"] =
        static_cast<double>(window_.hits.top1) / static_cast<double>(window_.hits.rows);
  if (scaler_.enabled()) {
    record["loss_scale"] = scaler_.scale();
    record["skipped_steps"] = scaler_.skipped_steps();
  }
  const MemoryFigures memory = memory_figures(backend_);
  record["memory_allocated_mib"] = memory.allocated_mib;
  record["memory_peak_mib"] = memory.peak_mib;
  nlohmann::json timing_record = {{"step", step_},
                                  {"samples_per_s", samples_per_s},
                                  {"step_ms", step_ms},
                                  {"data_wait_pct", wait_pct},
                                  {"memory_reserved_mib", memory.reserved_mib}};
  // The process's resident memory varies run to run, like timing.
  if (timing_in_metrics_) record["memory_reserved_mib"] = memory.reserved_mib;
  write_metrics(record);
  last_train_ = record;
  if (timed) {
    timing_.write(timing_record);
    // Throughput in TensorBoard too when metrics.jsonl leaves it out.
    if (!timing_in_metrics_) {
      timing_record["split"] = "train";
      events_.write_scalars(step_, scalars_of(timing_record));
    }
  }
  progress_.clear();
  log_->info("epoch {} step {}/{}: loss {} lr {:.4g}{} mem {:.0f}/{:.0f} MiB{}{}", epoch_, step_,
             total_steps_,
             has_loss ? fmt::format("{:.4f}", loss) : std::string("none (every label ignored)"),
             opt_.lr,
             timed ? fmt::format(" {:.0f} samples/s {:.2f} ms/step data-wait {:.1f}%",
                                 samples_per_s, step_ms, wait_pct)
                   : std::string(),
             memory.allocated_mib, memory.reserved_mib,
             scaler_.enabled() ? fmt::format(" scale {:g}", scaler_.scale()) : std::string(),
             step_ < total_steps_ && seconds_left() >= 0 ? " eta " + short_duration(seconds_left())
                                                         : std::string());
  // After the record and its line: its loss, finite, was measured before the
  // updates that broke the weights (lr-find reads it as the range's last point).
  stop_if_weights_went_non_finite(true);
  if (timed) watch_input(elapsed, own_timed_samples);
  window_ = Window{};
}

void TrainLoop::watch_input(double window_seconds, std::int64_t window_samples) {
  input_watch_.seconds += window_seconds;
  input_watch_.wait += window_.wait;
  input_watch_.samples += window_samples;
  if (input_watch_.seconds < 1.0) return;
  const InputWatch watched = input_watch_;
  input_watch_ = {};
  const double wait_pct = 100.0 * watched.wait / watched.seconds;
  if (wait_pct > 10.0 && !warned_input_bound_) {
    warned_input_bound_ = true;
    InputWait w;
    w.wait_pct = wait_pct;
    w.loader_samples_per_s = loader_.samples_per_second();
    w.model_samples_per_s =
        static_cast<double>(watched.samples) / std::max(1e-9, watched.seconds - watched.wait);
    w.workers = cfg_.data.workers;
    w.prefetch = cfg_.data.prefetch;
    const std::int64_t cores = std::max(1u, std::thread::hardware_concurrency());
    const bool on_cpu = cfg_.devices.cpu || cfg_.devices.gpus.empty();
    w.compute_threads = on_cpu ? cpu_compute_threads(cfg_) : 1;
    w.cores = cores;
    log_->warn("{}", input_wait_advice(w));
  }
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
  if (!std::isfinite(e.loss))
    throw DivergedError(std::string("the evaluation loss is ") +
                        (std::isnan(e.loss) ? "NaN" : "infinite") + " at step " +
                        std::to_string(at_step) + " (over " + std::to_string(e.samples) +
                        " samples): the weights have diverged, or the evaluation data holds "
                        "values the model overflows on; lower optimizer.lr (or set "
                        "train.clip_grad_norm), or check the evaluation data (trainer validate "
                        "--data)");
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

void TrainLoop::save_before_evaluation(std::int64_t epoch_step) {
  save_state(stopped_inside_epoch_ ? *stopped_inside_epoch_ : state_now(epoch_, epoch_step));
}

void TrainLoop::evaluate_keeping_training(std::int64_t epoch_step) {
  try {
    // The ranks of a job stop together after a step; the end of training
    // has its evaluation to make, then nothing more.
    if (run_eval(step_, world_ == 1 && step_ < total_steps_)) return;
    stopped_by_ = checkpoint::stop_requested();
    save_before_evaluation(epoch_step);
    log_->warn(
        "signal {} during the evaluation at step {}: the evaluation is left for the "
        "resume to make",
        stopped_by_, step_);
  } catch (const DivergedError&) {
    throw;  // weights not worth keeping
  } catch (const std::exception& e) {
    // With several ranks the others wait in the evaluation's reductions: no
    // checkpoint can be agreed on.
    if (world_ > 1 || writes_nothing()) throw;
    log_->error("the evaluation at step {} failed: {}", step_, e.what());
    try {
      save_before_evaluation(epoch_step);
    } catch (const std::exception& save_error) {
      log_->error("the training since the last checkpoint could not be saved: {}",
                  save_error.what());
      throw;
    }
    if (step_ < total_steps_)
      log_->error(
          "the training up to step {} is kept in checkpoint {}: once the evaluation data "
          "reads, `trainer run --resume` makes this evaluation again and goes on",
          step_, last_checkpoint_);
    else
      log_->error(
          "the training up to step {} (its end) is kept in checkpoint {}: once the evaluation "
          "data reads, `trainer eval` evaluates it",
          step_, last_checkpoint_);
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
  log_->info("early stopping at step {}: {} has not improved on {:.6g} (step {}) in {} evaluations",
             at_step, rule.metric, stop_best_.value_or(std::nan("")), stop_best_step_,
             stop_bad_evals_);
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
  st.metrics_bytes = metrics_.bytes_written();
  st.timing_bytes = timing_.bytes_written();
  st.events_bytes =
      cfg_.output.tensorboard ? std::optional(events_.bytes_written()) : unwritten_events_bytes_;
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
    last_checkpoint_ = store_.save(
        program_, st, retention_, [&](const std::string& problem) { problems.push_back(problem); });
    progress_.clear();
    log_->info("checkpoint {}", last_checkpoint_);
    for (const std::string& problem : problems) log_->warn("{}", problem);
  }
  // The other ranks wait here, not in the next step's gradient reduction,
  // whose timeout is meant for hung ranks, not for slow storage.
  if (world_ > 1) collective_.wait_for_checkpoint();
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

bool TrainLoop::early_stopped_at_checkpoint() const {
  const nlohmann::json& stop = resumed_.early_stopping;
  const std::int64_t patience = cfg_.train.early_stopping.patience;
  return patience > 0 && stop.is_object() && stop.value("bad", std::int64_t{0}) >= patience;
}

bool TrainLoop::replay_evaluation_at_checkpoint() {
  const std::int64_t every = cfg_.train.eval_every;
  const std::int64_t in_epoch = resumed_.epoch_step;
  if (!options_.resume || every <= 0 || step_ == 0 || step_ % every != 0 || step_ >= total_steps_ ||
      in_epoch <= 0 || in_epoch >= steps_per_epoch_ ||
      (last_eval_.is_object() && last_eval_.value("step", std::int64_t{-1}) == step_))
    return false;
  run_eval(step_);
  // Saved before this evaluation (stopped or failed in it): saved again with
  // its metric, as the run that went on saved it, for keep_best to rank.
  if (early_stopped_ || keeps_best()) save_checkpoint(epoch_, in_epoch);
  return true;
}

std::optional<nlohmann::json> TrainLoop::finished_summary(std::int64_t at_step) const {
  std::ifstream in(run_dir_ + "/summary.json");
  if (!in) return std::nullopt;
  try {
    nlohmann::json summary = nlohmann::json::parse(in);
    if (summary.is_object() && summary.value("status", "") == "complete" &&
        summary.value("steps", std::int64_t{-1}) == at_step)
      return summary;
  } catch (const nlohmann::json::exception&) {
  }
  return std::nullopt;
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
                                  {"last_checkpoint", last_checkpoint_}};
  try {
    checkpoint::write_file_atomically(run_dir_ + "/summary.json", json_text(summary, 2) + "\n");
  } catch (const std::exception& e) {
    log_->warn("could not write summary.json: {}", e.what());  // the run's own error follows
  }
  // The error ends train.log too (the console gets it from the command line).
  log_failure(run_dir_, error);
}

void TrainLoop::train_to_end() {
  if (replay_evaluation_at_checkpoint() && early_stopped_) return;
  std::int64_t resume_in_epoch = resumed_.epoch_step;
  while (step_ < total_steps_ || resume_in_epoch >= steps_per_epoch_) {
    std::int64_t in_epoch = resume_in_epoch;
    resume_in_epoch = 0;
    if (in_epoch < steps_per_epoch_) loader_.start_epoch(epoch_, in_epoch * accumulation_);
    bool step_checkpoint_due = false;
    for (; in_epoch < steps_per_epoch_ && step_ < total_steps_;) {
      train_micro_batches();
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
        save_checkpoint(epoch_, in_epoch);
        break;
      }
      if (steps_due && in_epoch < steps_per_epoch_ && step_ < total_steps_)
        save_checkpoint(epoch_, in_epoch);
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
        keeps_best())
      save_checkpoint(epoch_, 0);
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
                            {"last_checkpoint", last_checkpoint_},
                            {"step_execution", program_.step_execution()},
                            {"optimizer_update", update_placement_}};
  if (!resumed_from_.empty()) summary["resumed_from"] = resumed_from_;
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
    log_->info("done: {} steps in {:.1f} s, {:.0f} samples/s", step_, wall, samples_per_s);
  }
  if (const int late = checkpoint::stop_requested();
      stopped_by_ == 0 && late != 0 && collective_.is_root())
    log_->info(
        "signal {} came after the last step: the run made its final evaluation and "
        "checkpoint, and is complete",
        late);
  return summary;
}

}  // namespace

nlohmann::json train(const Session& s, graph::Program& program, const std::string& run_dir,
                     Collective& collective, const TrainOptions& options) {
  return TrainLoop(s, program, run_dir, collective, options).run();
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
