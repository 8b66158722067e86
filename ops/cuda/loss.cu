// Losses as own kernels, reduced in a fixed order (deterministic):
// cross_entropy (label smoothing, ignore_index, only the first valid_rows rows;
// mean over the counted rows; a label outside [0, K) makes the loss NaN so the
// non-finite check stops the run) and mse (mean over the first valid_rows rows).
// The valid rows are read on the device (StepValues), so a recorded step
// counts the rows of the batch it is replayed on.
// The backward scales by grad_output[0] (loss scale / accumulation).
#include <string>

#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.cuh"

namespace trainer::cuda {
namespace {

__device__ float block_reduce_sum(float v) {
  __shared__ float shared[32];
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) shared[threadIdx.x / 32] = v;
  __syncthreads();
  v = threadIdx.x < blockDim.x / 32 ? shared[threadIdx.x] : 0.0f;
  if (threadIdx.x < 32)
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

struct CeShape {
  int rows, classes;
  long long ignore_index;
  float smoothing;
};

// How many rows the loss counts: the step's valid rows, read on the device.
__device__ __forceinline__ long long rows_counted(const StepValues* step, long long rows) {
  return rows_used(step ? step->valid_rows : -1, rows);
}

__device__ __forceinline__ bool counted(const CeShape& s, int valid, const long long* labels,
                                        int r) {
  return r < valid && labels[r] != s.ignore_index;
}

// row_loss[r] and row_count[r] (1 when counted) of one row, by one warp.
__device__ void ce_row(const float* logits, const long long* labels, const CeShape& s,
                       const StepValues* step, float* row_loss, float* row_count, int r) {
  const int lane = threadIdx.x & 31;
  if (!counted(s, static_cast<int>(rows_counted(step, s.rows)), labels, r)) {
    if (lane == 0) row_loss[r] = 0.0f, row_count[r] = 0.0f;
    return;
  }
  const float* x = logits + static_cast<long long>(r) * s.classes;
  float m = -INFINITY;
  for (int k = lane; k < s.classes; k += 32) m = fmaxf(m, x[k]);
  m = warp_max(m);
  // Relative to the largest logit: large logits (1e20) would otherwise lose
  // log(sum exp) next to them and the loss with it.
  float sum_exp = 0.0f, sum_below = 0.0f;
  for (int k = lane; k < s.classes; k += 32) sum_exp += expf(x[k] - m), sum_below += m - x[k];
  sum_exp = warp_sum(sum_exp);
  sum_below = warp_sum(sum_below);
  if (lane == 0) {
    const long long y = labels[r];
    const float log_sum = logf(sum_exp);
    float loss = NAN;
    if (y >= 0 && y < s.classes) {
      const float nll = log_sum + (m - x[y]);
      const float uniform = log_sum + sum_below / static_cast<float>(s.classes);  // mean of -log p
      loss = (1.0f - s.smoothing) * nll + s.smoothing * uniform;
    }
    row_loss[r] = loss;
    row_count[r] = 1.0f;
  }
}

// One warp per row, striding over the rows.
__global__ void ce_rows(const float* logits, const long long* labels, CeShape s,
                        const StepValues* step, float* row_loss, float* row_count) {
  for (long long r = first_warp_row(); r < s.rows; r += warp_row_stride())
    ce_row(logits, labels, s, step, row_loss, row_count, static_cast<int>(r));
}

// One block: out[0] = sum(values) / sum(counts) (0 when nothing is counted).
__global__ void mean_of(const float* values, const float* counts, int n, float* out) {
  float v = 0.0f, c = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    v += values[i];
    c += counts[i];
  }
  v = block_reduce_sum(v);
  c = block_reduce_sum(c);
  if (threadIdx.x == 0) out[0] = c > 0.0f ? v / c : 0.0f;
}

__global__ void ce_count(const long long* labels, CeShape s, const StepValues* step, float* count) {
  const int valid = static_cast<int>(rows_counted(step, s.rows));
  float c = 0.0f;
  for (int r = threadIdx.x; r < s.rows; r += blockDim.x)
    c += counted(s, valid, labels, r) ? 1.0f : 0.0f;
  c = block_reduce_sum(c);
  if (threadIdx.x == 0) count[0] = c;
}

// The gradient of one row, by one warp.
__device__ void ce_backward_row(const float* logits, const long long* labels, const CeShape& s,
                                const StepValues* step, const float* count,
                                const float* grad_output, float* dx, int r) {
  const int lane = threadIdx.x & 31;
  float* d = dx + static_cast<long long>(r) * s.classes;
  if (!counted(s, static_cast<int>(rows_counted(step, s.rows)), labels, r) || count[0] <= 0.0f) {
    for (int k = lane; k < s.classes; k += 32) d[k] = 0.0f;
    return;
  }
  const float* x = logits + static_cast<long long>(r) * s.classes;
  float m = -INFINITY;
  for (int k = lane; k < s.classes; k += 32) m = fmaxf(m, x[k]);
  m = warp_max(m);
  float sum_exp = 0.0f;
  for (int k = lane; k < s.classes; k += 32) sum_exp += expf(x[k] - m);
  sum_exp = warp_sum(sum_exp);
  const float scale = grad_output[0] / count[0];
  const long long y = labels[r];
  if (y < 0 || y >= s.classes) {  // the forward's loss is NaN: so is the gradient, not silent
    for (int k = lane; k < s.classes; k += 32) d[k] = NAN;
    return;
  }
  const float off = s.smoothing / static_cast<float>(s.classes);
  for (int k = lane; k < s.classes; k += 32) {
    const float target = (k == y ? 1.0f - s.smoothing : 0.0f) + off;
    d[k] = (expf(x[k] - m) / sum_exp - target) * scale;
  }
}

// One warp per row, striding over the rows.
__global__ void ce_backward(const float* logits, const long long* labels, CeShape s,
                            const StepValues* step, const float* count, const float* grad_output,
                            float* dx) {
  for (long long r = first_warp_row(); r < s.rows; r += warp_row_stride())
    ce_backward_row(logits, labels, s, step, count, grad_output, dx, static_cast<int>(r));
}

class CrossEntropyKernel final : public Kernel {
 public:
  CrossEntropyKernel(const KernelContext& k, CudaContext& ctx) : ctx_(ctx) {
    s_.rows = static_cast<int>(k.inputs.at(0)[0]);
    s_.classes = static_cast<int>(k.inputs.at(0)[1]);
    s_.ignore_index = k.attrs->get_int("ignore_index");
    s_.smoothing = static_cast<float>(k.attrs->get_number("label_smoothing"));
  }
  std::size_t workspace_bytes() const override {
    return (2 * static_cast<std::size_t>(s_.rows) + 1) * sizeof(float);
  }
  void forward(const KernelArgs& a) override {
    const CeShape& s = s_;
    float* row_loss = static_cast<float*>(a.workspace);
    float* row_count = row_loss + s.rows;
    if (s.rows > 0) {
      ce_rows<<<grid_for(static_cast<std::int64_t>(s.rows) * 32), kBlock, 0, ctx_.compute.get()>>>(
          a.inputs[0].f32(), static_cast<const long long*>(a.inputs[1].data), s, a.step, row_loss,
          row_count);
      check_launch("ce_rows");
    }
    mean_of<<<1, 1024, 0, ctx_.compute.get()>>>(row_loss, row_count, s.rows, a.output.f32());
    check_launch("mean_of");
  }
  void backward(const KernelArgs& a) override {
    if (a.grad_inputs.empty() || !a.grad_inputs[0] || s_.rows == 0) return;
    const CeShape& s = s_;
    float* count = static_cast<float*>(a.workspace);
    const auto* labels = static_cast<const long long*>(a.inputs[1].data);
    ce_count<<<1, 1024, 0, ctx_.compute.get()>>>(labels, s, a.step, count);
    check_launch("ce_count");
    ce_backward<<<grid_for(static_cast<std::int64_t>(s.rows) * 32), kBlock, 0,
                  ctx_.compute.get()>>>(a.inputs[0].f32(), labels, s, a.step, count,
                                        a.grad_output.f32(), a.grad_inputs[0].f32());
    check_launch("ce_backward");
  }
  std::string implementation() const override { return "cuda:softmax_ce"; }

