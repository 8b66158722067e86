// Pooling as own kernels: maxpool2d (argmax saved as int32, backward gathers so
// it is deterministic), avgpool2d (padding not counted) and global_avgpool.
// (cuDNN's max-pool backward needs the forward input and output, which the
// graph does not keep for pooling: it keeps only the saved indices.)
#include <string>

#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.cuh"
#include "ops/defs/def_helpers.h"

namespace trainer::cuda {
namespace {

struct Window {
  int n, c, h, w, ho, wo, kh, kw, sh, sw, ph, pw;
  bool count_pad;  // avgpool2d count_include_pad: divide by kh * kw
};

Window window_of(const KernelContext& k) {
  const std::string& op = k.op->name;
  const auto [kh, kw] = defs::hw_attr(*k.attrs, op, "kernel");
  auto [sh, sw] = defs::hw_attr(*k.attrs, op, "stride");
  const auto [ph, pw] = defs::hw_attr(*k.attrs, op, "padding");
  if (sh == 0) sh = kh;
  if (sw == 0) sw = kw;
  const Shape& x = k.inputs.at(0);
  auto i = [](std::int64_t v) { return static_cast<int>(v); };
  const bool count_pad =
      k.attrs->has("count_include_pad") && k.attrs->get_bool("count_include_pad");
  return {i(x[0]), i(x[1]), i(x[2]), i(x[3]), i(k.output[2]), i(k.output[3]), i(kh),
          i(kw),   i(sh),   i(sw),   i(ph),   i(pw),          count_pad};
}

// The output rows (or columns) whose window covers input position `pos`.
__device__ __forceinline__ void covering(int pos, int pad, int k, int s, int out, int& lo,
                                         int& hi) {
  const int first = pos + pad - k + 1;
  lo = first <= 0 ? 0 : (first + s - 1) / s;
  hi = min(out - 1, (pos + pad) / s);
}

__global__ void maxpool_forward(const float* x, float* y, int* argmax, Window g, long long total) {
  for (long long o = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; o < total;
       o += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int ow = static_cast<int>(o % g.wo), oh = static_cast<int>(o / g.wo % g.ho);
    const long long plane = o / (static_cast<long long>(g.wo) * g.ho);
    const float* xp = x + plane * g.h * g.w;
    float best = -INFINITY;
    int best_index = -1;
    bool nan_found = false;  // the first NaN in scan order wins, and ends the scan
    for (int i = 0; i < g.kh && !nan_found; ++i) {
      const int hh = oh * g.sh - g.ph + i;
      if (hh < 0 || hh >= g.h) continue;
      for (int j = 0; j < g.kw; ++j) {
        const int ww = ow * g.sw - g.pw + j;
        if (ww < 0 || ww >= g.w) continue;
        const float v = xp[hh * g.w + ww];
        if (v > best || best_index < 0 || isnan(v)) {
          best = v;
          best_index = hh * g.w + ww;
          nan_found = isnan(v);
          if (nan_found) break;
        }
      }
    }
    y[o] = best;
    argmax[o] = best_index;
  }
}

__global__ void maxpool_backward(const float* dy, const int* argmax, float* dx, Window g,
                                 long long total) {
  for (long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int w = static_cast<int>(idx % g.w), h = static_cast<int>(idx / g.w % g.h);
    const long long plane = idx / (static_cast<long long>(g.w) * g.h);
    int oh_lo, oh_hi, ow_lo, ow_hi;
    covering(h, g.ph, g.kh, g.sh, g.ho, oh_lo, oh_hi);
    covering(w, g.pw, g.kw, g.sw, g.wo, ow_lo, ow_hi);
    const long long base = plane * g.ho * g.wo;
    const int self = h * g.w + w;
    float sum = 0.0f;
    for (int oh = oh_lo; oh <= oh_hi; ++oh)
      for (int ow = ow_lo; ow <= ow_hi; ++ow) {
        const long long o = base + oh * g.wo + ow;
        if (argmax[o] == self) sum += dy[o];
      }
    dx[idx] = sum;
  }
}

__device__ __forceinline__ int avg_count(const Window& g, int oh, int ow) {
  if (g.count_pad) return g.kh * g.kw;  // padding is at most half the kernel: inside the window
  const int h0 = max(oh * g.sh - g.ph, 0), h1 = min(oh * g.sh - g.ph + g.kh, g.h);
  const int w0 = max(ow * g.sw - g.pw, 0), w1 = min(ow * g.sw - g.pw + g.kw, g.w);
  return max((h1 - h0) * (w1 - w0), 1);
}

__global__ void avgpool_forward(const float* x, float* y, Window g, long long total) {
  for (long long o = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; o < total;
       o += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int ow = static_cast<int>(o % g.wo), oh = static_cast<int>(o / g.wo % g.ho);
    const long long plane = o / (static_cast<long long>(g.wo) * g.ho);
    const float* xp = x + plane * g.h * g.w;
    float sum = 0.0f;
    for (int hh = max(oh * g.sh - g.ph, 0); hh < min(oh * g.sh - g.ph + g.kh, g.h); ++hh)
      for (int ww = max(ow * g.sw - g.pw, 0); ww < min(ow * g.sw - g.pw + g.kw, g.w); ++ww)
        sum += xp[hh * g.w + ww];
    y[o] = sum / static_cast<float>(avg_count(g, oh, ow));
  }
}

__global__ void avgpool_backward(const float* dy, float* dx, Window g, long long total) {
  for (long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int w = static_cast<int>(idx % g.w), h = static_cast<int>(idx / g.w % g.h);
    const long long plane = idx / (static_cast<long long>(g.w) * g.h);
    int oh_lo, oh_hi, ow_lo, ow_hi;
    covering(h, g.ph, g.kh, g.sh, g.ho, oh_lo, oh_hi);
    covering(w, g.pw, g.kw, g.sw, g.wo, ow_lo, ow_hi);
    const long long base = plane * g.ho * g.wo;
    float sum = 0.0f;
    for (int oh = oh_lo; oh <= oh_hi; ++oh)
      for (int ow = ow_lo; ow <= ow_hi; ++ow)
        sum += dy[base + oh * g.wo + ow] / static_cast<float>(avg_count(g, oh, ow));
    dx[idx] = sum;
  }
}

// One warp per (n, c) plane; each warp strides over planes, so a grid capped
// by grid_for still covers them all.
__global__ void global_avgpool_forward(const float* x, float* y, long long planes, int hw) {
  const int lane = threadIdx.x & 31;
  for (long long plane = first_warp_row(); plane < planes; plane += warp_row_stride()) {
    const float* xp = x + plane * hw;
    float sum = 0.0f;
    for (int i = lane; i < hw; i += 32) sum += xp[i];
    for (int o = 16; o > 0; o /= 2) sum += __shfl_down_sync(0xffffffffu, sum, o);
    if (lane == 0) y[plane] = sum / static_cast<float>(hw);
  }
}

__global__ void global_avgpool_backward(const float* dy, float* dx, long long total, int hw) {
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    dx[i] = dy[i / hw] / static_cast<float>(hw);
}

class MaxPoolKernel final : public Kernel {
 public:
  MaxPoolKernel(const KernelContext& k, CudaContext& ctx)
      : ctx_(ctx), g_(window_of(k)), out_(numel(k.output)), in_(numel(k.inputs.at(0))) {}
  std::vector<std::size_t> saved_bytes() const override {
    return {static_cast<std::size_t>(out_) * sizeof(int)};
  }
  void forward(const KernelArgs& a) override {
    if (out_ == 0) return;
    maxpool_forward<<<grid_for(out_), kBlock, 0, ctx_.compute.get()>>>(
        a.inputs[0].f32(), a.output.f32(), static_cast<int*>(a.saved.at(0)), g_, out_);
    check_launch("maxpool_forward");
  }
  void backward(const KernelArgs& a) override {
    if (in_ == 0 || a.grad_inputs.empty() || !a.grad_inputs[0]) return;
    maxpool_backward<<<grid_for(in_), kBlock, 0, ctx_.compute.get()>>>(
        a.grad_output.f32(), static_cast<const int*>(a.saved.at(0)), a.grad_inputs[0].f32(), g_,
        in_);
    check_launch("maxpool_backward");
  }
  std::string implementation() const override { return "cuda:maxpool_gather"; }

