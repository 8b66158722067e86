// Losses as own loops: softmax cross-entropy (label smoothing, ignore_index,
// only the first valid_rows rows) and mean squared error. The backward scales
// dLoss/dprediction by grad_output[0] and writes zeros for padding rows.
#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>

#include "ops/cpu/families.h"

namespace trainer::cpu {
namespace {

class CrossEntropyKernel final : public Kernel {
 public:
  explicit CrossEntropyKernel(const KernelContext& ctx)
      : rows_(ctx.inputs.at(0)[0]),
        classes_(ctx.inputs.at(0)[1]),
        smoothing_(ctx.attrs->get_number("label_smoothing")),
        ignore_(ctx.attrs->get_int("ignore_index")) {}
  std::string implementation() const override { return "loop"; }

  void forward(const KernelArgs& a) override {
    const float* logits = a.inputs[0].f32();
    const std::int64_t* labels = a.inputs[1].i64();
    const std::int64_t used = rows_used(step_values_of(a).valid_rows, rows_);
    double total = 0;
    std::int64_t counted = 0;
    for (std::int64_t r = 0; r < used; ++r) {
      const std::int64_t label = labels[r];
      if (label == ignore_) continue;
      check_label(label, r);
      const float* z = logits + r * classes_;
      const float zmax = *std::max_element(z, z + classes_);
      // Relative to the largest logit: large logits (1e20) would otherwise
      // lose log(sum exp) next to them and the loss with it.
      double sum_exp = 0, sum_below = 0;
      for (std::int64_t k = 0; k < classes_; ++k) {
        const double below = static_cast<double>(zmax) - z[k];
        sum_exp += std::exp(-below);
        sum_below += below;
      }
      // -sum_k target_k log softmax_k with target = (1-s) onehot + s/K
      total += std::log(sum_exp) + (1 - smoothing_) * (static_cast<double>(zmax) - z[label]) +
               smoothing_ * sum_below / static_cast<double>(classes_);
      ++counted;
    }
    a.output.f32()[0] = counted ? static_cast<float>(total / static_cast<double>(counted)) : 0.0f;
  }

  void backward(const KernelArgs& a) override {
    if (!a.grad_inputs[0]) return;
    const float* logits = a.inputs[0].f32();
    const std::int64_t* labels = a.inputs[1].i64();
    float* dx = a.grad_inputs[0].f32();
    const std::int64_t used = rows_used(step_values_of(a).valid_rows, rows_);
    std::int64_t counted = 0;
    for (std::int64_t r = 0; r < used; ++r) counted += labels[r] != ignore_;
    const float scale = counted ? a.grad_output.f32()[0] / static_cast<float>(counted) : 0.0f;
    const float off = static_cast<float>(smoothing_ / static_cast<double>(classes_));
    const float on = static_cast<float>(1 - smoothing_) + off;
    for (std::int64_t r = 0; r < rows_; ++r) {
      float* g = dx + r * classes_;
      if (r >= used || labels[r] == ignore_) {
        std::fill(g, g + classes_, 0.0f);
        continue;
      }
      const std::int64_t label = labels[r];
      check_label(label, r);
      const float* z = logits + r * classes_;
      const float zmax = *std::max_element(z, z + classes_);
      float sum = 0;
      for (std::int64_t k = 0; k < classes_; ++k) {
        g[k] = std::exp(z[k] - zmax);
        sum += g[k];
      }
      const float inv = 1.0f / sum;
      for (std::int64_t k = 0; k < classes_; ++k) g[k] = (g[k] * inv - off) * scale;
      g[label] -= (on - off) * scale;
    }
  }

 private:
  void check_label(std::int64_t label, std::int64_t row) const {
    if (label < 0 || label >= classes_)
      throw std::runtime_error("cross_entropy: label " + std::to_string(label) + " of row " +
                               std::to_string(row) + " is outside [0, " + std::to_string(classes_) +
                               ") (and is not ignore_index " + std::to_string(ignore_) + ")");
  }

  std::int64_t rows_, classes_;
  double smoothing_;
  std::int64_t ignore_;
};

class MseKernel final : public Kernel {
 public:
  explicit MseKernel(const KernelContext& ctx)
      : rows_(ctx.inputs.at(0)[0]),
        per_row_(numel(ctx.inputs.at(0)) / std::max<std::int64_t>(rows_, 1)) {}
  std::string implementation() const override { return "loop"; }

  void forward(const KernelArgs& a) override {
    const float* p = a.inputs[0].f32();
    const float* t = a.inputs[1].f32();
    const std::int64_t n = rows_used(step_values_of(a).valid_rows, rows_) * per_row_;
    double total = 0;
    for (std::int64_t k = 0; k < n; ++k) {
      const double d = static_cast<double>(p[k]) - t[k];
      total += d * d;
    }
    a.output.f32()[0] = n ? static_cast<float>(total / static_cast<double>(n)) : 0.0f;
  }

  void backward(const KernelArgs& a) override {
    if (!a.grad_inputs[0]) return;
    const float* p = a.inputs[0].f32();
    const float* t = a.inputs[1].f32();
    float* dx = a.grad_inputs[0].f32();
    const std::int64_t n = rows_used(step_values_of(a).valid_rows, rows_) * per_row_;
    const float scale = n ? 2.0f * a.grad_output.f32()[0] / static_cast<float>(n) : 0.0f;
    for (std::int64_t k = 0; k < n; ++k) dx[k] = (p[k] - t[k]) * scale;
    std::fill(dx + n, dx + rows_ * per_row_, 0.0f);
  }

 private:
  std::int64_t rows_, per_row_;
};

}  // namespace

void register_loss_kernels(Backend& backend) {
  backend.add_kernel("cross_entropy", [](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    return std::make_unique<CrossEntropyKernel>(ctx);
  });
  backend.add_kernel("mse", [](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    return std::make_unique<MseKernel>(ctx);
  });
}

}  // namespace trainer::cpu
