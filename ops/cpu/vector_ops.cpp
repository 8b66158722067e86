// CPU optimizer updates, gradient norms and accumulation.
#include "ops/cpu/vector_ops.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "ops/cpu/parallel.h"

namespace trainer {
namespace {

using cpu::parallel_chunks;

// float32 -> bf16, rounded to nearest even (NaN stays a quiet NaN), as
// oneDNN's reorders round. Branch-free, so the loops around it vectorise.
inline std::uint16_t bf16_bits(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const std::uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
  return static_cast<std::uint16_t>(nan ? (bits >> 16) | 0x40u : rounded);
}

// Compiled for AVX-512 and AVX2 as well as the baseline (picked at load time):
// baseline SSE2 has no 32 -> 16 bit narrowing, and the loop would run scalar.
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void round_range(
    const float* __restrict src, std::uint16_t* __restrict dst, std::int64_t begin,
    std::int64_t end) {
#pragma omp simd
  for (std::int64_t i = begin; i < end; ++i) dst[i] = bf16_bits(src[i]);
}

// 1 when x is inf or NaN (its exponent all ones), else 0: branch-free, so
// an update loop ORs it over the weights it writes without losing
// vectorisation.
inline std::uint32_t non_finite_bit(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return static_cast<std::uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
}

// The parameters are read from locals, not through the OptimizerStep
// reference: a store to p[i] could alias it, which keeps the compiler from
// vectorising. Each variant is its own loop for the same reason. Each sets
// `nonfinite` when a weight (or Adam's second moment) it wrote is inf or NaN
// (inf or NaN gradients, or a step that overflowed); the loops that OR that bit are left to the
// auto-vectoriser: an `omp simd reduction` clause inside the parallel region
// kept GCC from vectorising them at all.
void sgd(const ParamSlot& s, const OptimizerStep& o, std::atomic<bool>& nonfinite) {
  float* __restrict p = s.param;
  const float* __restrict g = s.grad;
  float* __restrict buf = s.state0;
  std::uint16_t* copy = s.bf16_copy;
  const std::int64_t n = s.size;
  const float lr = o.lr * s.lr_scale, scale = o.grad_scale, momentum = o.momentum;
  const float wd = s.weight_decay ? o.weight_decay : 0.0f;
  if (!buf) {
    parallel_chunks(n, [=, &nonfinite](std::int64_t begin, std::int64_t end) {
      std::uint32_t bad = 0;
      for (std::int64_t i = begin; i < end; ++i) {
        p[i] -= lr * (g[i] * scale + wd * p[i]);
        bad |= non_finite_bit(p[i]);
      }
      if (bad) nonfinite = true;
      if (copy) round_range(p, copy, begin, end);
    });
  } else if (o.nesterov) {
    parallel_chunks(n, [=, &nonfinite](std::int64_t begin, std::int64_t end) {
      std::uint32_t bad = 0;
      for (std::int64_t i = begin; i < end; ++i) {
        const float d = g[i] * scale + wd * p[i];
        buf[i] = momentum * buf[i] + d;
        p[i] -= lr * (d + momentum * buf[i]);
        bad |= non_finite_bit(p[i]);
      }
      if (bad) nonfinite = true;
      if (copy) round_range(p, copy, begin, end);
    });
  } else {
    parallel_chunks(n, [=, &nonfinite](std::int64_t begin, std::int64_t end) {
      std::uint32_t bad = 0;
      for (std::int64_t i = begin; i < end; ++i) {
        buf[i] = momentum * buf[i] + (g[i] * scale + wd * p[i]);
        p[i] -= lr * buf[i];
        bad |= non_finite_bit(p[i]);
      }
      if (bad) nonfinite = true;
      if (copy) round_range(p, copy, begin, end);
    });
  }
}

void adam(const ParamSlot& s, const OptimizerStep& o, bool decoupled,
          std::atomic<bool>& nonfinite) {
  float* __restrict p = s.param;
  const float* __restrict g = s.grad;
  float* __restrict m = s.state0;
  float* __restrict v = s.state1;
  std::uint16_t* copy = s.bf16_copy;
  const std::int64_t n = s.size;
  const float wd = s.weight_decay ? o.weight_decay : 0.0f;
  const double t = static_cast<double>(o.step);
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(o.beta1), t));
  const float bc2_sqrt =
      static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(o.beta2), t)));
  const float lr = o.lr * s.lr_scale;
  const float step_size = lr / bc1;
  const float decay = decoupled ? 1.0f - lr * wd : 1.0f;
  const float l2 = decoupled ? 0.0f : wd;
  const float scale = o.grad_scale, beta1 = o.beta1, beta2 = o.beta2, eps = o.eps;
  parallel_chunks(n, [=, &nonfinite](std::int64_t begin, std::int64_t end) {
    std::uint32_t bad = 0;
    for (std::int64_t i = begin; i < end; ++i) {
      const float gi = g[i] * scale + l2 * p[i];
      m[i] = beta1 * m[i] + (1.0f - beta1) * gi;
      v[i] = beta2 * v[i] + (1.0f - beta2) * gi * gi;
      p[i] = p[i] * decay - step_size * m[i] / (std::sqrt(v[i]) / bc2_sqrt + eps);
      // An overflowing second moment leaves the weight finite (m / inf = 0).
      bad |= non_finite_bit(p[i]) | non_finite_bit(v[i]);
    }
    if (bad) nonfinite = true;
    if (copy) round_range(p, copy, begin, end);
  });
}

