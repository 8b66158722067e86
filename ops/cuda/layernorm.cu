// layernorm over the last dimension as own kernels: one warp per row for the
// statistics and the input gradient (each warp strides over rows, so a grid
// capped by grid_for still covers them all). The weight and bias gradients
// sum over rows in two passes without atomics, so in a fixed order
// (deterministic): one thread per column and chunk of rows writes the chunk's
// sums to the workspace, then one thread per column adds the chunks in order.
#include <algorithm>
#include <string>

#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.cuh"

namespace trainer::cuda {
namespace {

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void layernorm_forward(const float* x, const float* w, const float* b, float* y,
                                  float* mean_out, float* rstd_out, long long rows, int d,
                                  float eps) {
  const int lane = threadIdx.x & 31;
  for (long long r = first_warp_row(); r < rows; r += warp_row_stride()) {
    const float* xr = x + r * d;
    float sum = 0.0f;
    for (int i = lane; i < d; i += 32) sum += xr[i];
    const float mean = warp_sum(sum) / static_cast<float>(d);
    float sq = 0.0f;
    for (int i = lane; i < d; i += 32) sq += (xr[i] - mean) * (xr[i] - mean);
    const float rstd = rsqrtf(warp_sum(sq) / static_cast<float>(d) + eps);
    float* yr = y + r * d;
    for (int i = lane; i < d; i += 32) yr[i] = (xr[i] - mean) * rstd * w[i] + b[i];
    if (lane == 0) mean_out[r] = mean, rstd_out[r] = rstd;
  }
}

__global__ void layernorm_backward_input(const float* x, const float* w, const float* dy,
                                         const float* mean, const float* rstd, float* dx,
                                         long long rows, int d) {
  const int lane = threadIdx.x & 31;
  for (long long r = first_warp_row(); r < rows; r += warp_row_stride()) {
    const float* xr = x + r * d;
    const float* g = dy + r * d;
    const float m = mean[r], s = rstd[r];
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int i = lane; i < d; i += 32) {
      const float gw = g[i] * w[i];
      sum_g += gw;
      sum_gx += gw * (xr[i] - m) * s;
    }
    sum_g = warp_sum(sum_g) / static_cast<float>(d);
    sum_gx = warp_sum(sum_gx) / static_cast<float>(d);
    float* out = dx + r * d;
    for (int i = lane; i < d; i += 32) {
      const float xhat = (xr[i] - m) * s;
      out[i] = s * (g[i] * w[i] - sum_g - xhat * sum_gx);
    }
  }
}

// Column i's sums over the rows of chunk blockIdx.y into partial_w/b[chunk * d + i].
__global__ void layernorm_param_partials(const float* x, const float* dy, const float* mean,
                                         const float* rstd, float* partial_w, float* partial_b,
                                         long long rows, int d, long long rows_per_chunk) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= d) return;
  const long long first = static_cast<long long>(blockIdx.y) * rows_per_chunk;
  const long long end = min(first + rows_per_chunk, rows);
  float gw = 0.0f, gb = 0.0f;
  for (long long r = first; r < end; ++r) {
    const float g = dy[r * d + i];
    gw += g * (x[r * d + i] - mean[r]) * rstd[r];
    gb += g;
  }
  partial_w[blockIdx.y * static_cast<long long>(d) + i] = gw;
  partial_b[blockIdx.y * static_cast<long long>(d) + i] = gb;
}

// dw[i], db[i] (either may be null) = the chunks' sums of column i, in chunk order.
__global__ void layernorm_param_sums(const float* partial_w, const float* partial_b, int chunks,
                                     int d, float* dw, float* db) {
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < d;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    float gw = 0.0f, gb = 0.0f;
    for (int c = 0; c < chunks; ++c) {
      gw += partial_w[static_cast<long long>(c) * d + i];
      gb += partial_b[static_cast<long long>(c) * d + i];
    }
    if (dw) dw[i] = gw;
    if (db) db[i] = gb;
  }
}

