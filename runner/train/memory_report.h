// Memory: what a training program will allocate, predicted from the memory
// plan without allocating it (`trainer plan`, `micro_batch_size: auto`, the
// out-of-memory report), what the backend has really allocated (logs and
// metrics), and the advice when a job does not fit.
#pragma once

#include <cstdint>
#include <string>

#include "ops/kernel.h"
#include "runner/train/session.h"

namespace trainer::train {

// Predicted bytes of one training program, per part.
struct MemoryEstimate {
  double params = 0, grads = 0, optimizer = 0;
  double activations = 0;          // the arena at its peak
  double forward_activations = 0;  // the arena's forward part
  std::size_t buffers = 0;         // values placed in the arena
  double workspace = 0;
  double loader = 0;       // the training loader's batches in flight (host memory)
  double eval_loader = 0;  // the evaluation's, allocated at each evaluation while
                           // the training loader's are alive (0: no evaluation data)
  std::int64_t loader_slots = 0, eval_loader_slots = 0;  // their batches (Loader::ring_slots)
  // What the backend will allocate: everything but the loaders' host buffers.
  double device_total() const { return params + grads + optimizer + activations + workspace; }
  double total() const { return device_total() + loader + eval_loader; }
};

// The host bytes of a loader's ring (data/loader.cpp): `slots` batches of
// `batch_size` samples of `sample_shape` (float) and their labels (one int64
// class each, or float targets of `target_shape`).
double loader_ring_bytes(std::int64_t slots, std::int64_t batch_size, const Shape& sample_shape,
                         const Shape& target_shape);

// Compiles the kernels (no allocation) and plans memory for `s` as configured.
MemoryEstimate estimate_memory(const Session& s, Backend& backend);

// The memory `trainer` may use on the backend: train.memory_limit_mib when
// set, else what the device has available (0: unknown); on the CPU, one
// rank's share of it (ranks_sharing_memory).
double memory_capacity(const Session& s, const Backend& backend);

// The CPU ranks that share this machine's memory: the launcher's count of
// ranks on this node where it gives one, else (before trainer's own launcher
// starts them here: run, validate, plan) devices.world_size; 1 on GPUs.
int ranks_sharing_memory(const Session& s);

// " (X MiB for each of the N ranks on this machine)" for a `capacity` that is
// one rank's share, or "" for one rank.
std::string memory_share_note(const Session& s, double capacity);

// Whether the micro-batch may change to fit: chosen anew, or kept (a resume
// of the micro-batch auto chose: its checkpoints' steps are of that
// accumulation, and the resume refuses another).
enum class MicroBatch { free, kept };

// "fits" or "does not fit by N MiB", and what would make it fit, each option
// with the memory the plan predicts for it.
std::string fit_verdict(const Session& s, Backend& backend, const MemoryEstimate& estimate,
                        double capacity, MicroBatch micro_batch = MicroBatch::free);

// `train.micro_batch_size: auto`: the largest micro-batch dividing the per-rank
// batch whose predicted memory, with the headroom, fits `capacity` (bytes, from
// memory_capacity; with several ranks, the smallest of theirs, so that every
// rank picks the same); the accumulation grows so the global batch stays.
// When even 1 does not fit, the choice is micro-batch 1 with `fits` false
// (refuse_unfit_micro_batch says why).
struct MicroBatchChoice {
  Session session;
  MemoryEstimate estimate;
  double capacity = 0;
  bool fits = true;
};
MicroBatchChoice fit_micro_batch(const Session& s, Backend& backend, double capacity);

// A choice that does not fit: throws a ConfigError at train.micro_batch_size
// with what micro-batch 1 needs against the capacity, and what could help
// (not recompute when the parameters and their state alone are too much).
// `trainer plan` prints the itemised plan and its advice first, so it asks for
// the error alone (UnfitDetail::plan_printed).
enum class UnfitDetail { with_advice, plan_printed };
void refuse_unfit_micro_batch(const Session& s, const MicroBatchChoice& choice,
                              UnfitDetail detail = UnfitDetail::with_advice);

// Without a limit (train.memory_limit_mib: 0) or auto: refuses, with what
// would make it fit, a plan larger than all the memory available now (the
// run would fail allocating it, or on the CPU be killed once it touched it).
// Nothing when the available memory is not known.
void refuse_beyond_available(const Session& s, Backend& backend);

// With train.memory_limit_mib set: throws a ConfigError at that key, with the
// fit verdict and its options, when the plan does not fit the limit.
void enforce_memory_limit(const Session& s, Backend& backend,
                          MicroBatch micro_batch = MicroBatch::free);

// What to print when an allocation fails: the backend's figures, the plan
// and the advice.
std::string out_of_memory_report(const Session& s, Backend& backend);

struct MemoryFigures {
  double allocated_mib = 0, peak_mib = 0, reserved_mib = 0;
};
MemoryFigures memory_figures(const Backend& backend);

double mib(double bytes);

}  // namespace trainer::train
