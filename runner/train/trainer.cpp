// The training loop and evaluation.
#include "runner/train/trainer.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "data/loader.h"
#include "runner/checkpoint/checkpoint_store.h"
#include "runner/checkpoint/safetensors.h"
#include "runner/checkpoint/stop_signal.h"
#include "runner/checkpoint/weights.h"
#include "runner/graph/init.h"
#include "runner/train/loss_log.h"
#include "runner/train/loss_scale.h"
#include "runner/train/memory_report.h"
#include "runner/train/metrics.h"
#include "runner/train/progress.h"
#include "runner/train/schedule.h"

namespace trainer::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

data::LoaderOptions loader_options(const Session& s, bool training, Backend& backend,
                                   const Collective* collective = nullptr) {
  data::LoaderOptions o;
  const auto& d = s.config.data;
  o.batch_size = s.batch.micro;
  o.workers = d.workers;
  o.prefetch = d.prefetch;
  o.shuffle = training && d.shuffle;
  o.drop_last = training && d.drop_last;
  o.seed = static_cast<std::uint64_t>(s.config.seed);
  // The batch ring in the backend's fastest host memory (page-locked on CUDA).
  o.pin_memory = d.pin_memory;
  if (d.pin_memory) {
    o.allocate = [&backend](std::size_t bytes) { return backend.allocate_host(bytes); };
    o.free = [&backend](void* p) { backend.release_host(p); };
  }
  if (collective) {
    o.rank = collective->rank();
    o.world_size = collective->world();
  }
  return o;
}

// Copies a batch into the program's input buffers, checking labels against the model.
void feed(graph::Program& program, const data::Batch& batch, std::int64_t classes) {
  if (classes > 0) {
    const std::int64_t* labels = batch.labels.i64();
    for (std::int64_t r = 0; r < batch.rows; ++r) {
      if (labels[r] < 0 || labels[r] >= classes)
        throw std::runtime_error(
            "label " + std::to_string(labels[r]) + " in row " + std::to_string(r) + " of batch " +
            std::to_string(batch.index) + " (epoch " + std::to_string(batch.epoch) +
            ") is outside the model's " + std::to_string(classes) + " classes");
    }
  }
  Backend& backend = program.backend();
  backend.copy_input_to_device(program.input().data, batch.inputs.data, program.input().bytes());
  backend.copy_input_to_device(program.labels().data, batch.labels.data, program.labels().bytes());
}

float read_scalar(graph::Program& program, const TensorRef& t) {
  float v = 0;
  program.backend().copy_to_host(&v, t.data, sizeof v);
  return v;
}

// The root rank logs to the terminal and train.log; other ranks only report warnings.
std::shared_ptr<spdlog::logger> make_logger(const std::string& run_dir,
                                            const Collective& collective) {
  auto console = std::make_shared<spdlog::sinks::stdout_color_sink_mt>();
  console->set_pattern(
      collective.world() > 1 ? "[rank " + std::to_string(collective.rank()) + "] %v" : "%v");
  if (!collective.is_root()) {
    auto logger = std::make_shared<spdlog::logger>("trainer", console);
    logger->set_level(spdlog::level::warn);
    return logger;
  }
  auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(run_dir + "/train.log", false);
  file->set_pattern("[%Y-%m-%d %H:%M:%S.%e] %v");
  return std::make_shared<spdlog::logger>("trainer", spdlog::sinks_init_list{console, file});
}