 private:
  CudaContext& ctx_;
  CeShape s_{};
};

constexpr int kMseBlocks = 256;

// Elements of the counted rows (rows x per_row in all).
__device__ __forceinline__ long long elements_counted(const StepValues* step, long long rows,
                                                      long long per_row) {
  return rows_counted(step, rows) * per_row;
}

// partials[b]: block b's sum of squared differences; counts[b]: the element
// count in block 0, zero elsewhere (so mean_of divides by it).
__global__ void mse_partials(const float* p, const float* t, long long rows, long long per_row,
                             const StepValues* step, float* partials, float* counts) {
  const long long n = elements_counted(step, rows, per_row);
  float acc = 0.0f;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const float d = p[i] - t[i];
    acc += d * d;
  }
  acc = block_reduce_sum(acc);
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = acc;
    counts[blockIdx.x] = blockIdx.x == 0 ? static_cast<float>(n) : 0.0f;
  }
}

__global__ void mse_backward(const float* p, const float* t, long long rows, long long per_row,
                             const StepValues* step, const float* grad_output, float* dp,
                             float* dt) {
  const long long n = rows * per_row;
  const long long used = elements_counted(step, rows, per_row);
  const float scale = used > 0 ? 2.0f * grad_output[0] / static_cast<float>(used) : 0.0f;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const float g = i < used ? (p[i] - t[i]) * scale : 0.0f;
    if (dp) dp[i] = g;
    if (dt) dt[i] = -g;
  }
}

