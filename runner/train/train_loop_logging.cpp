// The training loop's log (train_loop.h): its logger (the terminal and
// train.log), a log point's record of the window into metrics.jsonl,
// timing.jsonl and TensorBoard, and the watch on steps that wait for data.
#include "runner/train/train_loop.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "ops/cpu/onednn.h"
#include "runner/dist/launch_env.h"
#include "runner/train/devices.h"
#include "runner/train/input_advice.h"
#include "runner/train/memory_report.h"
#include "runner/train/schedule.h"
#include "runner/train/tfevents.h"

namespace trainer::train::loop {
namespace {

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

// The cores this process may use (its affinity mask), shared with the other
// ranks a launcher started on this machine.
std::int64_t usable_cores_share() {
  int local_ranks = 1;
  try {
    if (const auto env = dist::detect_launch_env()) local_ranks = std::max(1, env->local_world);
  } catch (const std::exception&) {  // a malformed launcher variable: the job said so at start
  }
  return std::max(1, cpu::usable_cpus() / local_ranks);
}

}  // namespace

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

void TrainLoop::write_metrics(const nlohmann::json& record) {
  metrics_.write(record);
  events_.write_scalars(record.value("step", std::int64_t{0}), scalars_of(record));
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
                             "--resume " +
                             run_dir_ + "): it goes on from its last checkpoint");
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
    w.slots = loader_.ring_size();
    w.compute_threads = step_compute_threads(cfg_);
    w.cores = usable_cores_share();
    log_->warn("{}", input_wait_advice(w));
  }
}

}  // namespace trainer::train::loop
