// add: the elementwise sum of two or more same-shaped inputs; its backward
// copies the output gradient to every input gradient.
#include <string>

#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.cuh"

namespace trainer::cuda {
namespace {

// y = a + b (y may alias a: the running sum of three or more inputs).
__global__ void add_kernel(const float* a, const float* b, float* y, long long n, int vec) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  long long done = 0;
  if (vec) {
    const long long n4 = n / 4;
    for (long long i = first; i < n4; i += stride) {
      const float4 u = reinterpret_cast<const float4*>(a)[i];
      const float4 v = reinterpret_cast<const float4*>(b)[i];
      reinterpret_cast<float4*>(y)[i] = float4{u.x + v.x, u.y + v.y, u.z + v.z, u.w + v.w};
    }
    done = n4 * 4;
  }
  for (long long i = done + first; i < n; i += stride) y[i] = a[i] + b[i];
}

class AddKernel final : public Kernel {
 public:
  AddKernel(const KernelContext& k, CudaContext& ctx) : ctx_(ctx), n_(numel(k.output)) {}

  void forward(const KernelArgs& a) override {
    if (n_ == 0) return;
    const float* sum = a.inputs[0].f32();
    for (std::size_t i = 1; i < a.inputs.size(); ++i) {
      const int vec = aligned16(sum) && aligned16(a.inputs[i].data) && aligned16(a.output.data);
      add_kernel<<<grid_for(n_, 4), kBlock, 0, ctx_.compute.get()>>>(sum, a.inputs[i].f32(),
                                                                     a.output.f32(), n_, vec);
      check_launch("add_kernel");
      sum = a.output.f32();
    }
  }
  void backward(const KernelArgs& a) override {
    for (const auto& g : a.grad_inputs) {
      if (!g || g.data == a.grad_output.data) continue;
      check(cudaMemcpyAsync(g.data, a.grad_output.data, g.bytes(), cudaMemcpyDeviceToDevice,
                            ctx_.compute.get()),
            "cudaMemcpyAsync(add backward)");
    }
  }
  std::string implementation() const override { return "cuda:elementwise"; }

 private:
  CudaContext& ctx_;
  std::int64_t n_;
};

}  // namespace

void register_add_kernels(Backend& backend, CudaContext& ctx) {
  backend.add_kernel(
      "add", [&ctx](const KernelContext& k) { return std::make_unique<AddKernel>(k, ctx); });
}

}  // namespace trainer::cuda