class LayerNormKernel final : public Kernel {
 public:
  LayerNormKernel(const KernelContext& k, CudaContext& ctx)
      : ctx_(ctx),
        d_(static_cast<int>(k.output.back())),
        rows_(d_ ? numel(k.output) / d_ : 0),
        eps_(static_cast<float>(k.attrs->get_number("eps"))),
        training_(k.training) {
    // Chunks of at least 256 rows, and at most 65535 of them (the grid's y limit).
    rows_per_chunk_ = std::max<std::int64_t>(256, (rows_ + 65534) / 65535);
    chunks_ = static_cast<int>(
        std::max<std::int64_t>(1, (rows_ + rows_per_chunk_ - 1) / rows_per_chunk_));
  }
  // The weight and bias gradients' partial sums, one row of d per chunk each.
  std::size_t workspace_bytes() const override {
    return training_ ? 2 * static_cast<std::size_t>(chunks_) * static_cast<std::size_t>(d_) *
                           sizeof(float)
                     : 0;
  }
  std::vector<std::size_t> saved_bytes() const override {
    return {static_cast<std::size_t>(rows_) * sizeof(float),
            static_cast<std::size_t>(rows_) * sizeof(float)};
  }
  void forward(const KernelArgs& a) override {
    if (rows_ == 0) return;
    layernorm_forward<<<grid_for(rows_ * 32), kBlock, 0, ctx_.compute.get()>>>(
        a.inputs[0].f32(), a.params[0].f32(), a.params[1].f32(), a.output.f32(),
        static_cast<float*>(a.saved.at(0)), static_cast<float*>(a.saved.at(1)), rows_, d_, eps_);
    check_launch("layernorm_forward");
  }
  void backward(const KernelArgs& a) override {
    if (rows_ == 0) return;
    const auto* mean = static_cast<const float*>(a.saved.at(0));
    const auto* rstd = static_cast<const float*>(a.saved.at(1));
    if (!a.grad_inputs.empty() && a.grad_inputs[0]) {
      layernorm_backward_input<<<grid_for(rows_ * 32), kBlock, 0, ctx_.compute.get()>>>(
          a.inputs[0].f32(), a.params[0].f32(), a.grad_output.f32(), mean, rstd,
          a.grad_inputs[0].f32(), rows_, d_);
      check_launch("layernorm_backward_input");
    }
    float* dw = a.grad_params.size() > 0 && a.grad_params[0] ? a.grad_params[0].f32() : nullptr;
    float* db = a.grad_params.size() > 1 && a.grad_params[1] ? a.grad_params[1].f32() : nullptr;
    if (dw || db) {
      float* partial_w = static_cast<float*>(a.workspace);
      float* partial_b = partial_w + static_cast<std::size_t>(chunks_) * d_;
      const dim3 grid((static_cast<unsigned>(d_) + kBlock - 1) / kBlock,
                      static_cast<unsigned>(chunks_));
      layernorm_param_partials<<<grid, kBlock, 0, ctx_.compute.get()>>>(
          a.inputs[0].f32(), a.grad_output.f32(), mean, rstd, partial_w, partial_b, rows_, d_,
          rows_per_chunk_);
      check_launch("layernorm_param_partials");
      layernorm_param_sums<<<grid_for(d_), kBlock, 0, ctx_.compute.get()>>>(partial_w, partial_b,
                                                                            chunks_, d_, dw, db);
      check_launch("layernorm_param_sums");
    }
  }
  std::string implementation() const override { return "cuda:warp_per_row"; }

 private:
  CudaContext& ctx_;
  int d_;
  std::int64_t rows_;
  float eps_;
  bool training_;  // a program with backward: it needs the workspace
  std::int64_t rows_per_chunk_ = 256;
  int chunks_ = 1;
};

}  // namespace

void register_layernorm_kernels(Backend& backend, CudaContext& ctx) {
  backend.add_kernel("layernorm", [&ctx](const KernelContext& k) {
    return std::make_unique<LayerNormKernel>(k, ctx);
  });
}

}  // namespace trainer::cuda
