// batchnorm over the real rows of a batch, as own kernels, for training that
// meets short batches (data.drop_last: false) or synchronises its statistics
// over the ranks of a job (sync: true, SyncBN). The batch statistics are those
// of the first valid_rows rows (StepValues, read on the device, so a recorded
// step follows the batch it is replayed on); the padding rows' outputs and
// input gradients are zero; with no real row the outputs and gradients are
// zero and the running statistics stay as they are. The arithmetic is the CPU
// kernel's (ops/cpu/batchnorm_sync.cpp with one rank): per-channel sums in
// double (forward: x and x^2; backward: g and g * xhat, with g zero where a
// fused relu's output is), the biased variance for the normalisation, the
// unbiased one (by the real count) for the running variance, the mean and
// inverse std saved in double. A fixed number of blocks sums each channel and
// their partial sums are added in order: deterministic. Eval (or a forward
// with training false) normalises every row with the running statistics.
// SyncBN: each rank's per-channel sums and count are added over the ranks
// (Collective::all_reduce_device_statistics: NCCL on the compute stream, so a
// recorded step holds it) before the statistics are taken, and the backward's
// sums likewise before the input gradient: every rank normalises with the
// global batch's statistics and gets the global batch's input gradient; the
// weight and bias gradients stay the rank's own sums (the gradient all-reduce
// averages them), as on the CPU.
#include "ops/cuda/batchnorm_rows.h"

#include <algorithm>
#include <string>

#include "ops/collective.h"
#include "ops/cuda/launch.cuh"

