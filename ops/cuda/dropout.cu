// dropout: inverted dropout with a counter-based mask, the same rule as the CPU
// kernel (ops/cpu/dropout.cpp) so a seed gives the same mask on every backend:
// seed = call_seed(step seed, salt) (ops/step_values.h), base = mix(seed + G),
// h_i = mix(base + d_i * G) with G = 0x9E3779B97F4A7C15, mix the splitmix64
// finalizer and d_i the element's index in the step's global batch
// (draw_index); element i is kept when (h_i >> 32) >= p * 2^32. The step's
// seed and row positions are read on the device, so a recorded step draws a
// new mask at every replay. The mask is saved (one byte per element) for the
// backward.
#include <cstdint>
#include <string>

#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.cuh"

namespace trainer::cuda {
namespace {

constexpr unsigned long long kGolden = 0x9E3779B97F4A7C15ull;

__host__ __device__ __forceinline__ unsigned long long mix(unsigned long long z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__global__ void dropout_forward(const float* x, float* y, unsigned char* mask, long long n,
                                long long per_row, const StepValues* step, unsigned long long salt,
                                unsigned long long threshold, float scale) {
  const unsigned long long base = mix(call_seed(step ? step->seed : 0, salt) + kGolden);
  const long long first_position = step ? step->first_position : 0;
  const long long position_stride = step ? step->position_stride : 1;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    // One rank, one micro-batch: the rows are the global batch's (no division).
    const unsigned long long d =
        position_stride == 1
            ? static_cast<unsigned long long>(first_position * per_row + i)
            : draw_index(first_position, position_stride, i / per_row, per_row, i % per_row);
    const unsigned long long h = mix(base + d * kGolden);
    const bool keep = (h >> 32) >= threshold;
    mask[i] = keep ? 1 : 0;
    y[i] = keep ? x[i] * scale : 0.0f;
  }
}

__global__ void dropout_backward(const float* dy, const unsigned char* mask, float* dx, long long n,
                                 float scale) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    dx[i] = mask[i] ? dy[i] * scale : 0.0f;
}

class DropoutKernel final : public Kernel {
 public:
  DropoutKernel(const KernelContext& k, CudaContext& ctx)
      : ctx_(ctx),
        n_(numel(k.output)),
        per_row_(k.output.empty() || k.output[0] == 0 ? 1 : n_ / k.output[0]),
        p_(k.attrs->get_number("p")) {}

  std::vector<std::size_t> saved_bytes() const override { return {static_cast<std::size_t>(n_)}; }
  void forward(const KernelArgs& a) override {
    if (n_ == 0) return;
    auto* mask = static_cast<unsigned char*>(a.saved.at(0));
    if (!a.training || p_ == 0.0) {
      check(cudaMemsetAsync(mask, 1, static_cast<std::size_t>(n_), ctx_.compute.get()),
            "cudaMemsetAsync(dropout mask)");
      if (a.output.data != a.inputs[0].data)
        check(cudaMemcpyAsync(a.output.data, a.inputs[0].data, a.output.bytes(),
                              cudaMemcpyDeviceToDevice, ctx_.compute.get()),
              "cudaMemcpyAsync(dropout identity)");
      return;
    }
    const float scale = static_cast<float>(1.0 / (1.0 - p_));
    const auto threshold = static_cast<unsigned long long>(p_ * 4294967296.0);
    dropout_forward<<<grid_for(n_), kBlock, 0, ctx_.compute.get()>>>(
        a.inputs[0].f32(), a.output.f32(), mask, n_, per_row_, a.step, a.seed_salt, threshold,
        scale);
    check_launch("dropout_forward");
  }
  void backward(const KernelArgs& a) override {
    if (n_ == 0 || a.grad_inputs.empty() || !a.grad_inputs[0]) return;
    const float scale = a.training ? static_cast<float>(1.0 / (1.0 - p_)) : 1.0f;
    dropout_backward<<<grid_for(n_), kBlock, 0, ctx_.compute.get()>>>(
        a.grad_output.f32(), static_cast<const unsigned char*>(a.saved.at(0)),
        a.grad_inputs[0].f32(), n_, scale);
    check_launch("dropout_backward");
  }
  std::string implementation() const override { return "cuda:splitmix64"; }

 private:
  CudaContext& ctx_;
  std::int64_t n_, per_row_;
  double p_;
};

}  // namespace

void register_dropout_kernels(Backend& backend, CudaContext& ctx) {
  backend.add_kernel("dropout", [&ctx](const KernelContext& k) {
    return std::make_unique<DropoutKernel>(k, ctx);
  });
}

}  // namespace trainer::cuda
