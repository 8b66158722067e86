// Memory prediction from the plan, the backend's figures, and fit advice.
#include "runner/train/memory_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

#include "data/loader.h"
#include "runner/dist/launch_env.h"
#include "runner/graph/autodiff.h"
#include "runner/graph/memory_plan.h"
#include "runner/graph/precision.h"
#include "runner/graph/program.h"
#include "runner/train/trainer.h"

namespace trainer::train {

double mib(double bytes) {
  return bytes / (1024.0 * 1024.0);
}

double loader_ring_bytes(std::int64_t slots, std::int64_t batch_size, const Shape& sample_shape,
                         const Shape& target_shape) {
  const double label_bytes =
      target_shape.empty() ? 8.0 : static_cast<double>(numel(target_shape)) * 4.0;
  const double sample_bytes = static_cast<double>(numel(sample_shape)) * 4.0 + label_bytes;
  return static_cast<double>(slots) * static_cast<double>(batch_size) * sample_bytes;
}

MemoryEstimate estimate_memory(const Session& s, Backend& backend) {
  const graph::TrainingGraph tg = training_graph(s, backend);
  const graph::CompileOptions options = compile_options(s);
  const graph::CompiledKernels kernels = graph::compile_kernels(tg, backend, options);
  const graph::MemoryPlan plan =
      graph::plan_memory(tg, kernels.saved_bytes, kernels.workspace_bytes);
  const graph::Graph& g = tg.graph;
  MemoryEstimate e;
  const std::vector<bool> copies = graph::bf16_weight_copies(g);
  for (std::size_t p = 0; p < g.params.size(); ++p) {
    // Persistent storage is 64-byte aligned per tensor (program.cpp).
    const double bytes = std::ceil(static_cast<double>(numel(g.params[p].shape)) * 4.0 / 64) * 64;
    e.params += bytes;
    if (copies[p])
      e.params += std::ceil(static_cast<double>(numel(g.params[p].shape)) * 2.0 / 64) * 64;
    if (options.ema) e.optimizer += bytes;  // the averaged weights
    if (!tg.param_needs_grad[p]) continue;
    e.grads += bytes * (options.accumulate_gradients ? 2 : 1);
    e.optimizer += bytes * options.optimizer_state_tensors;
  }
  e.activations = static_cast<double>(plan.arena_bytes);
  e.forward_activations = static_cast<double>(plan.forward_arena_bytes);
  e.buffers = plan.buffers.size();
  e.workspace = static_cast<double>(plan.workspace_bytes);
  const data::LoaderOptions train_options = loader_options(s, true, backend);
  e.loader_slots = s.train_data ? data::Loader::ring_slots(train_options, s.train_data->size())
                                : train_options.prefetch + 1;
  e.loader = loader_ring_bytes(e.loader_slots, train_options.batch_size, s.sample_shape,
                               s.train_data ? s.train_data->target_shape() : Shape{});
  if (s.eval_data) {
    const data::LoaderOptions eval_options = eval_loader_options(s, backend);
    e.eval_loader_slots = data::Loader::ring_slots(eval_options, s.eval_data->size());
    e.eval_loader = loader_ring_bytes(e.eval_loader_slots, eval_options.batch_size,
                                      s.eval_pipeline->output_shape(s.eval_data->sample_shape()),
                                      s.eval_data->target_shape());
  }
  return e;
}

int ranks_sharing_memory(const Session& s) {
  if (!s.config.devices.cpu && !s.config.devices.gpus.empty()) return 1;
  try {
    if (const auto env = dist::detect_launch_env())
      return env->local_world_known ? env->local_world : 1;
  } catch (const std::exception&) {  // a bad launcher variable: reported as the job starts
    return 1;
  }
  return static_cast<int>(std::max<std::int64_t>(1, s.config.devices.world_size));
}

double memory_capacity(const Session& s, const Backend& backend) {
  const int ranks = ranks_sharing_memory(s);
  if (s.config.train.memory_limit_mib > 0)
    return static_cast<double>(s.config.train.memory_limit_mib) * 1024.0 * 1024.0 / ranks;
  // The ranks on one machine share its memory; a limit of each process's own
  // (ulimit -v) each has whole.
  const double own = static_cast<double>(backend.available_memory());
  const double share = static_cast<double>(backend.shared_available_memory()) / ranks;
  if (own <= 0 || share <= 0) return std::max(own, share);
  return std::min(own, share);
}

namespace {

// "8.22": as `trainer plan` prints its figures, so a message and the plan agree.
std::string mib_text(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", mib(bytes));
  return text;
}

// The recompute option, as every piece of advice words it.
constexpr const char* kRecomputeAdvice =
    "model.recompute: [blocks or layers] drops their activations after forward (`trainer plan` "
    "shows the saving)";

// What stays whatever the micro-batch: parameters, gradients and optimizer
// state, the gradients without accumulation's buffer (a micro-batch of the
// whole batch has none).
double persistent_bytes(const MemoryEstimate& e, bool accumulates) {
  return e.params + (accumulates ? e.grads / 2 : e.grads) + e.optimizer;
}

// What could make a plan fit whose smallest micro-batch is `at_smallest`,
// against `usable` bytes: recompute only helps when the activations are the
// excess.
std::string advice_when_one_does_not_fit(const MicroBatchChoice& at_smallest, double usable) {
  const double persistent =
      persistent_bytes(at_smallest.estimate, at_smallest.session.batch.accumulation > 1);
  if (persistent > usable)
    return "parameters, gradients and optimizer state alone need " + mib_text(persistent) +
           " MiB whatever the micro-batch: model.recompute cannot help; use a smaller model, an "
           "optimizer with less state (adam keeps 2 tensors per parameter, sgd 1 with momentum "
           "and none without), or more memory";
  return std::string(kRecomputeAdvice) +
         ", also at a larger micro-batch, which needs no accumulation buffer; or a smaller "
         "model, or more memory";
}

// "10%": a fraction as the config gives it, rounded.
std::string percent_text(double fraction) {
  return std::to_string(std::lround(fraction * 100)) + "%";
}

// "\n    - data.prefetch: 2 -> 6.55 MiB", "(not enough alone)" when the
// total is over `usable`.
std::string option_text(const std::string& setting, double total, double usable) {
  return "\n    - " + setting + " -> " + mib_text(total) + " MiB" +
         (total <= usable ? "" : " (not enough alone)");
}

// Fewer loader batches in flight, as an option, when they would save memory:
// batches beyond two ahead buy little overlap, and each is a batch of
// memory. The workers beyond the three batches built at once then would only
// wait: the option says so.
std::string loader_option(const Session& s, Backend& backend, const MemoryEstimate& e,
                          double usable) {
  constexpr std::int64_t kFewBatchesInFlight = 2;
  if (s.config.data.workers <= 0 ||
      e.loader_slots + e.eval_loader_slots <= 2 * kFewBatchesInFlight ||
      s.config.data.prefetch <= kFewBatchesInFlight)
    return "";
  Session fewer = s;
  fewer.config.data.prefetch = kFewBatchesInFlight;
  const double total = estimate_memory(fewer, backend).total();
  if (total >= e.total()) return "";
  const std::int64_t busy_workers = kFewBatchesInFlight + 1;
  return option_text("data.prefetch: " + std::to_string(kFewBatchesInFlight) +
                         (s.config.data.workers > busy_workers
                              ? " and data.workers: " + std::to_string(busy_workers)
                              : ""),
                     total, usable);
}

}  // namespace

std::string memory_share_note(const Session& s, double capacity) {
  const int ranks = ranks_sharing_memory(s);
  if (ranks <= 1) return "";
  return " (" + mib_text(capacity) + " MiB for each of the " + std::to_string(ranks) +
         " ranks on this machine)";
}

std::string fit_verdict(const Session& s, Backend& backend, const MemoryEstimate& e,
                        double capacity, MicroBatch micro_batch) {
  if (capacity <= 0) return "capacity unknown";
  const double headroom = capacity * s.config.train.memory_headroom;
  if (e.total() + headroom <= capacity) return "fits";
  std::string text = "does not fit by " + mib_text(e.total() + headroom - capacity) +
                     " MiB (with " + percent_text(s.config.train.memory_headroom) +
                     " headroom). To make it fit:";
  // Each option with the total the plan predicts for it.
  if (micro_batch == MicroBatch::kept) {
    text += "\n    - the resume keeps micro-batch " + std::to_string(s.batch.micro) +
            " x accumulation " + std::to_string(s.batch.accumulation) +
            ", as the run chose (its checkpoints' steps are of that accumulation): raise the "
            "limit, or " +
            kRecomputeAdvice;
    return text + loader_option(s, backend, e, capacity - headroom);
  }
  const MicroBatchChoice choice = fit_micro_batch(s, backend, capacity);
  if (!choice.fits) {
    const std::int64_t smallest = choice.session.batch.micro;
    text += "\n    - no micro-batch fits, not even " + std::to_string(smallest) +
            (smallest > 1 ? " (the smallest the model takes)" : "") + ": " +
            advice_when_one_does_not_fit(choice, capacity - headroom);
    // Parameters, gradients and optimizer state alone beyond it: fewer
    // loader batches or another precision cannot make it fit.
    if (persistent_bytes(choice.estimate, choice.session.batch.accumulation > 1) >
        capacity - headroom)
      return text;
  } else {
    // A run that chose auto already gets the micro-batch to set; one with
    // train.accumulation given must drop it for auto.
    const std::string setting =
        s.config.train.micro_batch_auto
            ? "train.micro_batch_size: " + std::to_string(choice.session.batch.micro)
        : s.config.train.accumulation > 0
            ? "train.micro_batch_size: auto, without train.accumulation"
            : "train.micro_batch_size: auto";
    text += "\n    - " + setting + " -> micro-batch " + std::to_string(choice.session.batch.micro) +
            " x accumulation " + std::to_string(choice.session.batch.accumulation) + ", " +
            mib_text(choice.estimate.total()) + " MiB (the global batch stays " +
            std::to_string(s.batch.global) + ")";
    text += std::string("\n    - ") + kRecomputeAdvice;
  }
  text += loader_option(s, backend, e, capacity - headroom);
  if ((s.config.precision.mode == "fp32" || s.config.precision.mode == "tf32") &&
      backend.supports_compute(DType::bf16)) {
    Session low = s;
    low.config.precision.mode = "bf16";
    build_model_graph(low);
    const double total = estimate_memory(low, backend).total();
    if (total < e.total()) text += option_text("precision: bf16", total, capacity - headroom);
  }
  return text;
}

void enforce_memory_limit(const Session& s, Backend& backend, MicroBatch micro_batch) {
  const MemoryEstimate e = estimate_memory(s, backend);
  const double capacity = memory_capacity(s, backend);
  const std::string verdict = fit_verdict(s, backend, e, capacity, micro_batch);
  if (verdict == "fits") return;
  config::Diagnostics diags;
  diags.add(mark_of(s.config, "train.memory_limit_mib"), "train.memory_limit_mib",
            "the memory plan needs " + mib_text(e.total()) +
                " MiB (`trainer plan` itemises it); with the limit of " +
                std::to_string(s.config.train.memory_limit_mib) + " MiB" +
                memory_share_note(s, capacity) + " it " + verdict);
  diags.throw_if_any();
}

void refuse_beyond_available(const Session& s, Backend& backend) {
  const double capacity = memory_capacity(s, backend);
  if (capacity <= 0) return;  // not known
  const MemoryEstimate e = estimate_memory(s, backend);
  // On a GPU the loaders' batches are in host memory, not the device's.
  const double needed =
      s.config.devices.on_cpu() ? e.total() : e.total() - e.loader - e.eval_loader;
  if (needed <= capacity) return;
  // The model's own tensors alone beyond it: the model is what is too
  // large, whatever the batch.
  const double usable = capacity * (1.0 - s.config.train.memory_headroom);
  const std::string key =
      persistent_bytes(e, s.batch.accumulation > 1) > usable ? "model" : "train.batch_size";
  config::Diagnostics diags;
  diags.add(mark_of(s.config, key), key,
            "the memory plan needs " + mib_text(needed) +
                " MiB (`trainer plan` itemises it), more than the " + mib_text(capacity) +
                " MiB available on " + backend.name() + memory_share_note(s, capacity) +
                " (train.memory_limit_mib, when set, is planned for instead): the run would "
                "fail allocating it, or be killed using it; it " +
                fit_verdict(s, backend, e, capacity));
  diags.throw_if_any();
}

MicroBatchChoice fit_micro_batch(const Session& s, Backend& backend, double capacity) {
  const std::int64_t per_rank = s.batch.micro * s.batch.accumulation;
  MicroBatchChoice choice;
  choice.capacity = capacity;
  const double usable = choice.capacity * (1.0 - s.config.train.memory_headroom);
  std::exception_ptr refused;  // the model's error for the last micro-batch it refused
  bool planned = false;
  // The divisors of per_rank, largest first: found up to its square root (a
  // batch in the billions has at most a few thousand).
  std::vector<std::int64_t> divisors;
  for (std::int64_t d = 1; d <= per_rank / d; ++d)
    if (per_rank % d == 0) {
      divisors.push_back(d);
      if (d != per_rank / d) divisors.push_back(per_rank / d);
    }
  std::sort(divisors.rbegin(), divisors.rend());
  for (const std::int64_t micro : divisors) {
    try {
      choice.session = with_micro_batch(s, micro);
    } catch (const config::ConfigError&) {
      refused = std::current_exception();
      continue;  // one the model refuses (a batchnorm left one value per channel)
    }
    choice.estimate = estimate_memory(choice.session, backend);
    planned = true;
    if (choice.capacity <= 0 || choice.estimate.total() <= usable) return choice;
  }
  if (!planned) std::rethrow_exception(refused);
  // The session and estimate of the smallest micro-batch the model takes.
  choice.fits = false;
  return choice;
}

void refuse_unfit_micro_batch(const Session& s, const MicroBatchChoice& choice,
                              UnfitDetail detail) {
  if (choice.fits) return;
  const double usable = choice.capacity * (1.0 - s.config.train.memory_headroom);
  const std::string capacity =
      s.config.train.memory_limit_mib > 0
          ? "the limit of " + std::to_string(s.config.train.memory_limit_mib) +
                " MiB (train.memory_limit_mib)" + memory_share_note(s, choice.capacity)
          : "the " + mib_text(choice.capacity) + " MiB available";
  config::Diagnostics diags;
  diags.add(mark_of(s.config, "train.micro_batch_size"), "train.micro_batch_size",
            "auto: even a micro-batch of " + std::to_string(choice.session.batch.micro) +
                (choice.session.batch.micro > 1 ? " (the smallest the model takes)" : "") +
                " needs " + mib_text(choice.estimate.total()) +
                (detail == UnfitDetail::plan_printed
                     ? " MiB (itemised above), more than the "
                     : " MiB (`trainer plan` itemises it), more than the ") +
                mib_text(usable) + " MiB usable of " + capacity + " less " +
                percent_text(s.config.train.memory_headroom) + " headroom",
            detail == UnfitDetail::plan_printed ? std::string()
                                                : advice_when_one_does_not_fit(choice, usable));
  diags.throw_if_any();
}

std::string out_of_memory_report(const Session& s, Backend& backend) {
  const MemoryStats now = backend.memory_stats();
  const MemoryEstimate e = estimate_memory(s, backend);
  // The allocation failed: what this rank could have had (what it holds, and
  // its share of what is free) counts, even under a larger limit.
  double capacity = memory_capacity(s, backend);
  if (const std::size_t available = backend.available_memory(); available > 0) {
    const double could_have = static_cast<double>(available) / ranks_sharing_memory(s) +
                              static_cast<double>(now.allocated);
    capacity = capacity > 0 ? std::min(capacity, could_have) : could_have;
  }
  char text[1024];
  std::snprintf(text, sizeof text,
                "memory on %s: %.1f MiB allocated by the program (peak %.1f), %.1f MiB held by "
                "the process, %.1f MiB available\n"
                "the plan for micro-batch %lld: parameters %.1f, gradients %.1f, optimizer "
                "state %.1f, activations %.1f, workspace %.1f, loader %.1f, evaluation loader "
                "%.1f; total %.1f MiB\n",
                backend.name().c_str(), mib(static_cast<double>(now.allocated)),
                mib(static_cast<double>(now.peak)), mib(static_cast<double>(now.reserved)),
                mib(static_cast<double>(backend.available_memory())),
                static_cast<long long>(s.batch.micro), mib(e.params), mib(e.grads),
                mib(e.optimizer), mib(e.activations), mib(e.workspace), mib(e.loader),
                mib(e.eval_loader), mib(e.total()));
  return text + std::string("the plan against ") +
         std::to_string(static_cast<long long>(mib(capacity))) +
         " MiB: " + fit_verdict(s, backend, e, capacity);
}

MemoryFigures memory_figures(const Backend& backend) {
  const MemoryStats stats = backend.memory_stats();
  return {mib(static_cast<double>(stats.allocated)), mib(static_cast<double>(stats.peak)),
          mib(static_cast<double>(stats.reserved))};
}

}  // namespace trainer::train
