// Element-wise activations on oneDNN eltwise (forward and backward): relu,
// leaky_relu, gelu (erf or tanh form), silu (swish, alpha 1), sigmoid
// (logistic), tanh. relu, sigmoid and tanh differentiate from their output
// (in-place friendly). Input, output and gradients share one format
// (FormatRule::same_as_input); element-wise, a blocked layout is just n
// elements in a row.
#include <memory>
#include <stdexcept>

#include "ops/cpu/eltwise.h"
#include "ops/cpu/families.h"

namespace trainer::cpu {
namespace {

class EltwiseKernel final : public Kernel {
 public:
  EltwiseKernel(const KernelContext& ctx, EltwiseSpec spec)
      : op_(spec, numel(ctx.inputs.at(0)), ctx.input_format(0).dtype, ctx.training) {
    if (!(ctx.input_format(0) == ctx.output_format))
      throw std::logic_error("an activation's input and output must share one format");
  }

  std::string implementation() const override { return op_.implementation(); }

  void forward(const KernelArgs& a) override { op_.forward(a.inputs[0].data, a.output.data); }

  void backward(const KernelArgs& a) override {
    if (!a.grad_inputs[0]) return;
    op_.backward(op_.uses_output() ? a.output.data : a.inputs[0].data, a.grad_output.data,
                 a.grad_inputs[0].data);
  }

 private:
  Eltwise op_;
};

void add(Backend& backend, const std::string& op, EltwiseSpec spec) {
  backend.add_kernel(op, [spec](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    return std::make_unique<EltwiseKernel>(ctx, spec);
  });
}

}  // namespace

void register_activation_kernels(Backend& backend) {
  using alg = dnnl::algorithm;
  add(backend, "relu", eltwise_spec(Epilogue::relu));
  add(backend, "sigmoid", {alg::eltwise_logistic_use_dst_for_bwd, 0.0f, true});
  add(backend, "tanh", {alg::eltwise_tanh_use_dst_for_bwd, 0.0f, true});
  add(backend, "silu", {alg::eltwise_swish, 1.0f, false});
  backend.add_kernel("gelu", [](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    const Epilogue form = *epilogue_for_layer("gelu", *ctx.attrs);
    return std::make_unique<EltwiseKernel>(ctx, eltwise_spec(form));
  });
  backend.add_kernel("leaky_relu", [](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    const auto slope = static_cast<float>(ctx.attrs->get_number("slope"));
    return std::make_unique<EltwiseKernel>(ctx, EltwiseSpec{alg::eltwise_relu, slope, false});
  });
}

}  // namespace trainer::cpu
