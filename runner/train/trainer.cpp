// The training loop and evaluation.
#include "runner/train/trainer.h"

#include <chrono>
#include <cmath>
#include <deque>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "data/loader.h"
#include "runner/graph/init.h"
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

OptimizerKind optimizer_kind(const std::string& type) {
  if (type == "adam") return OptimizerKind::adam;
  if (type == "adamw") return OptimizerKind::adamw;
  return OptimizerKind::sgd;
}

data::LoaderOptions loader_options(const Session& s, bool training, const Collective* collective = nullptr) {
  data::LoaderOptions o;
  const auto& d = s.config.data;
  o.batch_size = s.batch.micro;
  o.workers = d.workers;
  o.prefetch = d.prefetch;
  o.shuffle = training && d.shuffle;
  o.drop_last = training && d.drop_last;
  o.seed = static_cast<std::uint64_t>(s.config.seed);
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
        throw std::runtime_error("label " + std::to_string(labels[r]) + " in row " +
                                 std::to_string(r) + " of batch " + std::to_string(batch.index) +
                                 " (epoch " + std::to_string(batch.epoch) +
                                 ") is outside the model's " + std::to_string(classes) + " classes");
    }
  }
  Backend& backend = program.backend();
  backend.copy_to_device(program.input().data, batch.inputs.data, program.input().bytes());
  backend.copy_to_device(program.labels().data, batch.labels.data, program.labels().bytes());
}

float read_scalar(graph::Program& program, const TensorRef& t) {
  float v = 0;
  program.backend().copy_to_host(&v, t.data, sizeof v);
  return v;
}

// The root rank logs to the terminal and train.log; other ranks only report warnings.
std::shared_ptr<spdlog::logger> make_logger(const std::string& run_dir, const Collective& collective) {
  auto console = std::make_shared<spdlog::sinks::stdout_color_sink_mt>();
  console->set_pattern(collective.world() > 1 ? "[rank " + std::to_string(collective.rank()) + "] %v" : "%v");
  if (!collective.is_root()) {
    auto logger = std::make_shared<spdlog::logger>("trainer", console);
    logger->set_level(spdlog::level::warn);
    return logger;
  }
  auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(run_dir + "/train.log", false);
  file->set_pattern("[%Y-%m-%d %H:%M:%S.%e] %v");
  return std::make_shared<spdlog::logger>("trainer", spdlog::sinks_init_list{console, file});
}

}  // namespace

graph::CompileOptions compile_options(const Session& s) {
  graph::CompileOptions o;
  const auto& opt = s.config.optimizer;
  o.optimizer_state_tensors = opt.type == "sgd" ? (opt.momentum > 0 ? 1 : 0) : 2;
  o.accumulate_gradients = s.batch.accumulation > 1;
  o.deterministic = s.config.deterministic;
  o.autotune = s.config.backend.autotune && !s.config.deterministic;
  o.allow_tf32 = s.config.precision.mode == "tf32";
  return o;
}

std::unique_ptr<graph::Program> compile(const Session& session, Backend& backend) {
  auto program = std::make_unique<graph::Program>(graph::differentiate(session.graph), backend,
                                                  compile_options(session));
  std::vector<float> values;
  for (auto& p : program->params()) {
    graph::initialize_param(*p.param, static_cast<std::uint64_t>(session.config.seed), values);
    backend.copy_to_device(p.value.data, values.data(), values.size() * sizeof(float));
  }
  return program;
}