// `model.init_from: weights.safetensors` (relative to the YAML file that names
// it) with `model.init_strict: false` to load only the tensors that match.
void load_init_from(const Session& s, graph::Program& program) {
  const config::Node& model = s.config.model.node;
  const config::Node* from = model.is_map() ? model.find("init_from") : nullptr;
  if (!from) return;
  if (!from->is_scalar() || from->text().empty())
    throw std::runtime_error(config::to_string(from->mark()) +
                             ": model.init_from: expected a path to a .safetensors file");
  std::filesystem::path path = from->text();
  if (path.is_relative() && !from->mark().file.empty() && from->mark().file[0] != '<')
    path = std::filesystem::path(from->mark().file).parent_path() / path;
  bool strict = true;
  if (const config::Node* st = model.find("init_strict")) {
    if (!st->is_scalar() || (st->text() != "true" && st->text() != "false"))
      throw std::runtime_error(config::to_string(st->mark()) +
                               ": model.init_strict: expected true or false");
    strict = st->text() == "true";
  }
  const auto file = checkpoint::read_safetensors(path.string());
  const auto report = checkpoint::load_parameters(program, file, path.string(), strict);
  std::string skipped;
  for (const auto& m : report.mismatches) skipped += "\n  " + m;
  std::fprintf(stderr, "model.init_from: loaded %zu tensor(s) from %s%s%s\n", report.loaded.size(),
               path.string().c_str(),
               report.mismatches.empty() ? "" : "; not loaded:", skipped.c_str());
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
// ranks must stop after the same step.
int agreed_stop_signal(Collective& collective) {
  const int local = checkpoint::stop_requested();
  if (collective.world() <= 1) return local;
  std::vector<double> any = {local != 0 ? 1.0 : 0.0};
  collective.all_reduce_sum(any);
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

// Why fp16 loss scaling collapsed, and what to change.
std::string collapse_diagnosis(const LossScaler& scaler, const config::LossScaleConfig& config,
                               std::int64_t step, double loss,
                               const std::vector<std::string>& overflowing) {
  std::string names;
  for (std::size_t i = 0; i < overflowing.size() && i < 3; ++i)
    names += (names.empty() ? "" : ", ") + overflowing[i];
  std::string text = "fp16 loss scaling collapsed at step " + std::to_string(step) + ": " +
                     std::to_string(config.collapse_patience) +
                     " consecutive steps overflowed at the minimum loss scale " +
                     fmt::format("{:g}", scaler.scale()) + " (" +
                     std::to_string(scaler.skipped_steps()) + " steps skipped in all). ";
  if (!std::isfinite(loss))
    return text + "The forward pass itself overflows fp16 (the loss is " +
           fmt::format("{:g}", loss) +
           "): activations exceed fp16's largest value, 65504, which no loss scale can fix. "
           "Likely cause: inputs that are not normalised, a missing normalisation layer, or "
           "weights grown by too high a learning rate. Use precision: bf16 (float32's range), "
           "normalise the inputs, or lower optimizer.lr.";
  return text + "The loss is finite (" + fmt::format("{:.4g}", loss) + ") but the gradients" +
         (names.empty() ? std::string() : " of " + names) +
         " overflow fp16 even at that scale. Likely cause: a learning rate that makes the "
         "weights diverge, or exploding gradients. Lower optimizer.lr, set "
         "train.clip_grad_norm, or use precision: bf16.";
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

// Cuts a JSON-lines file back to `bytes` (what it held at the checkpoint) before appending.
void truncate_file(const std::string& path, std::uint64_t bytes) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return;
  if (std::filesystem::file_size(path, ec) > bytes) std::filesystem::resize_file(path, bytes, ec);
  if (ec)
    throw std::runtime_error("cannot truncate " + path +
                             " to its checkpointed length: " + ec.message());
}

}  // namespace

OptimizerStep configured_optimizer(const config::Config& cfg) {
  OptimizerStep opt;
  const std::string& type = cfg.optimizer.type;
  opt.kind = type == "adam"    ? OptimizerKind::adam
             : type == "adamw" ? OptimizerKind::adamw
                               : OptimizerKind::sgd;
  opt.lr = static_cast<float>(cfg.optimizer.lr);
  opt.momentum = static_cast<float>(cfg.optimizer.momentum);
  opt.nesterov = cfg.optimizer.nesterov;
  opt.weight_decay = static_cast<float>(cfg.optimizer.weight_decay);
  opt.beta1 = static_cast<float>(cfg.optimizer.beta1);
  opt.beta2 = static_cast<float>(cfg.optimizer.beta2);
  opt.eps = static_cast<float>(cfg.optimizer.eps);
  return opt;
}

graph::CompileOptions compile_options(const Session& s) {
  graph::CompileOptions o;
  const auto& opt = s.config.optimizer;
  o.optimizer_state_tensors = opt.type == "sgd" ? (opt.momentum > 0 ? 1 : 0) : 2;
  o.accumulate_gradients = s.batch.accumulation > 1;
  o.deterministic = s.config.deterministic;
  o.autotune = s.config.backend.autotune && !s.config.deterministic;
  o.allow_tf32 = s.config.precision.mode == "tf32";
  o.record_steps = s.config.backend.cuda_graphs;
  o.collective = s.collective;
  return o;
}

void initialize_parameters(const Session& session, graph::Program& program) {
  Backend& backend = program.backend();
  std::vector<float> values;
  for (auto& p : program.params()) {
    graph::initialize_param(*p.param, static_cast<std::uint64_t>(session.config.seed), values);
    backend.copy_to_device(p.value.data, values.data(), values.size() * sizeof(float));
    if (p.state0) backend.vector_ops().fill(p.state0, 0.0f);
    if (p.state1) backend.vector_ops().fill(p.state1, 0.0f);
  }
}

std::unique_ptr<graph::Program> compile(const Session& session, Backend& backend) {
  auto program = std::make_unique<graph::Program>(training_graph(session, backend), backend,
                                                  compile_options(session));
  initialize_parameters(session, *program);
  load_init_from(session, *program);
  return program;
}

EvalResult evaluate(const Session& s, graph::Program& program) {
  EvalResult result;
  if (!s.eval_data) return result;
  data::Loader loader(s.eval_data, s.eval_pipeline, loader_options(s, false, program.backend()));
  loader.start_epoch(0);
  const std::int64_t classes = s.num_classes;
  std::vector<float> logits(classes > 0 ? static_cast<std::size_t>(numel(program.logits().shape))
                                        : 0);
  double loss_sum = 0;
  Hits hits;
  const std::int64_t limit = s.config.train.eval_batches;
  for (std::int64_t b = 0; limit == 0 || b < limit; ++b) {
    const data::Batch* batch = loader.next();
    if (!batch) break;
    feed(program, *batch, classes);
    program.eval_step(batch->rows);
    loss_sum += static_cast<double>(read_scalar(program, program.loss())) *
                static_cast<double>(batch->rows);
    result.samples += batch->rows;
    if (classes > 0) {
      program.backend().copy_to_host(logits.data(), program.logits().data,
                                     logits.size() * sizeof(float));
      const Hits h = count_hits(logits.data(), batch->labels.i64(), batch->rows, classes);
      hits.top1 += h.top1;
      hits.top5 += h.top5;
      hits.rows += h.rows;
    }
  }
  if (result.samples > 0) result.loss = loss_sum / static_cast<double>(result.samples);
  if (hits.rows > 0) {
    result.accuracy = static_cast<double>(hits.top1) / static_cast<double>(hits.rows);
    result.top5 = static_cast<double>(hits.top5) / static_cast<double>(hits.rows);
  }
  return result;
}

nlohmann::json train(const Session& s, graph::Program& program, const std::string& run_dir) {
  SingleProcess single;
  return train(s, program, run_dir, single, TrainOptions{});
}

nlohmann::json train(const Session& s, graph::Program& program, const std::string& run_dir,
                     Collective& collective) {
  return train(s, program, run_dir, collective, TrainOptions{});
}

nlohmann::json train(const Session& s, graph::Program& program, const std::string& run_dir,
                     Collective& collective, const TrainOptions& options) {
  const auto& cfg = s.config;
  auto log = make_logger(run_dir, collective);
  Backend& backend = program.backend();
  const int world = collective.world();
  const float rank_average = 1.0f / static_cast<float>(world);

  data::Loader loader(s.train_data, s.train_pipeline,
                      loader_options(s, true, program.backend(), &collective));
  const std::int64_t accumulation = s.batch.accumulation;
  const std::int64_t steps_per_epoch = loader.batches_per_epoch() / accumulation;
  if (steps_per_epoch < 1)
    throw std::runtime_error(
        "the training set gives " + std::to_string(loader.batches_per_epoch()) +
        " micro-batches per epoch, fewer than one optimizer step (batch_size " +
        std::to_string(s.batch.global) + ")");
  const std::int64_t total_steps =
      cfg.train.max_steps > 0 ? cfg.train.max_steps : cfg.train.epochs * steps_per_epoch;
  const std::int64_t log_every = std::max<std::int64_t>(1, cfg.train.log_every);

  // Resume: the newest checkpoint that verifies; bad ones are reported and skipped.
  checkpoint::CheckpointStore store(run_dir);
  checkpoint::TrainState resumed;
  std::string resumed_from;
  if (options.resume) {
    auto loaded = store.load_newest(program, [&](const std::string& m) { log->warn("{}", m); });
    if (loaded) {
      const auto& st = loaded->state;
      if (st.seed != cfg.seed || st.accumulation != accumulation ||
          st.steps_per_epoch != steps_per_epoch)
        throw std::runtime_error(
            "checkpoint " + loaded->path + " was written with seed " + std::to_string(st.seed) +
            ", " + std::to_string(st.steps_per_epoch) + " steps per epoch and accumulation " +
            std::to_string(st.accumulation) + "; this config gives seed " +
            std::to_string(cfg.seed) + ", " + std::to_string(steps_per_epoch) + " and " +
            std::to_string(accumulation) +
            ": resume with the run's own config.yaml (only train.max_steps / train.epochs may "
            "grow)");
      resumed = st;
      resumed_from = loaded->path;
      log->info("resuming from {}: step {}, epoch {}, {} of its {} steps done", loaded->path,
                st.step, st.epoch, st.epoch_step, steps_per_epoch);
    } else {
      log->warn("no usable checkpoint in {}: starting from the beginning", store.directory());
      initialize_parameters(s, program);
    }
  }

  const std::string metrics_path = run_dir + "/metrics.jsonl";
  const std::string timing_path = run_dir + "/timing.jsonl";
  MetricsWriter metrics, timing;
  if (collective.is_root()) {
    if (options.resume) {
      truncate_file(metrics_path, resumed.metrics_bytes);
      truncate_file(timing_path, resumed.timing_bytes);
    }
    metrics = MetricsWriter(metrics_path, options.resume);
    timing = MetricsWriter(timing_path, options.resume);
  }
  // Timing can never repeat bit for bit: with `deterministic: true` it lives only in timing.jsonl.
  const bool timing_in_metrics = !cfg.deterministic;

  log->info(
      "model: {} parameters, {} nodes; arena {:.1f} MiB; batch {} = micro {} x accumulation {}",
      s.graph.parameter_count(), s.graph.nodes.size(),
      static_cast<double>(program.memory_plan().arena_bytes) / (1 << 20), s.batch.global,
      s.batch.micro, accumulation);
  log->info("training {} steps ({} per epoch) on {}", total_steps, steps_per_epoch, backend.name());

  // Optimizer slots over every trainable parameter.
  std::vector<ParamSlot> slots = program.optimizer_slots();
  std::vector<TensorRef> grads;
  for (const auto& p : std::as_const(program).params())
    if (p.grad) grads.push_back(p.grad);
  OptimizerStep opt = configured_optimizer(cfg);
  opt.lr = static_cast<float>(resumed.lr);

  // fp16: the loss is scaled before backward and divided out by the optimizer.
  LossScaler scaler(cfg.precision.loss_scale, cfg.precision.mode == "fp16");
  scaler.restore(resumed.loss_scale);
  const std::set<std::int64_t> inject_overflow = injected_overflow_steps();
  // The update joins the training step (and its recording, a CUDA graph) when
  // nothing is decided on the host between backward and the update: one
  // micro-batch and one rank, no loss scaling, no injected overflow. Clipping
  // is measured inside the update.
  const bool update_in_step =
      accumulation == 1 && world == 1 && !scaler.enabled() && inject_overflow.empty();
  // Without loss scaling the update clips on the backend; the host learns of
  // non-finite gradients at the next log point.
  const bool clip_in_update = cfg.train.clip_grad_norm > 0 && !scaler.enabled();
  opt.clip_norm = clip_in_update ? cfg.train.clip_grad_norm : 0.0;
  struct UpdateInStep {  // detached however train() ends: it refers to `slots`
    graph::Program& program;
    ~UpdateInStep() { program.set_update(nullptr); }
  } detach_update{program};
  if (update_in_step)
    program.set_update([&backend, &slots] { backend.vector_ops().optimizer_update(slots); });
  // The learning rate and Adam step of the update that ends the current step
  // (skipped steps do not move the schedule).
  auto schedule_update = [&](std::int64_t at_step) {
    const std::int64_t updates = at_step - scaler.skipped_steps();
    opt.lr =
        static_cast<float>(learning_rate(cfg.schedule, cfg.optimizer.lr, updates, total_steps));
    opt.step = updates + 1;
  };
  std::vector<float> logits(
      s.num_classes > 0 ? static_cast<std::size_t>(numel(program.logits().shape)) : 0);

  // Logging window (restored from a checkpoint so the next record is the same).
  double window_loss = resumed.window_loss, window_wait = 0;
  Hits window_hits;
  // The checkpointed window is every rank's (state_now): its counts go to the
  // root alone, since the log point sums them over the ranks; its loss is the
  // ranks' mean, which every rank keeps (the log point averages).
  const bool window_owner = collective.is_root();
  window_hits.top1 = window_owner ? resumed.window_top1 : 0;
  window_hits.rows = window_owner ? resumed.window_rows : 0;
  std::int64_t window_steps = resumed.window_steps,
               window_samples = window_owner ? resumed.window_samples : 0;
  auto window_start = Clock::now();
  bool warned_input_bound = false;

  ProgressBar progress(collective.is_root());
  double last_loss = 0;
  // Each micro-batch's loss stays in backend memory until the window needs it:
  // no device synchronisation per step for the loss.
  LossLog losses(backend, static_cast<std::size_t>(log_every * accumulation));
  // Folds the losses recorded since the last call into the window, in step
  // order (the same sums as reading each loss at its step).
  auto settle_losses = [&] {
    for (const float loss : losses.read()) {
      last_loss = loss;
      window_loss += loss / static_cast<double>(accumulation);
    }
  };
  const auto run_start = Clock::now();
  double total_wait = 0;
  std::int64_t total_samples = 0;
  nlohmann::json best_eval = resumed.best_eval, last_eval = resumed.last_eval,
                 last_train = resumed.last_train;
  std::int64_t step = resumed.step, epoch = resumed.epoch;
  std::int64_t resume_in_epoch = resumed.epoch_step;
  int stopped_by = 0;
  std::string last_checkpoint;
  std::optional<checkpoint::TrainState> stopped_inside_epoch;

  const checkpoint::RetentionPolicy retention{cfg.checkpoint.keep_last, cfg.checkpoint.keep_best,
                                              cfg.checkpoint.mode == "max"};
  // The state after `epoch_step` steps of `at_epoch` (== steps_per_epoch: its evaluation is
  // pending).
  auto state_now = [&](std::int64_t at_epoch, std::int64_t epoch_step) {
    settle_losses();
    checkpoint::TrainState st;
    st.step = step;
    st.epoch = at_epoch;
    st.epoch_step = epoch_step;
    st.steps_per_epoch = steps_per_epoch;
    st.accumulation = accumulation;
    st.total_steps = total_steps;
    st.seed = cfg.seed;
    st.schedule = cfg.schedule.type;
    st.lr = opt.lr;
    st.loss_scale = scaler.to_json();
    st.window_loss = window_loss;
    st.window_top1 = window_hits.top1;
    st.window_rows = window_hits.rows;
    st.window_steps = window_steps;
    st.window_samples = window_samples;
    if (world > 1 && window_steps > 0) {  // the window of every rank: resumable on any number
      std::vector<double> w = {window_loss, static_cast<double>(window_hits.top1),
                               static_cast<double>(window_hits.rows),
                               static_cast<double>(window_samples)};
      collective.all_reduce_statistics(w);
      st.window_loss = w[0] / world;
      st.window_top1 = static_cast<std::int64_t>(w[1]);
      st.window_rows = static_cast<std::int64_t>(w[2]);
      st.window_samples = static_cast<std::int64_t>(w[3]);
    }
    st.last_eval = last_eval;
    st.best_eval = best_eval;
    st.last_train = last_train;
    st.metrics_bytes = metrics.bytes_written();
    st.timing_bytes = timing.bytes_written();
    st.metric = metric_value(cfg.checkpoint.metric, last_eval, last_train);
    return st;
  };
  auto save_state = [&](const checkpoint::TrainState& st) {
    if (!collective.is_root()) return;
    last_checkpoint = store.save(program, st, retention);
    progress.clear();
    log->info("checkpoint {}", last_checkpoint);
  };
  auto save_checkpoint = [&](std::int64_t at_epoch, std::int64_t epoch_step) {
    save_state(state_now(at_epoch, epoch_step));
  };

  auto run_eval = [&](std::int64_t at_step) {
    if (!s.eval_data) return;
    const EvalResult e = evaluate(s, program);
    nlohmann::json record = {{"step", at_step},
                             {"epoch", epoch},
                             {"split", "eval"},
                             {"loss", e.loss},
                             {"samples", e.samples}};
    if (s.num_classes > 0) {
      record["accuracy"] = e.accuracy;
      if (s.num_classes > 5) record["top5"] = e.top5;
    }
    metrics.write(record);
    last_eval = record;
    if (best_eval.is_null() || (s.num_classes > 0 ? e.accuracy > best_eval.value("accuracy", 0.0)
                                                  : e.loss < best_eval.value("loss", 1e300)))
      best_eval = record;
    progress.clear();
    if (s.num_classes > 0)
      log->info("eval  epoch {} step {}: loss {:.4f} accuracy {:.4f}", epoch, at_step, e.loss,
                e.accuracy);
    else
      log->info("eval  epoch {} step {}: loss {:.6f}", epoch, at_step, e.loss);
  };

  // The end of a step whose update is not part of it: reduce over ranks, check
  // the gradients (loss scaling, and clipping with it), then update or skip.
  auto finish_step = [&] {
    // Gradients are means over this rank's micro-batches; average them over ranks.
    if (world > 1) collective.all_reduce_sum(grads);
    if (inject_overflow.count(step + 1) && !grads.empty()) {
      const float inf = std::numeric_limits<float>::infinity();
      backend.copy_to_device(grads.front().data, &inf, sizeof inf);
    }
    bool finite = true;
    double sum_squares = 0;
    if (scaler.enabled()) sum_squares = backend.vector_ops().sum_squares(grads, finite);
    const double scale_before = scaler.scale();
    if (!scaler.update(finite)) {
      // Overflow: the step is skipped; the schedule stays where it is.
      progress.clear();
      log->warn("step {}: gradients overflow at loss scale {:g}: step skipped, scale now {:g}",
                step + 1, scale_before, scaler.scale());
      if (scaler.collapsed()) {
        settle_losses();
        throw std::runtime_error(collapse_diagnosis(scaler, cfg.precision.loss_scale, step + 1,
                                                    last_loss, overflowing_parameters(program)));
      }
    } else {
      if (!finite)
        throw std::runtime_error("non-finite gradients at step " + std::to_string(step) +
                                 ": lower optimizer.lr or check the data");
      // Gradients are divided by the loss scale and averaged over ranks in the update.
      const double unscale = rank_average / scale_before;
      opt.grad_scale = static_cast<float>(unscale);
      if (cfg.train.clip_grad_norm > 0 && !clip_in_update)
        opt.grad_scale = static_cast<float>(
            clipped_scale(unscale, unscale * std::sqrt(sum_squares), cfg.train.clip_grad_norm));
      schedule_update(step);
      backend.vector_ops().optimizer_step(slots, opt);
    }
  };

  while (step < total_steps || resume_in_epoch >= steps_per_epoch) {
    std::int64_t in_epoch = resume_in_epoch;
    resume_in_epoch = 0;
    if (in_epoch < steps_per_epoch) loader.start_epoch(epoch, in_epoch * accumulation);
    bool step_checkpoint_due = false;
    for (; in_epoch < steps_per_epoch && step < total_steps;) {
      if (accumulation > 1) program.zero_gradients();
      for (std::int64_t micro = 0; micro < accumulation; ++micro) {
        const auto wait_start = Clock::now();
        const data::Batch* batch = loader.next();
        const double waited = seconds_since(wait_start);
        window_wait += waited;
        total_wait += waited;
        collective.note_data_wait(waited);
        if (!batch) throw std::logic_error("the loader ran out of batches inside an epoch");
        feed(program, *batch, s.num_classes);
        backend.vector_ops().fill(program.loss_seed(),
                                  static_cast<float>(scaler.scale() / accumulation));
        if (update_in_step) {     // the values the step's own update reads
          opt.grad_scale = 1.0f;  // one rank, no loss scale: nothing to divide out
          schedule_update(step);
          backend.vector_ops().set_optimizer_step(opt);
        }
        program.train_step(mix(static_cast<std::uint64_t>(cfg.seed) ^
                               mix(static_cast<std::uint64_t>(step * accumulation + micro))),
                           batch->rows);
        losses.record(program.loss());
        window_samples += batch->rows;
        total_samples += batch->rows;
        if (s.num_classes > 0 && (step + 1) % log_every == 0) {
          backend.copy_to_host(logits.data(), program.logits().data, logits.size() * sizeof(float));
          const Hits h = count_hits(logits.data(), batch->labels.i64(), batch->rows, s.num_classes);
          window_hits.top1 += h.top1;
          window_hits.rows += h.rows;
        }
      }
      if (!update_in_step) finish_step();
      ++step;
      ++in_epoch;
      ++window_steps;
      if (progress.due()) {
        settle_losses();
        progress.update(epoch, step, total_steps, last_loss);
      }
      // max_steps ends the run inside an epoch: the state a longer run resumed
      // from here needs is the one before the forced last record and evaluation.
      const bool stops_inside_epoch = step == total_steps && in_epoch < steps_per_epoch;
      if (stops_inside_epoch && step % log_every != 0)
        stopped_inside_epoch = state_now(epoch, in_epoch);

      if (step % log_every == 0 || step == total_steps) {
        settle_losses();
        if (clip_in_update && backend.vector_ops().nonfinite_gradients_seen())
          throw std::runtime_error("non-finite gradients in the steps up to " +
                                   std::to_string(step) +
                                   ": lower optimizer.lr, lower train.clip_grad_norm or check "
                                   "the data");
        const double elapsed = seconds_since(window_start);
        if (world > 1) {  // the window's loss and hits over every rank
          std::vector<double> sums = {window_loss, static_cast<double>(window_hits.top1),
                                      static_cast<double>(window_hits.rows),
                                      static_cast<double>(window_samples)};
          collective.all_reduce_sum(sums);
          window_loss = sums[0] / world;
          window_hits.top1 = static_cast<std::int64_t>(sums[1]);
          window_hits.rows = static_cast<std::int64_t>(sums[2]);
          window_samples = static_cast<std::int64_t>(sums[3]);
        }
        const double loss = window_loss / static_cast<double>(window_steps);
        // With fp16 loss scaling an overflowing forward pass is the scaler's to
        // diagnose (its steps are skipped); anything else non-finite stops here.
        if (!std::isfinite(loss) && !scaler.enabled())
          throw std::runtime_error("the training loss is " + std::to_string(loss) + " at step " +
                                   std::to_string(step) + ": lower optimizer.lr or check the data");
        const double samples_per_s = static_cast<double>(window_samples) / elapsed;
        const double step_ms = 1000.0 * elapsed / static_cast<double>(window_steps);
        const double wait_pct = 100.0 * window_wait / elapsed;
        nlohmann::json record = {
            {"step", step}, {"epoch", epoch}, {"split", "train"}, {"loss", loss}, {"lr", opt.lr}};
        if (timing_in_metrics) {
          record["samples_per_s"] = samples_per_s;
          record["step_ms"] = step_ms;
          record["data_wait_pct"] = wait_pct;
        }
        if (window_hits.rows > 0)
          record["accuracy"] =
              static_cast<double>(window_hits.top1) / static_cast<double>(window_hits.rows);
        if (scaler.enabled()) {
          record["loss_scale"] = scaler.scale();
          record["skipped_steps"] = scaler.skipped_steps();
        }
        const MemoryFigures memory = memory_figures(backend);
        record["memory_allocated_mib"] = memory.allocated_mib;
        record["memory_peak_mib"] = memory.peak_mib;
        nlohmann::json timing_record = {{"step", step},
                                        {"samples_per_s", samples_per_s},
                                        {"step_ms", step_ms},
                                        {"data_wait_pct", wait_pct},
                                        {"memory_reserved_mib", memory.reserved_mib}};
        // The process's resident memory varies run to run, like timing.
        if (timing_in_metrics) record["memory_reserved_mib"] = memory.reserved_mib;
        metrics.write(record);
        last_train = record;
        timing.write(timing_record);
        progress.clear();
        log->info(
            "epoch {} step {}/{}: loss {:.4f} lr {:.4g} {:.0f} samples/s {:.2f} ms/step data-wait "
            "{:.1f}% mem {:.0f}/{:.0f} MiB{}",
            epoch, step, total_steps, loss, opt.lr, samples_per_s, step_ms, wait_pct,
            memory.allocated_mib, memory.reserved_mib,
            scaler.enabled() ? fmt::format(" scale {:g}", scaler.scale()) : std::string());
        if (wait_pct > 10.0 && !warned_input_bound) {
          warned_input_bound = true;
          const double model_rate =
              static_cast<double>(window_samples) / std::max(1e-9, elapsed - window_wait);
          log->warn(
              "input-bound: the step waited for data {:.0f}% of the time; the loader delivers "
              "{:.0f} samples/s, "
              "the model consumes {:.0f} samples/s: raise data.workers from {}",
              wait_pct, loader.samples_per_second(), model_rate, cfg.data.workers);
        }
        window_loss = window_wait = 0;
        window_steps = window_samples = 0;
        window_hits = {};
        window_start = Clock::now();
        // On a log boundary the record is one the longer run writes too: keep it.
        if (stops_inside_epoch && step % log_every == 0)
          stopped_inside_epoch = state_now(epoch, in_epoch);
      }
      if (cfg.train.eval_every > 0 && step % cfg.train.eval_every == 0 && step < total_steps)
        run_eval(step);
      const bool steps_due =
          cfg.checkpoint.every_steps > 0 && step % cfg.checkpoint.every_steps == 0;
      if (step < total_steps) stopped_by = agreed_stop_signal(collective);
      if (stopped_by != 0) {
        save_checkpoint(epoch, in_epoch);
        break;
      }
      if (steps_due && in_epoch < steps_per_epoch && step < total_steps)
        save_checkpoint(epoch, in_epoch);
      step_checkpoint_due = steps_due;
    }
    if (stopped_by != 0) break;
    if (in_epoch < steps_per_epoch) {
      if (stopped_inside_epoch) save_state(*stopped_inside_epoch);
      run_eval(step);
      ++epoch;
      break;
    }
    run_eval(step);
    ++epoch;
    const bool epochs_due =
        cfg.checkpoint.every_epochs > 0 && epoch % cfg.checkpoint.every_epochs == 0;
    if (step >= total_steps || epochs_due || step_checkpoint_due) save_checkpoint(epoch, 0);
  }

  progress.clear();
  const double wall = seconds_since(run_start);
  nlohmann::json summary = {
      {"status", stopped_by != 0 ? "interrupted" : "complete"},
      {"steps", step},
      {"epochs", epoch},
      {"wall_seconds", wall},
      {"mean_samples_per_s", static_cast<double>(total_samples * world) / wall},
      {"data_wait_pct", 100.0 * total_wait / wall},
      {"memory_peak_mib", memory_figures(backend).peak_mib},
      {"final_eval", last_eval},
      {"best_eval", best_eval},
      {"last_train", last_train},
      {"last_checkpoint", last_checkpoint},
      {"step_execution", program.step_execution()}};
  if (!resumed_from.empty()) summary["resumed_from"] = resumed_from;
  if (scaler.enabled()) {
    summary["loss_scale"] = scaler.scale();
    summary["skipped_steps"] = scaler.skipped_steps();
  }
  if (stopped_by != 0) summary["signal"] = stopped_by;
  if (collective.is_root()) std::ofstream(run_dir + "/summary.json") << summary.dump(2) << '\n';
  if (stopped_by != 0)
    log->warn(
        "stopped by signal {} after step {}: checkpoint {}; continue with `trainer run --resume "
        "{}`",
        stopped_by, step, last_checkpoint, run_dir);
  else
    log->info("done: {} steps in {:.1f} s, {:.0f} samples/s", step, wall,
              static_cast<double>(total_samples * world) / wall);
  return summary;
}

}  // namespace trainer::train