 private:
  CudaContext& ctx_;
  Window g_;
  std::int64_t out_, in_;
};

class AvgPoolKernel final : public Kernel {
 public:
  AvgPoolKernel(const KernelContext& k, CudaContext& ctx)
      : ctx_(ctx), g_(window_of(k)), out_(numel(k.output)), in_(numel(k.inputs.at(0))) {}
  void forward(const KernelArgs& a) override {
    if (out_ == 0) return;
    avgpool_forward<<<grid_for(out_), kBlock, 0, ctx_.compute.get()>>>(a.inputs[0].f32(),
                                                                       a.output.f32(), g_, out_);
    check_launch("avgpool_forward");
  }
  void backward(const KernelArgs& a) override {
    if (in_ == 0 || a.grad_inputs.empty() || !a.grad_inputs[0]) return;
    avgpool_backward<<<grid_for(in_), kBlock, 0, ctx_.compute.get()>>>(
        a.grad_output.f32(), a.grad_inputs[0].f32(), g_, in_);
    check_launch("avgpool_backward");
  }
  std::string implementation() const override { return "cuda:avgpool_gather"; }

 private:
  CudaContext& ctx_;
  Window g_;
  std::int64_t out_, in_;
};

class GlobalAvgPoolKernel final : public Kernel {
 public:
  GlobalAvgPoolKernel(const KernelContext& k, CudaContext& ctx)
      : ctx_(ctx),
        planes_(k.inputs.at(0)[0] * k.inputs.at(0)[1]),
        hw_(static_cast<int>(k.inputs.at(0)[2] * k.inputs.at(0)[3])) {}
  void forward(const KernelArgs& a) override {
    if (planes_ == 0) return;
    global_avgpool_forward<<<grid_for(planes_ * 32), kBlock, 0, ctx_.compute.get()>>>(
        a.inputs[0].f32(), a.output.f32(), planes_, hw_);
    check_launch("global_avgpool_forward");
  }
  void backward(const KernelArgs& a) override {
    const std::int64_t total = planes_ * hw_;
    if (total == 0 || a.grad_inputs.empty() || !a.grad_inputs[0]) return;
    global_avgpool_backward<<<grid_for(total), kBlock, 0, ctx_.compute.get()>>>(
        a.grad_output.f32(), a.grad_inputs[0].f32(), total, hw_);
    check_launch("global_avgpool_backward");
  }
  std::string implementation() const override { return "cuda:warp_reduce"; }

 private:
  CudaContext& ctx_;
  std::int64_t planes_;
  int hw_;
};

}  // namespace

void register_pool_kernels(Backend& backend, CudaContext& ctx) {
  backend.add_kernel("maxpool2d", [&ctx](const KernelContext& k) {
    return std::make_unique<MaxPoolKernel>(k, ctx);
  });
  backend.add_kernel("avgpool2d", [&ctx](const KernelContext& k) {
    return std::make_unique<AvgPoolKernel>(k, ctx);
  });
  backend.add_kernel("global_avgpool", [&ctx](const KernelContext& k) {
    return std::make_unique<GlobalAvgPoolKernel>(k, ctx);
  });
}

}  // namespace trainer::cuda
