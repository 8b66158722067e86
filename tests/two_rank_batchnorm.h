// What the SyncBN tests (CPU and GPU) share: two ranks of half a batch each
// against one rank of the whole batch. Each rank's loss is a mean over its
// half, so its incoming gradient is twice the whole batch's, and the training
// loop averages the ranks' weight gradients: put back together, the ranks'
// outputs, input gradients (halved) and averaged weight and bias gradients
// must be the whole batch's, and so must each rank's running statistics.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "tests/op_check.h"

namespace trainer::testing {

inline HostTensor random_like(const Shape& s, std::uint64_t seed) {
  HostTensor t = HostTensor::zeros(s);
  std::mt19937_64 rng(seed);
  fill_uniform(t.f, rng, -1.0f, 1.0f);
  return t;
}

// Rows [first, first + rows) of a tensor whose first dimension is the batch.
inline HostTensor rows_of(const HostTensor& t, std::int64_t first, std::int64_t rows) {
  Shape s = t.shape;
  s[0] = rows;
  HostTensor out = HostTensor::zeros(s);
  const std::int64_t per_row = numel(t.shape) / t.shape[0];
  std::copy_n(t.f.begin() + first * per_row, rows * per_row, out.f.begin());
  return out;
}

// Each rank's incoming gradient: its half of the whole batch's `dy`, doubled.
inline HostTensor rank_gradient(const HostTensor& dy, int rank, std::int64_t half) {
  HostTensor out = rows_of(dy, rank * half, half);
  for (float& v : out.f) v *= 2.0f;
  return out;
}

struct TwoRankTolerance {
  double output_rtol, output_atol, gradient_rtol, gradient_atol;
};

// `ys`, `gs`: the two ranks' outputs and gradients; `y`, `g`: the whole
// batch's. Synchronised, they agree within `tolerance`; each rank alone,
// more than `differ_share` of the outputs differ (the test can tell).
inline void check_two_ranks_against_whole(const std::vector<HostTensor>& ys,
                                          const std::vector<OpRun::Grads>& gs,
                                          const std::vector<std::unique_ptr<OpRun>>& ranks,
                                          const HostTensor& y, const OpRun::Grads& g, OpRun& whole,
                                          bool synced, TwoRankTolerance tolerance,
                                          double differ_share) {
  std::vector<float> y2, dx2, dweight(gs[0].params[0].f.size()), dbias(dweight.size());
  for (int r = 0; r < 2; ++r) {
    y2.insert(y2.end(), ys[r].f.begin(), ys[r].f.end());
    for (float v : gs[r].inputs[0].f) dx2.push_back(0.5f * v);
    for (std::size_t c = 0; c < dweight.size(); ++c) {
      dweight[c] += 0.5f * gs[r].params[0].f[c];
      dbias[c] += 0.5f * gs[r].params[1].f[c];
    }
  }
  if (!synced) {
    std::size_t differ = 0;
    for (std::size_t k = 0; k < y2.size(); ++k) differ += std::abs(y2[k] - y.f[k]) > 1e-3f;
    CHECK(static_cast<double>(differ) > differ_share * static_cast<double>(y2.size()));
    return;
  }
  const TwoRankTolerance& t = tolerance;
  check_close(y2, y.f, t.output_rtol, t.output_atol, "y");
  for (int r = 0; r < 2; ++r) {
    check_close(ranks[r]->params[2].f, whole.params[2].f, 1e-6, 1e-7, "running_mean");
    check_close(ranks[r]->params[3].f, whole.params[3].f, 1e-6, 1e-7, "running_var");
  }
  check_close(dx2, g.inputs[0].f, t.gradient_rtol, t.gradient_atol, "dx");
  check_close(dweight, g.params[0].f, t.gradient_rtol, t.gradient_atol, "dweight");
  check_close(dbias, g.params[1].f, t.gradient_rtol, t.gradient_atol, "dbias");
}

}  // namespace trainer::testing
