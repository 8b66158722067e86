// `trainer time CONFIG [KEY=VALUE ...] [--steps N]`: runs N training steps on
// one real batch and prints per-node forward and backward time, the whole
// step, and the framework's overhead outside kernels; then times the
// configured loader on its own against the step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "data/loader.h"
#include "ops/cpu/onednn.h"
#include "runner/commands.h"
#include "runner/commands/command_config.h"
#include "runner/config/load.h"
#include "runner/graph/fusion.h"
#include "runner/train/batch_fit.h"
#include "runner/train/devices.h"
#include "runner/train/input_advice.h"
#include "runner/train/loader_rate.h"
#include "runner/train/memory_report.h"
#include "runner/train/session.h"
#include "runner/train/trainer.h"

namespace trainer {
namespace {

// The training loader timed on its own against the step's rate, and the
// input-bound warning a run would give when the step would wait for it.
void print_loader_rate(const train::Session& s, const config::Config& config, Backend& backend,
                       double step_samples_per_s) {
  const train::LoaderRate rate = train::measure_loader_rate(s, backend, 5.0);
  const std::int64_t workers = config.data.workers;
  const std::int64_t at_once = workers > 0 ? std::min(workers, rate.slots) : 1;
  std::printf(
      "\ndata loader: %.0f samples/s on its own (data.workers: %lld, %lld batch%s built at once; "
      "%lld batches in %.1f s), %.2fx the %.0f samples/s the step consumes\n",
      rate.samples_per_s, static_cast<long long>(workers), static_cast<long long>(at_once),
      at_once > 1 ? "es" : "", static_cast<long long>(rate.batches), rate.seconds,
      rate.samples_per_s / step_samples_per_s, step_samples_per_s);
  train::InputWait w;
  w.predicted = true;
  w.wait_pct = train::predicted_wait_pct(rate.samples_per_s, step_samples_per_s, workers > 0);
  w.loader_samples_per_s = rate.samples_per_s;
  w.model_samples_per_s = step_samples_per_s;
  w.workers = workers;
  w.prefetch = config.data.prefetch;
  w.slots = rate.slots;
  w.compute_threads = train::step_compute_threads(config);
  w.cores = cpu::usable_cpus();
  if (w.wait_pct > 10.0) {
    std::printf("%s\n", train::input_wait_advice(w).c_str());
  } else if (config.devices.on_cpu() && workers + w.compute_threads > w.cores) {
    std::printf(
        "(in a run its %lld worker%s the %lld cores with %lld compute threads, and %s slower "
        "than here)\n",
        static_cast<long long>(workers), workers == 1 ? " shares" : "s share",
        static_cast<long long>(w.cores), static_cast<long long>(w.compute_threads),
        workers == 1 ? "builds" : "build");
  }
}

}  // namespace

int command_time(const CommandArgs& args) {
  const config::Config config = load_command_config(args.config_path, args.overrides);
  const train::Session prepared = train::prepare_session(config);
  Backend& backend = train::select_backend(config);
  // The batch `run` would take: auto's micro-batch; a plan over
  // train.memory_limit_mib is refused as `run` refuses it.
  const train::FittedBatch fitted =
      train::fit_batch_to_memory(prepared, backend, train::memory_capacity(prepared, backend));
  const train::Session& s = fitted.session;
  if (!fitted.note.empty()) std::printf("%s\n", fitted.note.c_str());
  auto program = train::compile(s, backend);
  const std::int64_t steps = args.steps > 0 ? args.steps : 20;
  const std::int64_t warmup = 3;

  // One real batch, fed once: this measures the compute, not the loader.
  data::LoaderOptions lo;
  lo.batch_size = s.batch.micro;
  lo.workers = 0;
  lo.seed = static_cast<std::uint64_t>(config.seed);
  data::Loader loader(s.train_data, s.train_pipeline, lo);
  loader.start_epoch(0);
  const data::Batch* batch = loader.next();
  if (!batch) throw std::runtime_error("the training set is smaller than one batch");
  backend.copy_to_device(program->input().data, batch->inputs.data, program->input().bytes());
  backend.copy_to_device(program->labels().data, batch->labels.data, program->labels().bytes());
  backend.vector_ops().fill(program->loss_seed(), 1.0f);

  std::vector<ParamSlot> slots = program->optimizer_slots();
  // The configured optimizer (and clipping, measured inside the update as in a
  // run without loss scaling), at a small rate: timing must not depend on the
  // run diverging.
  OptimizerStep opt = train::configured_optimizer(config);
  opt.lr = 1e-4f;

  using Clock = std::chrono::steady_clock;
  // Whole steps as a run without loss scaling takes them: the
  // update is part of the step (and of its CUDA graph on a GPU).
  backend.vector_ops().set_optimizer_step(opt);
  program->set_update([&] { backend.vector_ops().optimizer_update(slots); });
  for (std::int64_t i = 0; i < warmup; ++i) program->train_step(i);
  backend.synchronize();
  const auto start = Clock::now();
  for (std::int64_t i = 0; i < steps; ++i) program->train_step(static_cast<std::uint64_t>(i));
  backend.synchronize();
  program->set_update(nullptr);
  const double step_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count() /
                         static_cast<double>(steps);
  // Optimizer alone.
  const auto opt_start = Clock::now();
  for (std::int64_t i = 0; i < steps; ++i) backend.vector_ops().optimizer_step(slots, opt);
  backend.synchronize();
  const double optimizer_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - opt_start).count() /
      static_cast<double>(steps);

