// CPU optimizer updates, gradient norms and accumulation.
#include "ops/cpu/vector_ops.h"

#include <cmath>

namespace trainer {
namespace {

void sgd(const ParamSlot& s, const OptimizerStep& o) {
  float* __restrict p = s.param;
  const float* __restrict g = s.grad;
  float* __restrict buf = s.state0;
  const float wd = s.weight_decay ? o.weight_decay : 0.0f;
  for (std::int64_t i = 0; i < s.size; ++i) {
    float d = g[i] * o.grad_scale + wd * p[i];
    if (buf) {
      buf[i] = o.momentum * buf[i] + d;
      d = o.nesterov ? d + o.momentum * buf[i] : buf[i];
    }
    p[i] -= o.lr * d;
  }
}

void adam(const ParamSlot& s, const OptimizerStep& o, bool decoupled) {
  float* __restrict p = s.param;
  const float* __restrict g = s.grad;
  float* __restrict m = s.state0;
  float* __restrict v = s.state1;
  const float wd = s.weight_decay ? o.weight_decay : 0.0f;
  const double t = static_cast<double>(o.step);
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(o.beta1), t));
  const float bc2_sqrt =
      static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(o.beta2), t)));
  const float step_size = o.lr / bc1;
  const float decay = decoupled ? 1.0f - o.lr * wd : 1.0f;
  const float l2 = decoupled ? 0.0f : wd;
  for (std::int64_t i = 0; i < s.size; ++i) {
    const float gi = g[i] * o.grad_scale + l2 * p[i];
    m[i] = o.beta1 * m[i] + (1.0f - o.beta1) * gi;
    v[i] = o.beta2 * v[i] + (1.0f - o.beta2) * gi * gi;
    p[i] = p[i] * decay - step_size * m[i] / (std::sqrt(v[i]) / bc2_sqrt + o.eps);
  }
}

class CpuVectorOps final : public VectorOps {
 public:
  void optimizer_step(const std::vector<ParamSlot>& slots, const OptimizerStep& step) override {
    for (const auto& s : slots) {
      switch (step.kind) {
        case OptimizerKind::sgd:
          sgd(s, step);
          break;
        case OptimizerKind::adam:
          adam(s, step, false);
          break;
        case OptimizerKind::adamw:
          adam(s, step, true);
          break;
      }
    }
  }

  double sum_squares(const std::vector<TensorRef>& tensors, bool& finite) override {
    double total = 0.0;
    finite = true;
    for (const auto& t : tensors) {
      const float* x = t.f32();
      const std::int64_t n = t.numel();
      float partial = 0.0f;  // blocks of float sums keep the loop vectorised
      double block_total = 0.0;
      for (std::int64_t i = 0; i < n; ++i) {
        partial += x[i] * x[i];
        if ((i & 1023) == 1023) {
          block_total += partial;
          partial = 0.0f;
        }
      }
      total += block_total + partial;
    }
    if (!std::isfinite(total)) finite = false;
    return total;
  }

  void accumulate(const TensorRef& dst, const TensorRef& src) override {
    float* __restrict d = dst.f32();
    const float* __restrict s = src.f32();
    const std::int64_t n = dst.numel();
    for (std::int64_t i = 0; i < n; ++i) d[i] += s[i];
  }

  void fill(const TensorRef& dst, float value) override {
    float* d = dst.f32();
    const std::int64_t n = dst.numel();
    for (std::int64_t i = 0; i < n; ++i) d[i] = value;
  }
};

}  // namespace

VectorOps& cpu_vector_ops() {
  static CpuVectorOps ops;
  return ops;
}

}  // namespace trainer
