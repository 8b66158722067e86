// add: the elementwise sum of two or more same-shaped inputs; its backward
// copies the output gradient to every input gradient. With `activation: relu`
// the last sum clamps at zero and the backward masks the gradient by the output.
#include <string>

#include "ops/cuda/elementwise.cuh"
#include "ops/cuda/kernels.h"

namespace trainer::cuda {
namespace {

struct Sum {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct SumRelu {
  // NaN to 0, as oneDNN's relu makes it on the CPU.
  __device__ float operator()(float a, float b) const {
    const float sum = a + b;
    return sum > 0.0f ? sum : 0.0f;
  }
};
struct ReluGrad {  // dy where the output y is positive
  __device__ float operator()(float dy, float y) const { return y > 0.0f ? dy : 0.0f; }
};

class AddKernel final : public Kernel {
 public:
  AddKernel(const KernelContext& k, CudaContext& ctx)
      : ctx_(ctx), n_(numel(k.output)), relu_(epilogue_of(*k.attrs) == Epilogue::relu) {}

  void forward(const KernelArgs& a) override {
    if (n_ == 0) return;
    // The running sum of three or more inputs builds up in the output.
    const float* sum = a.inputs[0].f32();
    for (std::size_t i = 1; i < a.inputs.size(); ++i) {
      const bool last = i + 1 == a.inputs.size();
      if (relu_ && last)
        map(sum, a.inputs[i].f32(), a.output.f32(), n_, SumRelu{}, ctx_.compute.get(), "add");
      else
        map(sum, a.inputs[i].f32(), a.output.f32(), n_, Sum{}, ctx_.compute.get(), "add");
      sum = a.output.f32();
    }
  }
  void backward(const KernelArgs& a) override {
    for (const auto& g : a.grad_inputs) {
      if (!g) continue;
      if (relu_) {  // in place when g is dy: masking twice changes nothing
        map(a.grad_output.f32(), a.output.f32(), g.f32(), n_, ReluGrad{}, ctx_.compute.get(),
            "add backward");
        continue;
      }
      if (g.data == a.grad_output.data) continue;
      check(cudaMemcpyAsync(g.data, a.grad_output.data, g.bytes(), cudaMemcpyDeviceToDevice,
                            ctx_.compute.get()),
            "cudaMemcpyAsync(add backward)");
    }
  }
  std::string implementation() const override {
    return relu_ ? "cuda:elementwise+relu" : "cuda:elementwise";
  }

 private:
  CudaContext& ctx_;
  std::int64_t n_;
  bool relu_;  // activation: relu
};

}  // namespace

void register_add_kernels(Backend& backend, CudaContext& ctx) {
  backend.add_kernel(
      "add", [&ctx](const KernelContext& k) { return std::make_unique<AddKernel>(k, ctx); });
}

}  // namespace trainer::cuda