EvalResult evaluate(const Session& s, graph::Program& program) {
  EvalResult result;
  if (!s.eval_data) return result;
  data::Loader loader(s.eval_data, s.eval_pipeline, loader_options(s, false));
  loader.start_epoch(0);
  const std::int64_t classes = s.num_classes;
  std::vector<float> logits(classes > 0 ? static_cast<std::size_t>(numel(program.logits().shape)) : 0);
  double loss_sum = 0;
  Hits hits;
  const std::int64_t limit = s.config.train.eval_batches;
  for (std::int64_t b = 0; limit == 0 || b < limit; ++b) {
    const data::Batch* batch = loader.next();
    if (!batch) break;
    feed(program, *batch, classes);
    program.eval_step(batch->rows);
    loss_sum += static_cast<double>(read_scalar(program, program.loss())) * static_cast<double>(batch->rows);
    result.samples += batch->rows;
    if (classes > 0) {
      program.backend().copy_to_host(logits.data(), program.logits().data, logits.size() * sizeof(float));
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
  return train(s, program, run_dir, single);
}

nlohmann::json train(const Session& s, graph::Program& program, const std::string& run_dir,
                     Collective& collective) {
  const auto& cfg = s.config;
  auto log = make_logger(run_dir, collective);
  MetricsWriter metrics;
  if (collective.is_root()) metrics = MetricsWriter(run_dir + "/metrics.jsonl");
  Backend& backend = program.backend();
  const int world = collective.world();
  const float rank_average = 1.0f / static_cast<float>(world);

  data::Loader loader(s.train_data, s.train_pipeline, loader_options(s, true, &collective));
  const std::int64_t accumulation = s.batch.accumulation;
  const std::int64_t steps_per_epoch = loader.batches_per_epoch() / accumulation;
  if (steps_per_epoch < 1)
    throw std::runtime_error("the training set gives " + std::to_string(loader.batches_per_epoch()) +
                             " micro-batches per epoch, fewer than one optimizer step (batch_size " +
                             std::to_string(s.batch.global) + ")");
  const std::int64_t total_steps =
      cfg.train.max_steps > 0 ? cfg.train.max_steps : cfg.train.epochs * steps_per_epoch;
  const std::int64_t log_every = std::max<std::int64_t>(1, cfg.train.log_every);

  log->info("model: {} parameters, {} nodes; arena {:.1f} MiB; batch {} = micro {} x accumulation {}",
            s.graph.parameter_count(), s.graph.nodes.size(),
            static_cast<double>(program.memory_plan().arena_bytes) / (1 << 20), s.batch.global,
            s.batch.micro, accumulation);
  log->info("training {} steps ({} per epoch) on {}", total_steps, steps_per_epoch, backend.name());

  // Optimizer slots over every trainable parameter.
  std::vector<ParamSlot> slots;
  std::vector<TensorRef> grads;
  for (auto& p : program.params()) {
    if (!p.grad) continue;
    slots.push_back({p.value.f32(), p.grad.f32(), p.state0.f32(), p.state1.f32(), p.value.numel(),
                     p.param->weight_decay});
    grads.push_back(p.grad);
  }
  OptimizerStep opt;
  opt.kind = optimizer_kind(cfg.optimizer.type);
  opt.momentum = static_cast<float>(cfg.optimizer.momentum);
  opt.nesterov = cfg.optimizer.nesterov;
  opt.weight_decay = static_cast<float>(cfg.optimizer.weight_decay);
  opt.beta1 = static_cast<float>(cfg.optimizer.beta1);
  opt.beta2 = static_cast<float>(cfg.optimizer.beta2);
  opt.eps = static_cast<float>(cfg.optimizer.eps);

  const float seed_value = 1.0f / static_cast<float>(accumulation);
  std::vector<float> logits(s.num_classes > 0 ? static_cast<std::size_t>(numel(program.logits().shape)) : 0);

  // Logging window.
  double window_loss = 0, window_wait = 0;
  Hits window_hits;
  std::int64_t window_steps = 0, window_samples = 0;
  auto window_start = Clock::now();
  bool warned_input_bound = false;

  ProgressBar progress;
  double last_loss = 0;
  const auto run_start = Clock::now();
  double total_wait = 0;
  std::int64_t total_samples = 0;
  nlohmann::json best_eval, last_eval;
  std::int64_t step = 0, epoch = 0;

  auto run_eval = [&](std::int64_t at_step) {
    if (!s.eval_data) return;
    const EvalResult e = evaluate(s, program);
    nlohmann::json record = {{"step", at_step}, {"epoch", epoch}, {"split", "eval"},
                             {"loss", e.loss}, {"samples", e.samples}};
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
      log->info("eval  epoch {} step {}: loss {:.4f} accuracy {:.4f}", epoch, at_step, e.loss, e.accuracy);
    else
      log->info("eval  epoch {} step {}: loss {:.6f}", epoch, at_step, e.loss);
  };

  while (step < total_steps) {
    loader.start_epoch(epoch);
    for (std::int64_t in_epoch = 0; in_epoch < steps_per_epoch && step < total_steps; ++in_epoch) {
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
        backend.vector_ops().fill(program.loss_seed(), seed_value);
        program.train_step(mix(static_cast<std::uint64_t>(cfg.seed) ^ mix(static_cast<std::uint64_t>(step * accumulation + micro))),
                           batch->rows);
        last_loss = read_scalar(program, program.loss());
        window_loss += last_loss / static_cast<double>(accumulation);
        window_samples += batch->rows;
        total_samples += batch->rows;
        if (s.num_classes > 0 && (step + 1) % log_every == 0) {
          backend.copy_to_host(logits.data(), program.logits().data, logits.size() * sizeof(float));
          const Hits h = count_hits(logits.data(), batch->labels.i64(), batch->rows, s.num_classes);
          window_hits.top1 += h.top1;
          window_hits.rows += h.rows;
        }
      }
      // Gradients are means over this rank's micro-batches; average them over ranks.
      if (world > 1) collective.all_reduce_sum(grads);
      opt.grad_scale = rank_average;
      if (cfg.train.clip_grad_norm > 0) {
        bool finite = true;
        const double norm = rank_average * std::sqrt(backend.vector_ops().sum_squares(grads, finite));
        if (!finite)
          throw std::runtime_error("non-finite gradients at step " + std::to_string(step) +
                                   ": lower optimizer.lr or check the data");
        if (norm > cfg.train.clip_grad_norm)
          opt.grad_scale = rank_average * static_cast<float>(cfg.train.clip_grad_norm / (norm + 1e-6));
      }
      opt.lr = static_cast<float>(learning_rate(cfg.schedule, cfg.optimizer.lr, step, total_steps));
      opt.step = step + 1;
      backend.vector_ops().optimizer_step(slots, opt);
      ++step;
      ++window_steps;
      progress.update(epoch, step, total_steps, last_loss);

      if (step % log_every == 0 || step == total_steps) {
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
        if (!std::isfinite(loss))
          throw std::runtime_error("the training loss is " + std::to_string(loss) + " at step " +
                                   std::to_string(step) + ": lower optimizer.lr or check the data");
        const double samples_per_s = static_cast<double>(window_samples) / elapsed;
        const double step_ms = 1000.0 * elapsed / static_cast<double>(window_steps);
        const double wait_pct = 100.0 * window_wait / elapsed;
        nlohmann::json record = {{"step", step}, {"epoch", epoch}, {"split", "train"},
                                 {"loss", loss}, {"lr", opt.lr}, {"samples_per_s", samples_per_s},
                                 {"step_ms", step_ms}, {"data_wait_pct", wait_pct}};
        if (window_hits.rows > 0)
          record["accuracy"] = static_cast<double>(window_hits.top1) / static_cast<double>(window_hits.rows);
        metrics.write(record);
        progress.clear();
        log->info("epoch {} step {}/{}: loss {:.4f} lr {:.4g} {:.0f} samples/s {:.2f} ms/step data-wait {:.1f}%",
                  epoch, step, total_steps, loss, opt.lr, samples_per_s, step_ms, wait_pct);
        if (wait_pct > 10.0 && !warned_input_bound) {
          warned_input_bound = true;
          const double model_rate = static_cast<double>(window_samples) / std::max(1e-9, elapsed - window_wait);
          log->warn("input-bound: the step waited for data {:.0f}% of the time; the loader delivers {:.0f} samples/s, "
                    "the model consumes {:.0f} samples/s: raise data.workers from {}",
                    wait_pct, loader.samples_per_second(), model_rate, cfg.data.workers);
        }
        window_loss = window_wait = 0;
        window_steps = window_samples = 0;
        window_hits = {};
        window_start = Clock::now();
      }
      if (cfg.train.eval_every > 0 && step % cfg.train.eval_every == 0 && step < total_steps) run_eval(step);
    }
    run_eval(step);
    ++epoch;
  }

  progress.clear();
  const double wall = seconds_since(run_start);
  nlohmann::json summary = {{"steps", step},
                            {"epochs", epoch},
                            {"wall_seconds", wall},
                            {"mean_samples_per_s", static_cast<double>(total_samples * world) / wall},
                            {"data_wait_pct", 100.0 * total_wait / wall},
                            {"final_eval", last_eval},
                            {"best_eval", best_eval}};
  if (collective.is_root()) std::ofstream(run_dir + "/summary.json") << summary.dump(2) << '\n';
  log->info("done: {} steps in {:.1f} s, {:.0f} samples/s", step, wall,
            static_cast<double>(total_samples) / wall);
  return summary;
}

}  // namespace trainer::train
