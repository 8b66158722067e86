// conv2d on oneDNN convolution: forward, backward data, backward weights (+ bias),
// with stride, padding, dilation and groups, on plain NCHW / (g)oihw tensors.
#include <algorithm>
#include <memory>

#include "ops/cpu/families.h"
#include "ops/cpu/onednn.h"

namespace trainer::cpu {
namespace {

using conv_fwd = dnnl::convolution_forward;
using conv_bwd_data = dnnl::convolution_backward_data;
using conv_bwd_weights = dnnl::convolution_backward_weights;

class ConvKernel final : public Kernel {
 public:
  explicit ConvKernel(const KernelContext& ctx) {
    const Shape& x = ctx.inputs.at(0);
    const Shape& wshape = ctx.param_decls.at(0).shape;
    const Attrs& at = *ctx.attrs;
    const auto stride = at.get_ints("stride", 2), pad = at.get_ints("padding", 2),
               dil = at.get_ints("dilation", 2);
    const std::int64_t groups = at.get_int("groups");
    out_ = ctx.output[1];
    rows_ = ctx.output[0];
    hw_ = ctx.output[2] * ctx.output[3];
    has_bias_ = ctx.param_decls.size() > 1;
    const auto src = plain_md(x), dst = plain_md(ctx.output), b = plain_md({out_});
    const auto w = groups == 1 ? plain_md(wshape)
                               : plain_md({groups, out_ / groups, wshape[1], wshape[2], wshape[3]});
    const dnnl::memory::dims strides{stride[0], stride[1]}, padding{pad[0], pad[1]},
        dilates{dil[0] - 1, dil[1] - 1};
    const auto attr = user_scratchpad_attr();
    auto& eng = cpu_engine();
    const auto prop =
        ctx.training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    const auto alg = dnnl::algorithm::convolution_direct;
    conv_fwd::primitive_desc fwd_pd =
        has_bias_ ? conv_fwd::primitive_desc(conv_fwd::desc(prop, alg, src, w, b, dst, strides,
                                                            dilates, padding, padding),
                                             attr, eng)
                  : conv_fwd::primitive_desc(
                        conv_fwd::desc(prop, alg, src, w, dst, strides, dilates, padding, padding),
                        attr, eng);
    fwd_ = PrimitiveCall(conv_fwd(fwd_pd));
    fwd_.arg(DNNL_ARG_SRC, src);
    fwd_.arg(DNNL_ARG_WEIGHTS, w);
    if (has_bias_) fwd_.arg(DNNL_ARG_BIAS, b);
    fwd_.arg(DNNL_ARG_DST, dst);
    scratch_ = add_scratchpad(fwd_, fwd_pd);
    impl_ = impl_name(fwd_pd);
    if (!ctx.training) return;

    conv_bwd_data::primitive_desc bd_pd(
        conv_bwd_data::desc(alg, src, w, dst, strides, dilates, padding, padding), attr, eng,
        fwd_pd);
    bwd_data_ = PrimitiveCall(conv_bwd_data(bd_pd));
    bwd_data_.arg(DNNL_ARG_DIFF_DST, dst);
    bwd_data_.arg(DNNL_ARG_WEIGHTS, w);
    bwd_data_.arg(DNNL_ARG_DIFF_SRC, src);
    scratch_ = std::max(scratch_, add_scratchpad(bwd_data_, bd_pd));

    conv_bwd_weights::primitive_desc bw_pd =
        has_bias_
            ? conv_bwd_weights::primitive_desc(
                  conv_bwd_weights::desc(alg, src, w, b, dst, strides, dilates, padding, padding),
                  attr, eng, fwd_pd)
            : conv_bwd_weights::primitive_desc(
                  conv_bwd_weights::desc(alg, src, w, dst, strides, dilates, padding, padding),
                  attr, eng, fwd_pd);
    bwd_weights_ = PrimitiveCall(conv_bwd_weights(bw_pd));
    bwd_weights_.arg(DNNL_ARG_SRC, src);
    bwd_weights_.arg(DNNL_ARG_DIFF_DST, dst);
    bwd_weights_.arg(DNNL_ARG_DIFF_WEIGHTS, w);
    if (has_bias_) bwd_weights_.arg(DNNL_ARG_DIFF_BIAS, b);
    scratch_ = std::max(scratch_, add_scratchpad(bwd_weights_, bw_pd));
    impl_ +=
        std::string(" bwd_data:") + bd_pd.impl_info_str() + " bwd_weights:" + bw_pd.impl_info_str();
  }

  // The scratchpad, then room for a bias gradient nobody asked for.
  std::size_t workspace_bytes() const override {
    return bias_offset() + (has_bias_ ? static_cast<std::size_t>(out_) * 4 : 0);
  }
  std::string implementation() const override { return impl_; }

  void forward(const KernelArgs& a) override {
    fwd_.bind(DNNL_ARG_SRC, a.inputs[0].data);
    fwd_.bind(DNNL_ARG_WEIGHTS, a.params[0].data);
    if (has_bias_) fwd_.bind(DNNL_ARG_BIAS, a.params[1].data);
    fwd_.bind(DNNL_ARG_DST, a.output.data);
    fwd_.bind_scratchpad(a.workspace);
    fwd_.execute();
  }

  void backward(const KernelArgs& a) override {
    if (a.grad_inputs[0]) {
      bwd_data_.bind(DNNL_ARG_DIFF_DST, a.grad_output.data);
      bwd_data_.bind(DNNL_ARG_WEIGHTS, a.params[0].data);
      bwd_data_.bind(DNNL_ARG_DIFF_SRC, a.grad_inputs[0].data);
      bwd_data_.bind_scratchpad(a.workspace);
      bwd_data_.execute();
    }
    const bool want_w = !a.grad_params.empty() && a.grad_params[0];
    const bool want_b = has_bias_ && a.grad_params.size() > 1 && a.grad_params[1];
    if (!want_w && !want_b) return;
    if (!want_w) {  // bias only: sums of grad_output per channel
      const float* dy = a.grad_output.f32();
      float* db = a.grad_params[1].f32();
      for (std::int64_t o = 0; o < out_; ++o) {
        double s = 0;
        for (std::int64_t n = 0; n < rows_; ++n)
          for (std::int64_t k = 0; k < hw_; ++k) s += dy[(n * out_ + o) * hw_ + k];
        db[o] = static_cast<float>(s);
      }
      return;
    }
    bwd_weights_.bind(DNNL_ARG_SRC, a.inputs[0].data);
    bwd_weights_.bind(DNNL_ARG_DIFF_DST, a.grad_output.data);
    bwd_weights_.bind(DNNL_ARG_DIFF_WEIGHTS, a.grad_params[0].data);
    if (has_bias_)
      bwd_weights_.bind(DNNL_ARG_DIFF_BIAS, want_b
                                                ? a.grad_params[1].data
                                                : static_cast<char*>(a.workspace) + bias_offset());
    bwd_weights_.bind_scratchpad(a.workspace);
    bwd_weights_.execute();
  }

 private:
  std::size_t bias_offset() const { return (scratch_ + 63) / 64 * 64; }

  std::int64_t out_ = 0, rows_ = 0, hw_ = 0;
  bool has_bias_ = false;
  std::size_t scratch_ = 0;
  std::string impl_;
  PrimitiveCall fwd_, bwd_data_, bwd_weights_;
};

}  // namespace

void register_conv_kernels(Backend& backend) {
  backend.add_kernel("conv2d", [](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    return std::make_unique<ConvKernel>(ctx);
  });
}

}  // namespace trainer::cpu
