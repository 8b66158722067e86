// `trainer plan CONFIG [KEY=VALUE ...]`: what the compiler found, without
// allocating the model: per node name, op, output shape, parameters and FLOPs,
// the totals, and the memory plan against the device's capacity.
#include <cstdio>
#include <fstream>
#include <string>

#include "runner/commands.h"
#include "runner/config/load.h"
#include "runner/graph/autodiff.h"
#include "runner/graph/memory_plan.h"
#include "runner/graph/program.h"
#include "runner/train/devices.h"
#include "runner/train/session.h"
#include "runner/train/trainer.h"

namespace trainer {
namespace {

double mib(double bytes) {
  return bytes / (1024.0 * 1024.0);
}

// MemAvailable from /proc/meminfo, in bytes (0 when unknown).
double available_host_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024.0;
  return 0;
}

}  // namespace

int command_plan(const CommandArgs& args) {
  const config::Config config = config::load_config(args.config_path, args.overrides);
  const train::Session s = train::prepare_session(config);
  Backend& backend = train::select_backend(config);
  const graph::TrainingGraph tg = graph::differentiate(s.graph);
  const graph::CompileOptions options = train::compile_options(s);
  const graph::CompiledKernels kernels = graph::compile_kernels(tg, backend, options);
  const graph::MemoryPlan plan =
      graph::plan_memory(tg, kernels.saved_bytes, kernels.workspace_bytes);
  const graph::Graph& g = tg.graph;

  std::printf("%s: batch %lld = micro %lld x accumulation %lld, input %s\n\n", config.name.c_str(),
              static_cast<long long>(s.batch.global), static_cast<long long>(s.batch.micro),
              static_cast<long long>(s.batch.accumulation),
              to_string(g.values[g.input].shape).c_str());
  std::printf("%-28s %-15s %-22s %12s %12s\n", "node", "op", "output", "params", "MFLOPs");
  double flops = 0;
  for (int n = 0; n < tg.model_nodes; ++n) {
    const graph::Node& node = g.nodes[n];
    std::int64_t params = 0;
    for (int p : node.params) params += numel(g.params[p].shape);
    flops += node.forward_flops;
    std::printf("%-28s %-15s %-22s %12lld %12.2f\n", node.name.c_str(), node.op->name.c_str(),
                to_string(g.values[node.output].shape).c_str(), static_cast<long long>(params),
                node.forward_flops / 1e6);
  }
  double params_bytes = 0, grad_bytes = 0;
  for (std::size_t p = 0; p < g.params.size(); ++p) {
    const double bytes = static_cast<double>(numel(g.params[p].shape)) * 4.0;
    params_bytes += bytes;
    if (tg.param_needs_grad[p]) grad_bytes += bytes * (options.accumulate_gradients ? 2 : 1);
  }
  const double optimizer_bytes = (options.accumulate_gradients ? grad_bytes / 2 : grad_bytes) *
                                 options.optimizer_state_tensors;
  const double sample_bytes = static_cast<double>(numel(s.sample_shape)) * 4.0 + 8.0;
  const double loader_bytes =
      static_cast<double>(config.data.prefetch) * static_cast<double>(s.batch.micro) * sample_bytes;
  const double total = params_bytes + grad_bytes + optimizer_bytes +
                       static_cast<double>(plan.arena_bytes + plan.workspace_bytes) + loader_bytes;

  std::printf("\nparameters: %lld trainable (%lld with state)\n",
              static_cast<long long>(g.parameter_count(true)),
              static_cast<long long>(g.parameter_count(false)));
  std::printf("FLOPs per micro-batch: forward %.3f GFLOP, forward+backward ~%.3f GFLOP\n",
              flops / 1e9, 3 * flops / 1e9);
  std::printf("\nmemory plan (%s):\n", backend.name().c_str());
  std::printf("  parameters          %10.2f MiB\n", mib(params_bytes));
  std::printf("  gradients           %10.2f MiB\n", mib(grad_bytes));
  std::printf("  optimizer state     %10.2f MiB\n", mib(optimizer_bytes));
  std::printf(
      "  activations (peak)  %10.2f MiB  (%zu buffers in one arena; forward alone %.2f MiB)\n",
      mib(static_cast<double>(plan.arena_bytes)), plan.buffers.size(),
      mib(static_cast<double>(plan.forward_arena_bytes)));
  if (tg.recompute_steps > 0) {
    // The same model without activation checkpointing, for comparison.
    graph::Graph plain = s.graph;
    for (auto& node : plain.nodes) node.recompute = false;
    const graph::TrainingGraph plain_tg = graph::differentiate(std::move(plain));
    const graph::CompiledKernels plain_kernels = graph::compile_kernels(plain_tg, backend, options);
    const graph::MemoryPlan without =
        graph::plan_memory(plain_tg, plain_kernels.saved_bytes, plain_kernels.workspace_bytes);
    std::printf("                      %10.2f MiB  without recompute (%d forward steps repeated)\n",
                mib(static_cast<double>(without.arena_bytes)), tg.recompute_steps);
  }
  std::printf("  workspace           %10.2f MiB\n", mib(static_cast<double>(plan.workspace_bytes)));
  std::printf("  loader buffers      %10.2f MiB  (%lld batches in flight)\n", mib(loader_bytes),
              static_cast<long long>(config.data.prefetch));
  std::printf("  total               %10.2f MiB\n", mib(total));
  if (backend.name() == "cpu") {
    const double available = available_host_memory();
    if (available > 0)
      std::printf("  available           %10.2f MiB: %s\n", mib(available),
                  total <= available ? "fits" : "does not fit");
  }
  return 0;
}

}  // namespace trainer
