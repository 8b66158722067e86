// SyncBN on the CPU: batchnorm whose training statistics cover the global
// batch of a data-parallel job. Forward: each rank sums count, x and x^2 per
// channel (in double), the ranks add their sums, and every rank normalises with
// the global mean and biased variance; the running statistics take the global
// unbiased variance. Backward: with g = dL/dy of the rank's own rows,
//   dx = gamma * invstd * (g - sum(g) / M - xhat * sum(g * xhat) / M),
// where the two sums and the count M are over every rank's rows. The weight and
// bias gradients are the rank's own sums: the gradient all-reduce of the
// training loop averages them like every other parameter gradient. Each rank's
// g is already scaled by the world size (its loss is the mean over its own
// rows and the ranks' gradients are averaged), so dx comes out as the gradient
// of the global loss scaled the same way. With `activation: relu` the output
// is clamped at zero and g is zeroed where it was. Without a collective (or
// with one rank) this is plain batchnorm. In a short training batch
// (StepValues::valid_rows) only the real rows enter the sums and the count,
// so ranks with different real rows combine into the statistics of all real
// rows; padding rows of y and dx are zero, and with no real row on any rank
// y and the gradients are zero and the running statistics stay as they are.
#include "ops/cpu/batchnorm_sync.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ops/collective.h"

namespace trainer::cpu {
namespace {

class SyncBatchNormKernel final : public Kernel {
 public:
  explicit SyncBatchNormKernel(const KernelContext& ctx)
      : collective_(ctx.collective), training_program_(ctx.training) {
    const Shape& x = ctx.inputs.at(0);
    batch_ = x[0];
    channels_ = x[1];
    inner_ = numel(x) / (batch_ * channels_);
    momentum_ = ctx.attrs->get_number("momentum");
    eps_ = ctx.attrs->get_number("eps");
    relu_ = epilogue_of(*ctx.attrs) == Epilogue::relu;
    sums_.assign(static_cast<std::size_t>(2 * channels_ + 1), 0.0);
    const int world = collective_ ? collective_->world() : 1;
    impl_ = "own:sync_batchnorm[ranks=" + std::to_string(world) + "]";
  }

  // The global batch mean and inverse standard deviation (double), forward to backward.
  std::vector<std::size_t> saved_bytes() const override {
    if (!training_program_) return {};
    const auto b = static_cast<std::size_t>(channels_) * sizeof(double);
    return {b, b};
  }
  std::string implementation() const override { return impl_; }

  void forward(const KernelArgs& a) override {
    const float* x = a.inputs[0].f32();
    float* y = a.output.f32();
    const float* gamma = a.params[0].f32();
    const float* beta = a.params[1].f32();
    float* running_mean = a.params[2].f32();
    float* running_var = a.params[3].f32();
    if (!(a.training && training_program_)) {
      for (std::int64_t c = 0; c < channels_; ++c) {
        const double invstd = 1.0 / std::sqrt(static_cast<double>(running_var[c]) + eps_);
        scale_shift(x, y, c, batch_, gamma[c] * invstd,
                    beta[c] - running_mean[c] * gamma[c] * invstd);
      }
      return;
    }
    // Local sums over the real rows, then the global ones.
    const std::int64_t rows = rows_used(step_values_of(a).valid_rows, batch_);
    const std::int64_t C = channels_;
    for (std::int64_t c = 0; c < C; ++c) {
      double s1 = 0, s2 = 0;
      for_channel(c, rows, [&](std::int64_t i) {
        const double v = x[i];
        s1 += v;
        s2 += v * v;
      });
      sums_[static_cast<std::size_t>(c)] = s1;
      sums_[static_cast<std::size_t>(C + c)] = s2;
    }
    sums_[static_cast<std::size_t>(2 * C)] = static_cast<double>(rows * inner_);
    reduce(sums_);
    count_ = sums_[static_cast<std::size_t>(2 * C)];
    zero_rows_from(y, rows);
    if (count_ == 0) return;  // no real row on any rank: no statistics to take
    auto* mean = static_cast<double*>(a.saved[0]);
    auto* invstd = static_cast<double*>(a.saved[1]);
    const double unbias = count_ > 1 ? count_ / (count_ - 1) : 1.0;
    for (std::int64_t c = 0; c < C; ++c) {
      const double m = sums_[static_cast<std::size_t>(c)] / count_;
      const double var = std::max(0.0, sums_[static_cast<std::size_t>(C + c)] / count_ - m * m);
      mean[c] = m;
      invstd[c] = 1.0 / std::sqrt(var + eps_);
      scale_shift(x, y, c, rows, gamma[c] * invstd[c], beta[c] - m * gamma[c] * invstd[c]);
      if (!a.update_state) continue;
      // Running statistics like PyTorch: the unbiased variance of the global batch.
      running_mean[c] = static_cast<float>((1 - momentum_) * running_mean[c] + momentum_ * m);
      running_var[c] =
          static_cast<float>((1 - momentum_) * running_var[c] + momentum_ * var * unbias);
    }
  }

