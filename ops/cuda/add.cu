// add: the elementwise sum of two or more same-shaped inputs; its backward
// copies the output gradient to every input gradient.
#include <string>

#include "ops/cuda/elementwise.cuh"
#include "ops/cuda/kernels.h"

namespace trainer::cuda {
namespace {

struct Sum {
  __device__ float operator()(float a, float b) const { return a + b; }
};

class AddKernel final : public Kernel {
 public:
  AddKernel(const KernelContext& k, CudaContext& ctx) : ctx_(ctx), n_(numel(k.output)) {}

  void forward(const KernelArgs& a) override {
    if (n_ == 0) return;
    // The running sum of three or more inputs builds up in the output.
    const float* sum = a.inputs[0].f32();
    for (std::size_t i = 1; i < a.inputs.size(); ++i) {
      map(sum, a.inputs[i].f32(), a.output.f32(), n_, Sum{}, ctx_.compute.get(), "add");
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