namespace trainer::cuda {
namespace {

// An activation [N, C, inner] (NCHW, or [N, C] with inner 1).
struct Layout {
  long long rows, channels, inner;
};

// The coefficients of one channel's input gradient:
// dx = k * (g - mean_g - xhat * mean_g_xhat), xhat = (x - mean) * invstd.
struct InputGradient {
  float k, mean_g, mean_g_xhat, mean, invstd;
};

constexpr int kSumThreads = 256;         // threads of a block of channel_partials
constexpr int kMaxSplits = 1024;         // blocks per channel, at most
constexpr long long kGridBlocks = 1024;  // what the splits aim at over all channels

__device__ __forceinline__ long long real_rows(const StepValues* step, long long rows) {
  return step ? rows_used(step->valid_rows, rows) : rows;
}

// Sums a and b over the block into thread 0's (blockDim a multiple of 32).
__device__ void block_sum(double& a, double& b) {
  __shared__ double shared[2][32];
  for (int o = 16; o > 0; o /= 2) {
    a += __shfl_down_sync(0xffffffffu, a, o);
    b += __shfl_down_sync(0xffffffffu, b, o);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  if (lane == 0) shared[0][warp] = a, shared[1][warp] = b;
  __syncthreads();
  if (warp != 0) return;
  const int warps = blockDim.x / 32;
  a = lane < warps ? shared[0][lane] : 0.0;
  b = lane < warps ? shared[1][lane] : 0.0;
  for (int o = 16; o > 0; o /= 2) {
    a += __shfl_down_sync(0xffffffffu, a, o);
    b += __shfl_down_sync(0xffffffffu, b, o);
  }
}

// x and x^2 of element i.
struct ValueAndSquare {
  const float* x;
  __device__ double2 operator()(long long i, long long) const {
    const double v = x[i];
    return make_double2(v, v * v);
  }
};

// g (the incoming gradient, zero where a fused relu's output is) and g * xhat.
struct GradientAndProduct {
  const float* x;
  const float* y;
  const float* dy;
  const double* mean;
  const double* invstd;
  bool relu;
  __device__ float gradient(long long i) const { return relu && !(y[i] > 0.0f) ? 0.0f : dy[i]; }
  __device__ double2 operator()(long long i, long long c) const {
    const double g = gradient(i);
    return make_double2(g, g * (x[i] - mean[c]) * invstd[c]);
  }
};

// Block (c, s) sums pair(i, c) over its share of channel c's values in the
// real rows into partial[c * splits + s]. Consecutive threads take
// consecutive values of a row: coalesced.
template <typename Pair>
__global__ void channel_partials(Layout l, const StepValues* step, Pair pair, double2* partial) {
  const long long c = blockIdx.x;
  const long long count = real_rows(step, l.rows) * l.inner;
  double s1 = 0.0, s2 = 0.0;
  for (long long j = static_cast<long long>(blockIdx.y) * blockDim.x + threadIdx.x; j < count;
       j += static_cast<long long>(gridDim.y) * blockDim.x) {
    const long long n = j / l.inner;
    const double2 v = pair((n * l.channels + c) * l.inner + (j - n * l.inner), c);
    s1 += v.x;
    s2 += v.y;
  }
  block_sum(s1, s2);
  if (threadIdx.x == 0) partial[c * gridDim.y + blockIdx.y] = make_double2(s1, s2);
}

// The per-channel sums of a batch: sums[c] and sums[C + c] for channel c,
// sums[2C] the real values per channel (real rows x inner). A synchronised
// batchnorm adds every rank's buffer together.
__host__ __device__ constexpr long long sums_length(long long channels) {
  return 2 * channels + 1;
}

// Per channel: its partials added in order into `sums`, thread 0 writing the
// count. Where wanted, the two sums also go to `first` and `second` as floats
// (the backward's bias and weight gradients: this rank's own sums).
__global__ void total_partials(const double2* partial, int splits, Layout l, const StepValues* step,
                               double* sums, float* first, float* second) {
  const long long c = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c == 0) sums[2 * l.channels] = static_cast<double>(real_rows(step, l.rows) * l.inner);
  if (c >= l.channels) return;
  double s1 = 0.0, s2 = 0.0;
  for (int s = 0; s < splits; ++s) {
    const double2 p = partial[c * splits + s];
    s1 += p.x;
    s2 += p.y;
  }
  sums[c] = s1;
  sums[l.channels + c] = s2;
  if (first) first[c] = static_cast<float>(s1);
  if (second) second[c] = static_cast<float>(s2);
}

// Where the forward's statistics go. Null running statistics: leave them (a
// recomputed forward).
struct Statistics {
  double* mean;
  double* invstd;
  float* scale;  // gamma * invstd
  float* shift;  // beta - mean * gamma * invstd
  float* running_mean;
  float* running_var;
};

__global__ void finalize_statistics(const double* sums, Layout l, const float* gamma,
                                    const float* beta, double eps, double momentum, Statistics o) {
  const long long c = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= l.channels) return;
  const double2 sum = make_double2(sums[c], sums[l.channels + c]);
  const double count = sums[2 * l.channels];
  if (count == 0) {  // no real row: nothing to normalise, no statistics to take
    o.mean[c] = 0.0, o.invstd[c] = 0.0, o.scale[c] = 0.0f, o.shift[c] = 0.0f;
    return;
  }
  const double m = sum.x / count;
  const double var = fmax(0.0, sum.y / count - m * m);
  const double invstd = 1.0 / sqrt(var + eps);
  o.mean[c] = m;
  o.invstd[c] = invstd;
  o.scale[c] = static_cast<float>(gamma[c] * invstd);
  o.shift[c] = static_cast<float>(beta[c] - m * gamma[c] * invstd);
  if (!o.running_mean) return;
  // Like PyTorch: the unbiased variance of the batch's real values.
  const double unbias = count > 1 ? count / (count - 1) : 1.0;
  o.running_mean[c] = static_cast<float>((1 - momentum) * o.running_mean[c] + momentum * m);
  o.running_var[c] =
      static_cast<float>((1 - momentum) * o.running_var[c] + momentum * var * unbias);
}

__global__ void running_scale_shift(long long channels, const float* gamma, const float* beta,
                                    const float* running_mean, const float* running_var, double eps,
                                    float* scale, float* shift) {
  const long long c = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  const double invstd = 1.0 / sqrt(static_cast<double>(running_var[c]) + eps);
  scale[c] = static_cast<float>(gamma[c] * invstd);
  shift[c] = static_cast<float>(beta[c] - running_mean[c] * gamma[c] * invstd);
}

// out[i] = value(i, channel of i) over the real rows (null step: all rows);
// zero in the padding rows, which come after them.
template <typename Value>
__device__ void write_rows(Layout l, const StepValues* step, float* out, Value value) {
  const long long real = real_rows(step, l.rows) * l.channels * l.inner;
  const long long total = l.rows * l.channels * l.inner;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    out[i] = i < real ? value(i, i / l.inner % l.channels) : 0.0f;
}

// y = x * scale + shift, then relu (NaN to 0, as oneDNN's relu makes it on the CPU).
__global__ void normalize(const float* x, float* y, Layout l, const StepValues* step,
                          const float* scale, const float* shift, bool relu) {
  write_rows(l, step, y, [&](long long i, long long c) {
    const float v = x[i] * scale[c] + shift[c];
    return relu && !(v > 0.0f) ? 0.0f : v;
  });
}

// The coefficients of the input gradient, from the sums of g and g * xhat.
__global__ void finalize_gradients(const double* sums, Layout l, const float* gamma,
                                   const double* mean, const double* invstd,
                                   InputGradient* coefficients) {
  const long long c = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= l.channels) return;
  const double2 sum = make_double2(sums[c], sums[l.channels + c]);
  const double count = sums[2 * l.channels];
  if (count == 0) {  // no real row: no input gradient to write but zeros
    coefficients[c] = InputGradient{0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    return;
  }
  coefficients[c] =
      InputGradient{static_cast<float>(gamma[c] * invstd[c]), static_cast<float>(sum.x / count),
                    static_cast<float>(sum.y / count), static_cast<float>(mean[c]),
                    static_cast<float>(invstd[c])};
}

__global__ void input_gradient(GradientAndProduct g, float* dx, Layout l, const StepValues* step,
                               const InputGradient* coefficients) {
  write_rows(l, step, dx, [&](long long i, long long c) {
    const InputGradient q = coefficients[c];
    const float xhat = (g.x[i] - q.mean) * q.invstd;
    return q.k * (g.gradient(i) - q.mean_g - xhat * q.mean_g_xhat);
  });
}

unsigned blocks_for_channels(long long channels) {
  return static_cast<unsigned>((channels + kBlock - 1) / kBlock);
}

std::size_t round_up_256(std::size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

class RealRowsBatchNormKernel final : public Kernel {
 public:
  RealRowsBatchNormKernel(const KernelContext& k, CudaContext& ctx, Collective* ranks)
      : ctx_(ctx),
        ranks_(ranks && ranks->world() > 1 ? ranks : nullptr),
        layout_{k.inputs[0][0], k.inputs[0][1],
                k.inputs[0][0] * k.inputs[0][1] == 0
                    ? 1
                    : numel(k.inputs[0]) / (k.inputs[0][0] * k.inputs[0][1])},
        momentum_(k.attrs->get_number("momentum")),
        eps_(k.attrs->get_number("eps")),
        relu_(epilogue_of(*k.attrs) == Epilogue::relu) {
    // Enough blocks over all channels to fill a large GPU, none with fewer
    // than four values per thread in a full batch.
    const long long per_channel = layout_.rows * layout_.inner;
    const long long by_work = std::max(1LL, per_channel / (4LL * kSumThreads));
    const long long by_grid = std::max(1LL, kGridBlocks / std::max(1LL, layout_.channels));
    splits_ = static_cast<int>(std::min({by_work, by_grid, static_cast<long long>(kMaxSplits)}));
  }

  // The batch mean and inverse std (double), forward to backward.
  std::vector<std::size_t> saved_bytes() const override {
    const auto bytes = static_cast<std::size_t>(layout_.channels) * sizeof(double);
    return {bytes, bytes};
  }
  // The partial sums, the channels' sums (sums_length), then per channel the
  // scale and shift (forward) or the input gradient's coefficients (backward).
  std::size_t workspace_bytes() const override {
    return partials_bytes() + sums_bytes() +
           static_cast<std::size_t>(layout_.channels) * sizeof(InputGradient);
  }

  void forward(const KernelArgs& a) override {
    cudaStream_t stream = ctx_.compute.get();
    const float* x = a.inputs[0].f32();
    float* y = a.output.f32();
    const float* gamma = a.params[0].f32();
    const float* beta = a.params[1].f32();
    float* const scale = per_channel(a);
    float* const shift = scale + layout_.channels;
    const long long total = layout_.rows * layout_.channels * layout_.inner;
    if (total == 0) return;  // alike on every rank
    if (!a.training) {
      running_scale_shift<<<blocks_for_channels(layout_.channels), kBlock, 0, stream>>>(
          layout_.channels, gamma, beta, a.params[2].f32(), a.params[3].f32(), eps_, scale, shift);
      check_launch("running_scale_shift");
      normalize<<<grid_for(total), kBlock, 0, stream>>>(x, y, layout_, nullptr, scale, shift,
                                                        relu_);
      check_launch("batchnorm normalize");
      return;
    }
    double* const sums = channel_sums(a, ValueAndSquare{x}, nullptr, nullptr, true);
    const Statistics statistics{static_cast<double*>(a.saved.at(0)),
                                static_cast<double*>(a.saved.at(1)),
                                scale,
                                shift,
                                a.update_state ? a.params[2].f32() : nullptr,
                                a.update_state ? a.params[3].f32() : nullptr};
    finalize_statistics<<<blocks_for_channels(layout_.channels), kBlock, 0, stream>>>(
        sums, layout_, gamma, beta, eps_, momentum_, statistics);
    check_launch("batchnorm finalize_statistics");
    normalize<<<grid_for(total), kBlock, 0, stream>>>(x, y, layout_, a.step, scale, shift, relu_);
    check_launch("batchnorm normalize");
  }

  void backward(const KernelArgs& a) override {
    cudaStream_t stream = ctx_.compute.get();
    const long long total = layout_.rows * layout_.channels * layout_.inner;
    const GradientAndProduct g{a.inputs[0].f32(),
                               a.output.f32(),
                               a.grad_output.f32(),
                               static_cast<const double*>(a.saved.at(0)),
                               static_cast<const double*>(a.saved.at(1)),
                               relu_};
    float* dgamma = a.grad_params.size() > 0 && a.grad_params[0] ? a.grad_params[0].f32() : nullptr;
    float* dbeta = a.grad_params.size() > 1 && a.grad_params[1] ? a.grad_params[1].f32() : nullptr;
    float* dx = !a.grad_inputs.empty() && a.grad_inputs[0] ? a.grad_inputs[0].f32() : nullptr;
    // Every rank reduces alike: the shapes and the gradients wanted are the same on all.
    if (total == 0 || (!dgamma && !dbeta && !dx)) return;
    // The weight and bias gradients are this rank's own sums (the gradient
    // all-reduce of the training loop averages them like every parameter's).
    double* const sums = channel_sums(a, g, dbeta, dgamma, dx != nullptr);
    if (!dx) return;
    auto* coefficients = reinterpret_cast<InputGradient*>(per_channel(a));
    finalize_gradients<<<blocks_for_channels(layout_.channels), kBlock, 0, stream>>>(
        sums, layout_, a.params[0].f32(), g.mean, g.invstd, coefficients);
    check_launch("batchnorm finalize_gradients");
    input_gradient<<<grid_for(total), kBlock, 0, stream>>>(g, dx, layout_, a.step, coefficients);
    check_launch("batchnorm input_gradient");
  }

  std::string implementation() const override {
    return std::string("own:batchnorm_real_rows[splits=") + std::to_string(splits_) +
           (ranks_ ? ", ranks=" + std::to_string(ranks_->world()) : std::string()) + "]" +
           (relu_ ? " with relu" : "");
  }

 private:
  // The channels' sums of pair(i, c) over this rank's real rows into the
  // workspace (the bias-like and weight-like sums also to `first` and
  // `second` where wanted), then, with `reduced` and several ranks, summed
  // over every rank in place, in stream order.
  template <typename Pair>
  double* channel_sums(const KernelArgs& a, Pair pair, float* first, float* second, bool reduced) {
    cudaStream_t stream = ctx_.compute.get();
    double2* partial = static_cast<double2*>(a.workspace);
    double* sums = reinterpret_cast<double*>(static_cast<char*>(a.workspace) + partials_bytes());
    channel_partials<<<dim3(static_cast<unsigned>(layout_.channels), splits_), kSumThreads, 0,
                       stream>>>(layout_, a.step, pair, partial);
    check_launch("batchnorm channel_partials");
    total_partials<<<blocks_for_channels(layout_.channels), kBlock, 0, stream>>>(
        partial, splits_, layout_, a.step, sums, first, second);
    check_launch("batchnorm total_partials");
    if (reduced && ranks_)
      ranks_->all_reduce_device_statistics(sums,
                                           static_cast<std::size_t>(sums_length(layout_.channels)));
    return sums;
  }

  std::size_t partials_bytes() const {
    return round_up_256(static_cast<std::size_t>(layout_.channels) *
                        static_cast<std::size_t>(splits_) * sizeof(double2));
  }
  std::size_t sums_bytes() const {
    return round_up_256(static_cast<std::size_t>(sums_length(layout_.channels)) * sizeof(double));
  }
  float* per_channel(const KernelArgs& a) const {
    return reinterpret_cast<float*>(static_cast<char*>(a.workspace) + partials_bytes() +
                                    sums_bytes());
  }

  CudaContext& ctx_;
  Collective* ranks_;  // null: this rank's batch alone (one rank, or sync: false)
  Layout layout_;
  double momentum_, eps_;
  bool relu_;  // activation: relu
  int splits_ = 1;
};

}  // namespace

std::unique_ptr<Kernel> make_real_rows_batchnorm_kernel(const KernelContext& k, CudaContext& ctx,
                                                        Collective* ranks) {
  return std::make_unique<RealRowsBatchNormKernel>(k, ctx, ranks);
}

}  // namespace trainer::cuda