// Sum of squares of n floats in double, so that it is infinite only when an
// element is (the CUDA kernel's rule too). Eight independent sums let the
// loop vectorise without reordering any one of them.
double sum_of_squares(const float* x, std::int64_t n) {
  constexpr int kLanes = 8;
  double lanes[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) {
      const double v = x[i + k];
      lanes[k] += v * v;
    }
  double total = 0.0;
  for (; i < n; ++i) {
    const double v = x[i];
    total += v * v;
  }
  for (double lane : lanes) total += lane;
  return total;
}

class CpuVectorOps final : public VectorOps {
 public:
  void set_optimizer_step(const OptimizerStep& step) override { step_ = step; }

  void optimizer_update(const std::vector<ParamSlot>& slots) override {
    OptimizerStep step = step_;
    if (step.clip_norm > 0 || scaling_) {
      double total = 0.0;
      for (const auto& s : slots) total += sum_of_squares(s.grad, s.size);
      const bool finite = std::isfinite(total);
      // Under loss scaling non-finite gradients skip the step instead.
      if (!scaling_) nonfinite_seen_ = nonfinite_seen_ || !finite;
      const UpdateDecision d = decide_update(step, std::sqrt(total), finite, rule_,
                                             scaling_ ? &state_ : nullptr, &schedule_window_);
      if (!d.apply) return;
      step = applied(step, d);
    }
    std::atomic<bool> nonfinite = false;
    for (const auto& s : slots) {
      switch (step.kind) {
        case OptimizerKind::sgd:
          sgd(s, step, nonfinite);
          break;
        case OptimizerKind::adam:
          adam(s, step, false, nonfinite);
          break;
        case OptimizerKind::adamw:
          adam(s, step, true, nonfinite);
          break;
      }
    }
    // Applied with inf or NaN (scaled updates skip those instead).
    if (nonfinite && !scaling_) nonfinite_seen_ = true;
  }

  bool nonfinite_weights_seen() override { return std::exchange(nonfinite_seen_, false); }

  void start_loss_scaling(const LossScaleRule& rule, const LossScaleState& state) override {
    scaling_ = true;
    rule_ = rule;
    state_ = state;
  }

  void set_schedule(std::int64_t first_update,
                    const std::vector<ScheduledUpdate>& updates) override {
    check_schedule_size(updates.size());
    schedule_ = updates;
    schedule_window_ = {first_update, static_cast<std::int64_t>(schedule_.size()),
                        schedule_.data()};
  }

  void stop_loss_scaling() override {
    scaling_ = false;
    state_ = LossScaleState{};
    set_schedule(0, {});
  }

  LossScaleState loss_scale_state() override { return state_; }

  void fill_loss_seed(const TensorRef& dst, double factor) override {
    fill(dst, static_cast<float>(factor * state_.scale));
  }

  double sum_squares(const std::vector<TensorRef>& tensors, bool& finite) override {
    double total = 0.0;
    finite = true;
    for (const auto& t : tensors) total += sum_of_squares(t.f32(), t.numel());
    if (!std::isfinite(total)) finite = false;
    return total;
  }

  void accumulate(const TensorRef& dst, const TensorRef& src) override {
    float* __restrict d = dst.f32();
    const float* __restrict s = src.f32();
    const std::int64_t n = dst.numel();
    parallel_chunks(n, [=](std::int64_t begin, std::int64_t end) {
#pragma omp simd
      for (std::int64_t i = begin; i < end; ++i) d[i] += s[i];
    });
  }

  void set_average_weight(float weight) override {
    average_weight_ = weight;
  }

  void average(const TensorRef& dst, const TensorRef& src) override {
    const float weight = average_weight_;
    float* __restrict d = dst.f32();
    const float* __restrict s = src.f32();
    parallel_chunks(dst.numel(), [=](std::int64_t begin, std::int64_t end) {
#pragma omp simd
      for (std::int64_t i = begin; i < end; ++i) d[i] += weight * (s[i] - d[i]);
    });
  }

  void swap(const TensorRef& a, const TensorRef& b) override {
    std::swap_ranges(a.f32(), a.f32() + a.numel(), b.f32());
  }

  void round_to_bf16(const TensorRef& src, const TensorRef& dst) override {
    const float* s = src.f32();
    auto* d = static_cast<std::uint16_t*>(dst.data);
    parallel_chunks(src.numel(),
                    [=](std::int64_t begin, std::int64_t end) { round_range(s, d, begin, end); });
  }

  void fill(const TensorRef& dst, float value) override {
    float* d = dst.f32();
    const std::int64_t n = dst.numel();
    for (std::int64_t i = 0; i < n; ++i) d[i] = value;
  }

 private:
  OptimizerStep step_;
  bool nonfinite_seen_ = false;
  bool scaling_ = false;
  LossScaleRule rule_;
  LossScaleState state_;  // scale 1 when not scaling
  float average_weight_ = 0.0f;
  std::vector<ScheduledUpdate> schedule_;
  ScheduleWindow schedule_window_;  // over schedule_
};

}  // namespace

VectorOps& cpu_vector_ops() {
  static CpuVectorOps ops;
  return ops;
}

}  // namespace trainer