class MseKernel final : public Kernel {
 public:
  MseKernel(const KernelContext& k, CudaContext& ctx)
      : ctx_(ctx), rows_(k.inputs.at(0)[0]), n_(numel(k.inputs.at(0))) {}
  std::size_t workspace_bytes() const override { return 2 * kMseBlocks * sizeof(float); }
  void forward(const KernelArgs& a) override {
    float* partials = static_cast<float*>(a.workspace);
    float* counts = partials + kMseBlocks;
    mse_partials<<<kMseBlocks, kBlock, 0, ctx_.compute.get()>>>(
        a.inputs[0].f32(), a.inputs[1].f32(), rows_, per_row(), a.step, partials, counts);
    check_launch("mse_partials");
    mean_of<<<1, kMseBlocks, 0, ctx_.compute.get()>>>(partials, counts, kMseBlocks, a.output.f32());
    check_launch("mean_of");
  }
  void backward(const KernelArgs& a) override {
    float* dp = a.grad_inputs.size() > 0 && a.grad_inputs[0] ? a.grad_inputs[0].f32() : nullptr;
    float* dt = a.grad_inputs.size() > 1 && a.grad_inputs[1] ? a.grad_inputs[1].f32() : nullptr;
    if ((!dp && !dt) || n_ == 0) return;
    mse_backward<<<grid_for(n_), kBlock, 0, ctx_.compute.get()>>>(
        a.inputs[0].f32(), a.inputs[1].f32(), rows_, per_row(), a.step, a.grad_output.f32(), dp,
        dt);
    check_launch("mse_backward");
  }
  std::string implementation() const override { return "cuda:mse"; }

 private:
  long long per_row() const { return rows_ ? static_cast<long long>(n_ / rows_) : 0; }
  CudaContext& ctx_;
  std::int64_t rows_, n_;
};

}  // namespace

void register_loss_kernels(Backend& backend, CudaContext& ctx) {
  backend.add_kernel("cross_entropy", [&ctx](const KernelContext& k) {
    return std::make_unique<CrossEntropyKernel>(k, ctx);
  });
  backend.add_kernel(
      "mse", [&ctx](const KernelContext& k) { return std::make_unique<MseKernel>(k, ctx); });
}

}  // namespace trainer::cuda
