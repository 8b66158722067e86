// conv2d on oneDNN convolution: forward, backward data, backward weights (+ bias),
// with stride, padding, dilation and groups. The primitives choose their layouts
// (format_tag::any, where oneDNN's fast blocked implementations live); the graph's
// plain NCHW / (g)oihw tensors are converted to and from them inside the kernel
// (layout.h), unless the format pass gave them the blocked layout and type the
// primitives read and write already. The converted input is kept from the forward
// for the backward-weights call; the weights are converted every call (the
// optimizer changes them). Under mixed precision (KernelContext::compute) the same
// conversions cast the input, weights and incoming gradient to bf16; y and dx are
// written in their tensors' type (float32, or bf16 where the activations are
// stored in bf16); fp16 is emulated by rounding every argument through fp16
// around float32 primitives.
#include <algorithm>
#include <memory>

#include "ops/cpu/families.h"
#include "ops/cpu/layout.h"
#include "ops/cpu/matmul_ports.h"
#include "ops/cpu/onednn.h"
#include "ops/cpu/reduce.h"

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
    const auto src = tensor_md(x, ctx.input_format(0)), b = plain_md({out_});
    const auto dst = tensor_md(ctx.output, ctx.output_format);
    const auto w = groups == 1 ? plain_md(wshape)
                               : plain_md({groups, out_ / groups, wshape[1], wshape[2], wshape[3]});
    // Under bf16 the primitives read bf16 (x, w, dy) and write y and dx in their
    // tensors' type, dw in float32.
    const bool bf16 = ctx.compute == DType::bf16;
    const auto f32 = dnnl::memory::data_type::f32, low = bf16 ? dnnl::memory::data_type::bf16 : f32;
    const bool half = ctx.compute == DType::f16;
    const auto src_any = any_md(src, low), w_any = any_md(w, low);
    const auto dst_any = any_md(dst, bf16 ? dst.data_type() : f32);
    const auto dy_any = any_md(dst, low), dx_any = any_md(src, bf16 ? src.data_type() : f32);
    const auto dw_any = any_md(w);
    const dnnl::memory::dims strides{stride[0], stride[1]}, padding{pad[0], pad[1]},
        dilates{dil[0] - 1, dil[1] - 1};
    const auto attr = user_scratchpad_attr();
    auto& eng = cpu_engine();
    const auto prop =
        ctx.training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    const auto alg = dnnl::algorithm::convolution_direct;

    conv_fwd::primitive_desc fwd_pd =
        has_bias_ ? conv_fwd::primitive_desc(conv_fwd::desc(prop, alg, src_any, w_any, b, dst_any,
                                                            strides, dilates, padding, padding),
                                             attr, eng)
                  : conv_fwd::primitive_desc(conv_fwd::desc(prop, alg, src_any, w_any, dst_any,
                                                            strides, dilates, padding, padding),
                                             attr, eng);
    fwd_ = PrimitiveCall(conv_fwd(fwd_pd));
    for (int arg : {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST})
      fwd_.arg(arg, chosen_md(fwd_pd, arg));
    if (has_bias_) fwd_.arg(DNNL_ARG_BIAS, b);
    bufs_.need_scratchpad(add_scratchpad(fwd_, fwd_pd));
    impl_ = impl_name(fwd_pd) + layouts(fwd_pd, {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST});
    // The weights' bf16 copy when the program keeps one (KernelContext::param_decls).
    const auto w_dims = w.dims();
    const auto w_read =
        ctx.param_decls[0].dtype == DType::bf16
            ? plain_md(Shape(w_dims.begin(), w_dims.end()), dnnl::memory::data_type::bf16)
            : w;
    const MatmulPorts::Plain plain{src, w_read, dst, w};
    if (!ctx.training) {
      ports_.plan_forward(fwd_pd, plain, bufs_, half);
      return;
    }

    conv_bwd_data::primitive_desc bd_pd(
        conv_bwd_data::desc(alg, dx_any, w_any, dy_any, strides, dilates, padding, padding), attr,
        eng, fwd_pd);
    bwd_data_ = PrimitiveCall(conv_bwd_data(bd_pd));
    for (int arg : {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC})
      bwd_data_.arg(arg, chosen_md(bd_pd, arg));
    bufs_.need_scratchpad(add_scratchpad(bwd_data_, bd_pd));

    // The bias gradient is an own loop (per-channel sums in double), exact enough
    // that accumulated micro-batches equal the large batch.
    conv_bwd_weights::primitive_desc bw_pd(
        conv_bwd_weights::desc(alg, src_any, dw_any, dy_any, strides, dilates, padding, padding),
        attr, eng, fwd_pd);
    bwd_weights_ = PrimitiveCall(conv_bwd_weights(bw_pd));
    for (int arg : {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS})
      bwd_weights_.arg(arg, chosen_md(bw_pd, arg));
    bufs_.need_scratchpad(add_scratchpad(bwd_weights_, bw_pd));
    impl_ += " bwd_data:" + std::string(bd_pd.impl_info_str()) +
             layouts(bd_pd, {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC}) +
             " bwd_weights:" + bw_pd.impl_info_str() +
             layouts(bw_pd, {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS});

    ports_.plan_training(fwd_pd, bd_pd, bw_pd, plain, bufs_, half, has_bias_);
  }

  // The input converted by the forward, for the backward-weights call.
  std::vector<std::size_t> saved_bytes() const override { return ports_.saved_bytes(); }
  std::size_t workspace_bytes() const override { return bufs_.total(); }
  std::string implementation() const override { return impl_; }

  void forward(const KernelArgs& a) override {
    ports_.bind_forward(fwd_, a, bufs_, a.output.data);
    if (has_bias_) fwd_.bind(DNNL_ARG_BIAS, a.params[1].data);
    fwd_.execute();
    ports_.finish_forward(a, bufs_, a.output.data);
  }

  void backward(const KernelArgs& a) override {
    ports_.begin_backward(a.grad_output.data);
    if (a.grad_inputs[0]) ports_.backward_data(bwd_data_, a, bufs_);
    if (has_bias_ && a.grad_params.size() > 1 && a.grad_params[1]) bias_gradient(a);
    if (a.grad_params.empty() || !a.grad_params[0]) return;
    ports_.bind_backward_weights(bwd_weights_, a, bufs_);
    bwd_weights_.execute();
    ports_.finish_backward_weights(a, bufs_);
  }

 private:
  // " [src,weights,dst layouts]" of one primitive.
  static std::string layouts(const dnnl::primitive_desc_base& pd, std::initializer_list<int> args) {
    std::string s;
    for (int arg : args) s += (s.empty() ? " [" : ",") + layout_name(chosen_md(pd, arg));
    return s + "]";
  }

  // The bias gradient: the sums of grad_output per channel (float per plane,
  // vectorised; double across planes).
  void bias_gradient(const KernelArgs& a) {
    const float* dy = ports_.plain_dy(a, bufs_);
    float* db = a.grad_params[1].f32();
    for (std::int64_t o = 0; o < out_; ++o) {
      double s = 0;
      for (std::int64_t n = 0; n < rows_; ++n) {
        s += sum_floats(dy + (n * out_ + o) * hw_, hw_);
      }
      db[o] = static_cast<float>(s);
    }
  }

  std::int64_t out_ = 0, rows_ = 0, hw_ = 0;
  bool has_bias_ = false;
  KernelBuffers bufs_;
  MatmulPorts ports_;
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