  void backward(const KernelArgs& a) override {
    const float* x = a.inputs[0].f32();
    const float* y = a.output.f32();
    const float* dy_out = a.grad_output.f32();
    // The gradient before `activation: relu` (zero where the output is).
    const auto dy = [&](std::int64_t i) { return relu_ && !(y[i] > 0.0f) ? 0.0f : dy_out[i]; };
    const float* gamma = a.params[0].f32();
    const auto* mean = static_cast<const double*>(a.saved[0]);
    const auto* invstd = static_cast<const double*>(a.saved[1]);
    const std::int64_t rows = rows_used(step_values_of(a).valid_rows, batch_);
    const std::int64_t C = channels_;
    for (std::int64_t c = 0; c < C; ++c) {
      double s1 = 0, s2 = 0;
      const double m = mean[c], s = invstd[c];
      for_channel(c, rows, [&](std::int64_t i) {
        const double g = dy(i);
        s1 += g;
        s2 += g * (x[i] - m) * s;
      });
      sums_[static_cast<std::size_t>(c)] = s1;
      sums_[static_cast<std::size_t>(C + c)] = s2;
    }
    // This rank's sums are the weight and bias gradients (averaged over the
    // ranks by the gradient all-reduce, like every parameter gradient).
    if (a.grad_params.size() > 0 && a.grad_params[0])
      for (std::int64_t c = 0; c < C; ++c)
        a.grad_params[0].f32()[c] = static_cast<float>(sums_[static_cast<std::size_t>(C + c)]);
    if (a.grad_params.size() > 1 && a.grad_params[1])
      for (std::int64_t c = 0; c < C; ++c)
        a.grad_params[1].f32()[c] = static_cast<float>(sums_[static_cast<std::size_t>(c)]);
    if (a.grad_inputs.empty() || !a.grad_inputs[0]) return;  // the same on every rank
    sums_[static_cast<std::size_t>(2 * C)] = 0;
    reduce(sums_);
    float* dx = a.grad_inputs[0].f32();
    zero_rows_from(dx, rows);
    if (count_ == 0) return;  // no real row on any rank
    for (std::int64_t c = 0; c < C; ++c) {
      const double s = invstd[c];
      const auto k = static_cast<float>(gamma[c] * s);
      const auto mean_dy = static_cast<float>(sums_[static_cast<std::size_t>(c)] / count_);
      const auto mean_dy_xhat = static_cast<float>(sums_[static_cast<std::size_t>(C + c)] / count_);
      const auto m = static_cast<float>(mean[c]);
      const auto sf = static_cast<float>(s);
      for_channel(c, rows, [&](std::int64_t i) {
        const float xhat = (x[i] - m) * sf;
        dx[i] = k * (dy(i) - mean_dy - xhat * mean_dy_xhat);
      });
    }
  }

 private:
  // Calls f(i) for every element index of channel c in the first `rows` rows
  // (NCHW, or [N, C] with inner 1).
  template <typename F>
  void for_channel(std::int64_t c, std::int64_t rows, F&& f) const {
    for (std::int64_t n = 0; n < rows; ++n) {
      const std::int64_t base = (n * channels_ + c) * inner_;
      for (std::int64_t k = 0; k < inner_; ++k) f(base + k);
    }
  }
  // y = x * scale + shift (then relu) over channel c of the first `rows` rows.
  void scale_shift(const float* x, float* y, std::int64_t c, std::int64_t rows, double scale,
                   double shift) const {
    const auto a = static_cast<float>(scale), b = static_cast<float>(shift);
    for_channel(c, rows, [&](std::int64_t i) {
      const float v = x[i] * a + b;
      y[i] = relu_ && !(v > 0.0f) ? 0.0f : v;  // NaN to 0, as oneDNN's relu
    });
  }
  // Zeros rows `from`.. (padding) of an [N, C, ...] tensor.
  void zero_rows_from(float* t, std::int64_t from) const {
    std::fill(t + from * channels_ * inner_, t + batch_ * channels_ * inner_, 0.0f);
  }
  void reduce(std::vector<double>& values) {
    if (collective_ && collective_->world() > 1) collective_->all_reduce_statistics(values);
  }

  Collective* collective_;
  bool training_program_;
  std::int64_t batch_ = 0, channels_ = 0, inner_ = 1;
  double momentum_ = 0.1, eps_ = 1e-5;
  bool relu_ = false;         // activation: relu
  double count_ = 1;          // real rows x pixels per channel over every rank (the last forward)
  std::vector<double> sums_;  // per-channel sums, then the count; reduced in place
  std::string impl_;
};

}  // namespace

std::unique_ptr<Kernel> make_sync_batchnorm_kernel(const KernelContext& ctx) {
  return std::make_unique<SyncBatchNormKernel>(ctx);
}

}  // namespace trainer::cpu
