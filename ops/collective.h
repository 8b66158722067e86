// Collective: what a data-parallel job needs from the other ranks: rank and
// world size, gradient all-reduce, small metric reductions, and the in-step
// sums of synchronised batchnorm. One interface; runner/dist/ implements it
// over MPI (CPU ranks) and NCCL (GPU ranks); a single process uses
// SingleProcess. It lives in ops/ because kernels (batchnorm with `sync`)
// reduce through it; ops/ never depends on an implementation.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <vector>

#include "ops/tensor.h"

namespace trainer {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // Sums every float32 tensor over all ranks, in place (backend memory).
  virtual void all_reduce_sum(const std::vector<TensorRef>& tensors) = 0;
  // Sums a few host doubles over all ranks, in place (metrics, step times);
  // closes the ranks' load-balance window.
  virtual void all_reduce_sum(std::vector<double>& values) = 0;
  // Sums a few host doubles over all ranks, in place, and nothing else happens
  // (inside a step: the per-channel sums of a synchronised batchnorm; after
  // it: whether any rank was asked to stop). Every rank gets bit-identical
  // sums, so replicas cannot drift apart.
  virtual void all_reduce_statistics(std::vector<double>& values) = 0;
  // The same for `count` doubles in backend memory, in order with the work
  // queued on the backend (NCCL: on the GPU's compute stream, so a recorded
  // step holds the reduction): a synchronised batchnorm's sums on a GPU.
  // Only a collective of GPU ranks has them.
  virtual void all_reduce_device_statistics(double* /*values*/, std::size_t /*count*/) {
    throw std::logic_error("this collective reduces no device memory (its ranks hold no GPU)");
  }
  virtual void barrier() = 0;
  // After a step is queued: its work, and the reductions inside it (SyncBN's),
  // must complete within the collective's timeout, or the job ends with the
  // reason (a dead or hung peer) rather than waiting without end. A collective
  // whose reductions return only when done has nothing to follow.
  virtual void watch_queued_work() {}
  // Every rank waits here while the root writes a checkpoint (the others have
  // nothing to write), under its own, longer timeout: a large checkpoint on
  // slow storage is not a hung rank.
  virtual void wait_for_checkpoint() {}
  // How long this rank just waited for its next batch (per-rank load-balance reports).
  virtual void note_data_wait(double /*seconds*/) {}
  // The run's step the next gradient reduction follows (a resumed run's
  // checkpoint step), for the reports and messages that name steps.
  virtual void start_at_step(std::int64_t /*step*/) {}
  bool is_root() const { return rank() == 0; }
};

class SingleProcess final : public Collective {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  void all_reduce_sum(const std::vector<TensorRef>&) override {}
  void all_reduce_sum(std::vector<double>&) override {}
  void all_reduce_statistics(std::vector<double>&) override {}
  void all_reduce_device_statistics(double*, std::size_t) override {}
  void barrier() override {}
};

// Every rank's `value`, in rank order, on every rank: each rank's value in
// its own slot of a sum, so that no other reduction is needed.
inline std::vector<double> values_over_ranks(Collective& collective, double value) {
  std::vector<double> values(static_cast<std::size_t>(collective.world()), 0.0);
  values[static_cast<std::size_t>(collective.rank())] = value;
  if (collective.world() > 1) collective.all_reduce_statistics(values);
  return values;
}

// The smallest of each rank's `value`, on every rank.
inline double smallest_over_ranks(Collective& collective, double value) {
  double smallest = value;
  for (const double v : values_over_ranks(collective, value))
    smallest = v < smallest ? v : smallest;
  return smallest;
}

}  // namespace trainer
