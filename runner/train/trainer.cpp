// Compiling a session into a program, its optimizer and loader settings,
// feeding batches, the rows a batch's loss counts (ignore_index), and
// evaluation. The training loop is train_loop.h (and its train_loop*.cpp).
#include "runner/train/trainer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "data/loader.h"
#include "runner/checkpoint/safetensors.h"
#include "runner/checkpoint/weights.h"
#include "runner/graph/init.h"
#include "runner/train/metrics.h"
#include "runner/train/schedule.h"
#include "runner/train/session_checks.h"

namespace trainer::train {

data::LoaderOptions loader_options(const Session& s, bool training, Backend& backend,
                                   const Collective* collective) {
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

data::LoaderOptions eval_loader_options(const Session& s, Backend& backend,
                                        const Collective* collective) {
  data::LoaderOptions o = loader_options(s, false, backend, collective);
  o.equal_shards = false;
  o.evaluation = true;
  return o;
}

std::optional<std::int64_t> ignored_label(const Session& s) {
  for (const graph::Node& node : s.graph.nodes)
    if (node.output == s.graph.loss && node.op && node.op->name == "cross_entropy")
      return node.attrs.get_int("ignore_index");
  return std::nullopt;
}

std::int64_t counted_rows(const data::Batch& batch, std::optional<std::int64_t> ignored) {
  if (!ignored || batch.labels.dtype != DType::i64) return batch.rows;
  const std::int64_t* labels = batch.labels.i64();
  return static_cast<std::int64_t>(
      std::count_if(labels, labels + batch.rows, [&](std::int64_t l) { return l != *ignored; }));
}

Hits count_counted_hits(const float* logits, const data::Batch& batch, std::int64_t classes,
                        std::optional<std::int64_t> ignored) {
  const std::int64_t* labels = batch.labels.i64();
  // count_hits passes over labels outside [0, classes), as the default -100 is.
  if (!ignored || *ignored < 0 || *ignored >= classes)
    return count_hits(logits, labels, batch.rows, classes);
  // An ignored class label becomes -1.
  std::vector<std::int64_t> kept(labels, labels + batch.rows);
  std::replace(kept.begin(), kept.end(), *ignored, std::int64_t{-1});
  return count_hits(logits, kept.data(), batch.rows, classes);
}

void feed(graph::Program& program, const data::Batch& batch, std::int64_t classes,
          std::optional<std::int64_t> ignored) {
  // The session checks the data against the model; this guards the copies.
  if (batch.inputs.bytes() != program.input().bytes() ||
      batch.labels.bytes() != program.labels().bytes())
    throw std::runtime_error(
        "batch " + std::to_string(batch.index) + " (epoch " + std::to_string(batch.epoch) +
        ") has inputs " + to_string(batch.inputs.shape) + " and labels " +
        to_string(batch.labels.shape) + ", but the model takes " +
        to_string(program.input().shape) + " and " + to_string(program.labels().shape));
  if (classes > 0) {
    const std::int64_t* labels = batch.labels.i64();
    for (std::int64_t r = 0; r < batch.rows; ++r) {
      if ((labels[r] >= 0 && labels[r] < classes) || labels[r] == ignored) continue;
      throw std::runtime_error(
          "label " + std::to_string(labels[r]) + " in row " + std::to_string(r) + " of batch " +
          std::to_string(batch.index) + " (epoch " + std::to_string(batch.epoch) +
          ") is outside the model's " + std::to_string(classes) + " classes" +
          (ignored ? " and is not the loss's ignore_index " + std::to_string(*ignored) +
                         (labels[r] < 0 ? " (set model.loss.ignore_index to it if such rows are "
                                          "meant to be left out)"
                                        : "")
                   : ""));
    }
  }
  Backend& backend = program.backend();
  backend.copy_input_to_device(program.input().data, batch.inputs.data, program.input().bytes());
  backend.copy_input_to_device(program.labels().data, batch.labels.data, program.labels().bytes());
}

namespace {

float read_scalar(graph::Program& program, const TensorRef& t) {
  float v = 0;
  program.backend().copy_to_host(&v, t.data, sizeof v);
  return v;
}

// `model.init_from: weights.safetensors` (relative to the YAML file that names
// it) with `model.init_strict: false` to load only the tensors that match.
void load_init_from(const Session& s, graph::Program& program) {
  if (s.init_from_file.empty()) return;
  const std::string path = init_from_path(s.config);
  const config::Node& model = s.config.model.node;
  const bool strict = init_strict(s.config);
  checkpoint::LoadReport report;
  try {
    report = checkpoint::load_parameters(program, checkpoint::SafetensorsFile(s.init_from_file),
                                         path, strict);
  } catch (const std::exception& e) {  // a corrupt file, or tensors that do not fit
    config::Diagnostics diags;
    diags.add(model.find("init_from")->mark(), "model.init_from", e.what());
    throw config::ConfigError(diags);
  }
  std::string skipped;
  for (const auto& m : report.mismatches) skipped += "\n  " + m;
  std::fprintf(stderr, "model.init_from: loaded %zu tensor(s) from %s%s%s\n", report.loaded.size(),
               path.c_str(), report.mismatches.empty() ? "" : "; not loaded:", skipped.c_str());
}

// Seeded initial values for every parameter, zeroed optimizer state.
void seed_parameters(const Session& session, graph::Program& program) {
  Backend& backend = program.backend();
  std::vector<float> values;
  for (auto& p : program.params()) {
    graph::initialize_param(*p.param, static_cast<std::uint64_t>(session.config.seed), values);
    backend.copy_to_device(p.value.data, values.data(), values.size() * sizeof(float));
    if (p.state0) backend.vector_ops().fill(p.state0, 0.0f);
    if (p.state1) backend.vector_ops().fill(p.state1, 0.0f);
  }
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
  // Clipping is measured inside the update (after the loss scale is divided out).
  opt.clip_norm = cfg.train.clip_grad_norm;
  return opt;
}

graph::CompileOptions compile_options(const Session& s) {
  graph::CompileOptions o;
  const auto& opt = s.config.optimizer;
  // SGD keeps a momentum buffer when it has momentum, its own or the schedule's.
  const bool momentum = opt.momentum > 0 || cycles_momentum(s.config.schedule);
  o.optimizer_state_tensors = opt.type == "sgd" ? (momentum ? 1 : 0) : 2;
  o.accumulate_gradients = s.batch.accumulation > 1;
  o.deterministic = s.config.deterministic;
  o.autotune = s.config.backend.autotune && !s.config.deterministic;
  o.allow_tf32 = s.config.precision.mode == "tf32";
  o.record_steps = s.config.backend.cuda_graphs;
  o.collective = s.collective;
  o.ema = s.config.train.ema_decay > 0;
  o.short_batches = s.train_data && short_batch_rows(s.config, s) > 0;
  return o;
}

void initialize_parameters(const Session& session, graph::Program& program) {
  seed_parameters(session, program);
  load_init_from(session, program);
}

std::unique_ptr<graph::Program> compile(const Session& session, Backend& backend) {
  auto program = std::make_unique<graph::Program>(training_graph(session, backend), backend,
                                                  compile_options(session));
  initialize_parameters(session, *program);
  return program;
}

EvalResult evaluate(const Session& s, graph::Program& program, Collective& collective,
                    const std::function<bool()>& stop_early) {
  EvalResult result;
  if (!s.eval_data) return result;
  // Each rank evaluates its own shard (each sample on exactly one rank) and
  // the sums are added over the ranks.
  data::Loader loader(s.eval_data, s.eval_pipeline,
                      eval_loader_options(s, program.backend(), &collective));
  loader.start_epoch(0);
  const std::int64_t classes = s.num_classes;
  const std::optional<std::int64_t> ignored = ignored_label(s);
  std::vector<float> logits(classes > 0 ? static_cast<std::size_t>(numel(program.logits().shape))
                                        : 0);
  // The loss of a batch is its mean over its counted rows: weighted by them,
  // the sum over the set is every counted row's loss.
  double loss_sum = 0;
  std::int64_t counted = 0, samples = 0;
  Hits hits;
  const std::int64_t limit = s.config.train.eval_batches;
  for (std::int64_t b = 0; limit == 0 || b < limit; ++b) {
    if (stop_early && collective.world() == 1 && stop_early()) {
      result.interrupted = true;
      return result;
    }
    const data::Batch* batch = loader.next();
    if (!batch) break;
    feed(program, *batch, classes, ignored);
    program.eval_step(batch->rows);
    const std::int64_t rows = counted_rows(*batch, ignored);
    if (rows > 0)
      loss_sum +=
          static_cast<double>(read_scalar(program, program.loss())) * static_cast<double>(rows);
    counted += rows;
    samples += batch->rows;
    if (classes > 0) {
      program.backend().copy_to_host(logits.data(), program.logits().data,
                                     logits.size() * sizeof(float));
      const Hits h = count_counted_hits(logits.data(), *batch, classes, ignored);
      hits.top1 += h.top1;
      hits.top5 += h.top5;
      hits.rows += h.rows;
    }
  }
  // Counts below 2^53 are exact in double; every rank gets the same sums.
  std::vector<double> sums = {loss_sum,
                              static_cast<double>(counted),
                              static_cast<double>(samples),
                              static_cast<double>(hits.top1),
                              static_cast<double>(hits.top5),
                              static_cast<double>(hits.rows)};
  if (collective.world() > 1) collective.all_reduce_statistics(sums);
  result.samples = static_cast<std::int64_t>(sums[2]);
  if (sums[1] > 0) result.loss = sums[0] / sums[1];
  if (sums[5] > 0) {
    result.accuracy = sums[3] / sums[5];
    result.top5 = sums[4] / sums[5];
  }
  return result;
}

}  // namespace trainer::train
