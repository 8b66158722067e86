// `trainer plan CONFIG [KEY=VALUE ...]`: what the compiler found, without
// allocating the model: per node name, op, output shape, parameters and FLOPs,
// the totals, and the memory plan against the device's capacity.
#include <cstdio>
#include <optional>
#include <string>

#include "runner/commands.h"
#include "runner/commands/command_config.h"
#include "runner/commands/config_commands.h"
#include "runner/config/load.h"
#include "runner/graph/autodiff.h"
#include "runner/graph/formats.h"
#include "runner/graph/fusion.h"
#include "runner/train/devices.h"
#include "runner/train/memory_report.h"
#include "runner/train/session.h"

namespace trainer {

int command_plan(const CommandArgs& args) {
  const config::Config config = load_command_config(args.config_path, args.overrides);
  print_config_warnings(config);
  train::Session s = train::prepare_session(config);
  Backend& backend = train::select_backend(config);
  std::string batch_note;
  std::optional<train::MicroBatchChoice> unfit;  // auto found none: refused after the plan
  if (config.train.micro_batch_auto) {
    train::MicroBatchChoice choice =
        train::fit_micro_batch(s, backend, train::memory_capacity(s, backend));
    s = choice.session;
    batch_note = " (micro_batch_size: auto)";
    if (!choice.fits) {
      batch_note = " (micro_batch_size: auto: none fits)";
      unfit = std::move(choice);
    }
  }
  const graph::TrainingGraph tg = train::training_graph(s, backend);
  const graph::Graph& g = tg.graph;
  const train::MemoryEstimate e = train::estimate_memory(s, backend);
  using train::mib;

  std::printf("%s: batch %lld = micro %lld x accumulation %lld%s, input %s, precision %s\n\n",
              config.name.c_str(), static_cast<long long>(s.batch.global),
              static_cast<long long>(s.batch.micro), static_cast<long long>(s.batch.accumulation),
              batch_note.c_str(), to_string(g.values[g.input].shape).c_str(),
              config.precision.mode.c_str());
  std::printf("%-28s %-24s %-22s %-13s %-7s %12s %12s\n", "node", "op", "output", "stored",
              "compute", "params", "MFLOPs");
  // A layer the loss does not depend on is left out of the steps: listed,
  // marked, and not counted.
  std::vector<bool> runs(g.nodes.size(), false);
  for (int i = 0; i < tg.forward_steps; ++i)
    runs[static_cast<std::size_t>(tg.schedule[i].node)] = true;
  double flops = 0;
  std::int64_t unused_trainable = 0;  // allocated and saved, never updated
  for (int n = 0; n < tg.model_nodes; ++n) {
    const graph::Node& node = g.nodes[n];
    std::int64_t params = 0;
    for (int p : node.params) params += numel(g.params[p].shape);
    const bool unused = !runs[static_cast<std::size_t>(n)];
    if (!unused) flops += node.forward_flops;
    for (int p : node.params)
      if (unused && g.params[p].trainable) unused_trainable += numel(g.params[p].shape);
    char mflops[32];
    std::snprintf(mflops, sizeof mflops, "%.2f", node.forward_flops / 1e6);
    std::printf("%-28s %-24s %-22s %-13s %-7s %12lld %12s\n", node.name.c_str(),
                (graph::op_label(node) + (unused ? " (unused)" : "")).c_str(),
                to_string(g.values[node.output].shape).c_str(),
                graph::format_name(g.values[node.output]).c_str(),
                std::string(dtype_name(node.compute)).c_str(), static_cast<long long>(params),
                unused ? "not run" : mflops);
  }
  const std::int64_t frozen = g.frozen_parameter_count();
  std::printf("\nparameters: %lld trainable (%lld with state",
              static_cast<long long>(g.parameter_count(true) - unused_trainable),
              static_cast<long long>(g.parameter_count(false)));
  if (frozen > 0) std::printf("; %lld frozen by model.freeze", static_cast<long long>(frozen));
  if (unused_trainable > 0)
    std::printf("; %lld in unused layers, never updated", static_cast<long long>(unused_trainable));
  std::printf(")\n");
  std::printf("FLOPs per micro-batch: forward %.3f GFLOP, forward+backward ~%.3f GFLOP\n",
              flops / 1e9, 3 * flops / 1e9);
  std::printf("\nmemory plan (%s):\n", backend.name().c_str());
  std::printf("  parameters          %10.2f MiB\n", mib(e.params));
  std::printf("  gradients           %10.2f MiB\n", mib(e.grads));
  std::printf("  optimizer state     %10.2f MiB%s\n", mib(e.optimizer),
              config.train.ema_decay > 0 ? "  (with the averaged weights, train.ema_decay)" : "");
  std::printf(
      "  activations (peak)  %10.2f MiB  (%zu buffers in one arena; forward alone %.2f MiB)\n",
      mib(e.activations), e.buffers, mib(e.forward_activations));
  if (tg.recompute_steps > 0) {
    // The same model without activation checkpointing, for comparison.
    train::Session plain = s;
    for (auto& node : plain.graph.nodes) node.recompute = false;
    std::printf("                      %10.2f MiB  without recompute (%d forward steps repeated)\n",
                mib(train::estimate_memory(plain, backend).activations), tg.recompute_steps);
  }
  std::printf("  workspace           %10.2f MiB\n", mib(e.workspace));
  const auto batches = [](std::int64_t n) {
    return std::to_string(n) + (n == 1 ? " batch" : " batches");
  };
  std::printf("  loader buffers      %10.2f MiB  (%s in flight)\n", mib(e.loader),
              batches(e.loader_slots).c_str());
  if (s.eval_data)
    std::printf("  eval loader buffers %10.2f MiB  (%s in flight at each evaluation)\n",
                mib(e.eval_loader), batches(e.eval_loader_slots).c_str());
  std::printf("  total               %10.2f MiB\n", mib(e.total()));
  const double capacity = train::memory_capacity(s, backend);
  if (capacity > 0)
    std::printf("  %-19s %10.2f MiB%s: %s\n",
                config.train.memory_limit_mib > 0 ? "limit" : "available", mib(capacity),
                train::memory_share_note(s, capacity).c_str(),
                train::fit_verdict(s, backend, e, capacity).c_str());
  if (unfit) {
    std::fflush(stdout);  // the plan, then the error
    train::refuse_unfit_micro_batch(s, *unfit, train::UnfitDetail::plan_printed);
  }
  return 0;
}

}  // namespace trainer
