// Collective: what the training loop needs from the other ranks of a
// data-parallel job: its rank and world size, gradient all-reduce and small
// metric reductions. One interface; runner/dist/ implements it over MPI (CPU
// ranks) and NCCL (GPU ranks). A single process uses SingleProcess.
#pragma once

#include <vector>

#include "ops/tensor.h"

namespace trainer::train {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // Sums every float32 tensor over all ranks, in place (backend memory).
  virtual void all_reduce_sum(const std::vector<TensorRef>& tensors) = 0;
  // Sums a few host doubles over all ranks, in place (metrics, step times).
  virtual void all_reduce_sum(std::vector<double>& values) = 0;
  virtual void barrier() = 0;
  // How long this rank just waited for its next batch (per-rank load-balance reports).
  virtual void note_data_wait(double /*seconds*/) {}
  bool is_root() const { return rank() == 0; }
};

class SingleProcess final : public Collective {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  void all_reduce_sum(const std::vector<TensorRef>&) override {}
  void all_reduce_sum(std::vector<double>&) override {}
  void barrier() override {}
};

}  // namespace trainer::train
