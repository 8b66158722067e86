// The input-bound warning: the loader too slow, starved of cores, or bursty.
#include "runner/train/input_advice.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace trainer::train {

namespace {

// " and data.prefetch: N" when `workers` need a deeper ring than `prefetch`
// gives them to build in (prefetch + 1 batches at once while the step waits).
std::string prefetch_for(std::int64_t workers, std::int64_t prefetch) {
  return workers > prefetch + 1 ? fmt::format(" and data.prefetch: {}", workers - 1) : "";
}

// "the step waited for data N% of the time", or what a run's step would.
std::string waited(const InputWait& w) {
  return w.predicted
             ? fmt::format("a run's step would wait for data about {:.0f}% of the time", w.wait_pct)
             : fmt::format("the step waited for data {:.0f}% of the time", w.wait_pct);
}

}  // namespace

std::string input_wait_advice(const InputWait& w) {
  const std::string cheaper =
      "make each sample cheaper to load (data stored at the training size: images resized "
      "beforehand, or arrays in NPY)";
  // The compute threads wait with the step: in a window that waited most of
  // the time, their cores are free for the loader's workers.
  const double busy_compute =
      static_cast<double>(w.compute_threads) * std::clamp(1.0 - w.wait_pct / 100.0, 0.0, 1.0);
  // Without workers every batch is built between the steps, however fast:
  // workers (on a core of their own) overlap it with them; prefetch does nothing.
  if (w.workers == 0) {
    std::string knob;
    if (w.cores <= 1) {
      knob = "with one core there is none for a loader worker: " + cheaper;
    } else if (w.wait_pct >= 50) {
      const std::int64_t workers = std::clamp<std::int64_t>(
          std::llround(static_cast<double>(w.cores) - busy_compute), 1, w.cores);
      knob = fmt::format(
          "set data.workers: {}{} (the compute threads wait for data most of the time: their "
          "cores are free for loading)",
          workers, prefetch_for(workers, w.prefetch));
    } else if (w.compute_threads >= w.cores) {
      knob = fmt::format("set data.workers: 1 and backend.threads: {}", w.cores - 1);
    } else {
      knob = "set data.workers: 1 or more, to build batches while the step runs";
    }
    return fmt::format(
        "input-bound: {}, its batches built on the training thread (data.workers: 0) at {:.0f} "
        "samples/s while the model consumes {:.0f} samples/s: {}",
        waited(w), w.loader_samples_per_s, w.model_samples_per_s, knob);
  }
  // The loader's rate counts fill time only; below twice what the step
  // consumes, more workers (or fewer transforms) are what helps.
  const double headroom =
      w.model_samples_per_s > 0 ? w.loader_samples_per_s / w.model_samples_per_s : 0.0;
  if (headroom < 2.0) {
    // More workers help only while there are cores for them: those neither
    // the building workers nor the compute threads' busy share take. While
    // the step waits, the ring's every slot is being built: data.prefetch
    // ahead, and the one the step handed back (fewer when an epoch has fewer
    // batches: then no setting adds any).
    const std::int64_t deepest = w.prefetch + 1;
    const std::int64_t slots = w.slots > 0 ? std::min(w.slots, deepest) : deepest;
    const bool epoch_caps_ring = slots < deepest;
    const std::int64_t building = std::min(w.workers, slots);
    const double idle_cores = static_cast<double>(w.cores - building) - busy_compute;
    std::string knob;
    if (idle_cores > 0.5 && !(epoch_caps_ring && w.workers >= slots)) {
      // As many as twice the model's rate asks for, within the idle cores.
      const double wanted =
          std::ceil(static_cast<double>(building) * 2.0 / std::max(headroom, 1e-9));
      const std::int64_t more =
          std::clamp<std::int64_t>(static_cast<std::int64_t>(wanted) - building, 1,
                                   std::max<std::int64_t>(1, std::llround(idle_cores)));
      knob = w.workers > slots
                 ? fmt::format(
                       "only {} of its {} workers build batches at once (data.prefetch: {}, "
                       "and the batch the step hands back): raise data.prefetch from {} to {}",
                       slots, w.workers, w.prefetch, w.prefetch,
                       std::min(w.workers, building + more) - 1)
                 : fmt::format("raise data.workers from {} to {}{}", w.workers, w.workers + more,
                               prefetch_for(w.workers + more, w.prefetch));
    } else if (epoch_caps_ring && w.workers >= slots) {
      knob = fmt::format(
          "an epoch has {} batches, all of them being built at once: more workers would not "
          "help: {}",
          slots, cheaper);
    } else if (w.workers >= w.cores) {
      knob = fmt::format("its {} workers already have all {} cores, more would not help: {}",
                         w.workers, w.cores, cheaper);
    } else if (w.compute_threads > 1) {
      knob = fmt::format(
          "its {} worker{} and the {} compute threads have all {} cores: move cores from "
          "backend.threads to data.workers, or {}",
          w.workers, w.workers == 1 ? "" : "s", w.compute_threads, w.cores, cheaper);
    } else {
      knob = fmt::format("its {} worker{} and the training thread have all {} cores: {}", w.workers,
                         w.workers == 1 ? "" : "s", w.cores, cheaper);
    }
    return fmt::format(
        "input-bound: {}; the loader delivers {:.0f} samples/s, the model consumes {:.0f} "
        "samples/s: {}",
        waited(w), w.loader_samples_per_s, w.model_samples_per_s, knob);
  }
  const std::string head = fmt::format(
      "data wait {:.0f}% of the time, though the loader can fill {:.0f} samples/s, {:.0f}x the "
      "{:.0f} the model consumes: ",
      w.wait_pct, w.loader_samples_per_s, headroom, w.model_samples_per_s);
  if (w.workers + w.compute_threads > w.cores) {
    // Workers plus compute threads within the cores: fewer threads when
    // that leaves at least one, else a quarter of the cores for the loader.
    std::string knob;
    if (w.cores - w.workers >= 1) {
      knob = fmt::format("set backend.threads: {}", w.cores - w.workers);
    } else if (w.cores == 1) {
      knob = "set data.workers: 0 (batches built on the training thread)";
    } else {
      const std::int64_t workers = std::max<std::int64_t>(1, w.cores / 4);
      knob =
          fmt::format("set data.workers: {} and backend.threads: {}", workers, w.cores - workers);
    }
    return head + fmt::format(
                      "its {} worker{} and the {} compute thread{} share {} core{} and wait for "
                      "each other; {}",
                      w.workers, w.workers == 1 ? "" : "s", w.compute_threads,
                      w.compute_threads == 1 ? "" : "s", w.cores, w.cores == 1 ? "" : "s", knob);
  }
  if (w.prefetch < 64)
    return head + fmt::format("batches arrive in bursts; raise data.prefetch from {}", w.prefetch);
  return head + "batches arrive in bursts (a slow file system or a few slow samples?)";
}

double predicted_wait_pct(double loader_samples_per_s, double model_samples_per_s,
                          bool workers_build_ahead) {
  if (loader_samples_per_s <= 0 || model_samples_per_s <= 0) return 0;
  const double load = 1.0 / loader_samples_per_s, compute = 1.0 / model_samples_per_s;
  // Workers build while the step runs: it waits for the part of a batch's
  // load time its own time does not cover. Without, it waits for all of it.
  const double wait = workers_build_ahead ? std::max(0.0, load - compute) : load;
  return 100.0 * wait / (wait + compute);
}

}  // namespace trainer::train