  // Timed steps: each call on its own.
  const auto& g = program->graph();
  std::map<int, std::pair<double, double>> per_node;  // node -> (forward ms, backward ms)
  for (std::int64_t i = 0; i < steps; ++i) {
    program->train_step_timed(static_cast<std::uint64_t>(i), [&](const graph::Call& c, double ms) {
      auto& t = per_node[c.node];
      (c.backward ? t.second : t.first) += ms / static_cast<double>(steps);
    });
  }
  std::printf("%s on %s: micro-batch %lld x accumulation %lld, %lld steps\n\n", config.name.c_str(),
              backend.name().c_str(), static_cast<long long>(s.batch.micro),
              static_cast<long long>(s.batch.accumulation), static_cast<long long>(steps));
  std::printf("%-28s %-17s %11s %11s  %s\n", "node", "op", "forward ms", "backward ms", "kernel");
  double kernels_ms = 0;
  for (const auto& [node, t] : per_node) {
    std::printf("%-28s %-17s %11.3f %11.3f  %s\n", g.nodes[node].name.c_str(),
                graph::op_label(g.nodes[node]).c_str(), t.first, t.second,
                program->implementation_of(node).c_str());
    kernels_ms += t.first + t.second;
  }
  const double parts_ms = kernels_ms + optimizer_ms;
  const std::int64_t micro_batches = std::max<std::int64_t>(1, s.batch.accumulation);
  std::printf("\nkernels %.3f ms + optimizer (%s) %.3f ms; %s %.3f ms (%.0f samples/s)\n",
              kernels_ms, config.optimizer.type.c_str(), optimizer_ms,
              micro_batches > 1 ? "one micro-batch and the update" : "whole step", step_ms,
              1000.0 * static_cast<double>(s.batch.micro) / step_ms);
  if (micro_batches > 1) {
    // The optimizer runs once a step, the rest once per micro-batch.
    const double full_ms =
        static_cast<double>(micro_batches) * std::max(0.0, step_ms - optimizer_ms) + optimizer_ms;
    std::printf("a step of %lld micro-batches: about %.3f ms (%.0f samples/s)\n",
                static_cast<long long>(micro_batches), full_ms,
                1000.0 * static_cast<double>(s.batch.micro * micro_batches) / full_ms);
  }
  // The three are measured one after another: on a machine whose cores other
  // processes take in the meantime they disagree, and the difference means
  // nothing. On a GPU each call's device time counts its kernels starting on
  // an idle GPU and draining it, which a recorded step overlaps with the
  // kernels before and after (an H200: about 2 us a call).
  if (parts_ms > 1.05 * step_ms && !config.devices.on_cpu())
    std::printf(
        "framework overhead outside kernels: none seen: the parts took %.0f%% of the whole step "
        "(timed one call at a time, each call's kernels start on an idle GPU; the step %s)\n",
        100.0 * parts_ms / step_ms,
        program->step_execution() == "recorded"
            ? "replays its recording, where each kernel starts as the one before it ends"
            : "ran its calls back to back");
  else if (parts_ms > 1.05 * step_ms)
    std::printf(
        "framework overhead outside kernels: not measured: the parts took %.0f%% of the whole "
        "step, so the speed changed while they were timed (other processes on these cores?); "
        "time again on a quiet machine, or with fewer backend.threads\n",
        100.0 * parts_ms / step_ms);
  else
    std::printf("framework overhead outside kernels: %.3f ms (%.2f%% of the step)\n",
                std::max(0.0, step_ms - parts_ms),
                100.0 * std::max(0.0, step_ms - parts_ms) / step_ms);
  std::printf("whole steps ran %s\n", program->step_execution().c_str());
  const double step_samples_per_s =
      1000.0 * static_cast<double>(s.batch.micro * micro_batches) /
      (static_cast<double>(micro_batches) * std::max(0.0, step_ms - optimizer_ms) + optimizer_ms);
  print_loader_rate(s, config, backend, step_samples_per_s);
  return 0;
}

}  // namespace trainer
