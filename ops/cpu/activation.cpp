// Element-wise activations on oneDNN eltwise (forward and backward): relu,
// leaky_relu, gelu (erf), silu (swish, alpha 1), sigmoid (logistic), tanh.
// relu, sigmoid and tanh differentiate from their output (in-place friendly).
// Input, output and gradients share one format (FormatRule::same_as_input);
// element-wise, a blocked layout is just n elements in a row.
#include <memory>
#include <stdexcept>

#include "ops/cpu/families.h"
#include "ops/cpu/onednn.h"

namespace trainer::cpu {
namespace {

using elt_fwd = dnnl::eltwise_forward;
using elt_bwd = dnnl::eltwise_backward;

struct EltwiseSpec {
  dnnl::algorithm algorithm;
  float alpha = 0;
  bool uses_output = false;  // the backward reads y instead of x
};

class EltwiseKernel final : public Kernel {
 public:
  EltwiseKernel(const KernelContext& ctx, EltwiseSpec spec) : uses_output_(spec.uses_output) {
    if (!(ctx.input_format(0) == ctx.output_format))
      throw std::logic_error("an activation's input and output must share one format");
    const auto md = plain_md({numel(ctx.inputs.at(0))}, dnnl_type(ctx.input_format(0).dtype));
    const auto attr = user_scratchpad_attr();
    auto& eng = cpu_engine();
    const auto prop =
        ctx.training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    elt_fwd::primitive_desc fwd_pd(elt_fwd::desc(prop, spec.algorithm, md, spec.alpha, 0.0f), attr,
                                   eng);
    fwd_ = PrimitiveCall(elt_fwd(fwd_pd));
    const bool serial = numel(ctx.inputs.at(0)) < kSerialElements;
    if (serial) fwd_.run_serially();
    fwd_.arg(DNNL_ARG_SRC, md);
    fwd_.arg(DNNL_ARG_DST, md);
    impl_ = impl_name(fwd_pd);
    if (!ctx.training) return;
    elt_bwd::primitive_desc bwd_pd(elt_bwd::desc(spec.algorithm, md, md, spec.alpha, 0.0f), attr,
                                   eng, fwd_pd);
    bwd_ = PrimitiveCall(elt_bwd(bwd_pd));
    if (serial) bwd_.run_serially();
    bwd_.arg(uses_output_ ? DNNL_ARG_DST : DNNL_ARG_SRC, md);
    bwd_.arg(DNNL_ARG_DIFF_DST, md);
    bwd_.arg(DNNL_ARG_DIFF_SRC, md);
  }

  std::string implementation() const override { return impl_; }

  void forward(const KernelArgs& a) override {
    fwd_.bind(DNNL_ARG_SRC, a.inputs[0].data);
    fwd_.bind(DNNL_ARG_DST, a.output.data);
    fwd_.execute();
  }

  void backward(const KernelArgs& a) override {
    if (!a.grad_inputs[0]) return;
    if (uses_output_)
      bwd_.bind(DNNL_ARG_DST, a.output.data);
    else
      bwd_.bind(DNNL_ARG_SRC, a.inputs[0].data);
    bwd_.bind(DNNL_ARG_DIFF_DST, a.grad_output.data);
    bwd_.bind(DNNL_ARG_DIFF_SRC, a.grad_inputs[0].data);
    bwd_.execute();
  }

 private:
  bool uses_output_;
  std::string impl_;
  PrimitiveCall fwd_, bwd_;
};

void add(Backend& backend, const std::string& op, EltwiseSpec spec) {
  backend.add_kernel(op, [spec](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    return std::make_unique<EltwiseKernel>(ctx, spec);
  });
}

}  // namespace

void register_activation_kernels(Backend& backend) {
  using alg = dnnl::algorithm;
  add(backend, "relu", {alg::eltwise_relu_use_dst_for_bwd, 0.0f, true});
  add(backend, "sigmoid", {alg::eltwise_logistic_use_dst_for_bwd, 0.0f, true});
  add(backend, "tanh", {alg::eltwise_tanh_use_dst_for_bwd, 0.0f, true});
  add(backend, "gelu", {alg::eltwise_gelu_erf, 0.0f, false});
  add(backend, "silu", {alg::eltwise_swish, 1.0f, false});
  backend.add_kernel("leaky_relu", [](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    const auto slope = static_cast<float>(ctx.attrs->get_number("slope"));
    return std::make_unique<EltwiseKernel>(ctx, EltwiseSpec{alg::eltwise_relu, slope, false});
  });
}

}  // namespace trainer::cpu
