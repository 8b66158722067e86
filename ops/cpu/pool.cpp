// Pooling: maxpool2d and avgpool2d (padding counted or not) on oneDNN pooling, the max
// workspace saved from forward to backward; global_avgpool as a plain loop.
// Window pooling runs in its input's format (plain or blocked, f32 or bf16);
// an output in another format (the next op takes plain float32) is converted.
#include <algorithm>
#include <memory>

#include "ops/cpu/families.h"
#include "ops/cpu/layout.h"
#include "ops/cpu/onednn.h"

namespace trainer::cpu {
namespace {

using pool_fwd = dnnl::pooling_forward;
using pool_bwd = dnnl::pooling_backward;

class PoolKernel final : public Kernel {
 public:
  PoolKernel(const KernelContext& ctx, bool max) {
    const Attrs& at = *ctx.attrs;
    const auto kernel = at.get_ints("kernel", 2), pad = at.get_ints("padding", 2);
    auto stride = at.get_ints("stride", 2);
    for (int k = 0; k < 2; ++k)
      if (stride[k] == 0) stride[k] = kernel[k];
    const dnnl::memory::dims strides{stride[0], stride[1]}, kernel_dims{kernel[0], kernel[1]},
        padding{pad[0], pad[1]};
    const bool count_pad = !max && at.has("count_include_pad") && at.get_bool("count_include_pad");
    const auto alg = max         ? dnnl::algorithm::pooling_max
                     : count_pad ? dnnl::algorithm::pooling_avg_include_padding
                                 : dnnl::algorithm::pooling_avg_exclude_padding;
    const auto src = tensor_md(ctx.inputs.at(0), ctx.input_format(0));
    const auto dst = tensor_md(ctx.output, ctx.input_format(0));
    const auto user_dst = tensor_md(ctx.output, ctx.output_format);
    const auto attr = user_scratchpad_attr();
    auto& eng = cpu_engine();

    pool_fwd::primitive_desc eval_pd(pool_fwd::desc(dnnl::prop_kind::forward_inference, alg, src,
                                                    dst, strides, kernel_dims, padding, padding),
                                     attr, eng);
    eval_ = PrimitiveCall(pool_fwd(eval_pd));
    eval_.arg(DNNL_ARG_SRC, src);
    eval_.arg(DNNL_ARG_DST, dst);
    bufs_.need_scratchpad(add_scratchpad(eval_, eval_pd));
    impl_ = impl_name(eval_pd);
    y_out_ = Relayout::out_of(dst, user_dst);
    y_buffer_ = bufs_.add(y_out_.bytes());
    if (!ctx.training) return;

    pool_fwd::primitive_desc train_pd(pool_fwd::desc(dnnl::prop_kind::forward_training, alg, src,
                                                     dst, strides, kernel_dims, padding, padding),
                                      attr, eng);
    train_ = PrimitiveCall(pool_fwd(train_pd));
    train_.arg(DNNL_ARG_SRC, src);
    train_.arg(DNNL_ARG_DST, dst);
    const auto ws_md = train_pd.workspace_desc();
    saved_ = ws_md.get_size();
    if (saved_) train_.arg(DNNL_ARG_WORKSPACE, ws_md);
    bufs_.need_scratchpad(add_scratchpad(train_, train_pd));

    pool_bwd::primitive_desc bwd_pd(
        pool_bwd::desc(alg, src, dst, strides, kernel_dims, padding, padding), attr, eng, train_pd);
    bwd_ = PrimitiveCall(pool_bwd(bwd_pd));
    bwd_.arg(DNNL_ARG_DIFF_DST, dst);
    bwd_.arg(DNNL_ARG_DIFF_SRC, src);
    if (saved_) bwd_.arg(DNNL_ARG_WORKSPACE, ws_md);
    bufs_.need_scratchpad(add_scratchpad(bwd_, bwd_pd));
    impl_ = impl_name(train_pd);
    bufs_.next_phase();
    dy_in_ = Relayout::into(user_dst, dst);
    dy_buffer_ = bufs_.add(dy_in_.bytes());
  }

  // Max pooling: the argmax workspace of the training forward.
  std::vector<std::size_t> saved_bytes() const override {
    if (!saved_) return {};
    return {saved_};
  }
  std::size_t workspace_bytes() const override { return bufs_.total(); }
  std::string implementation() const override { return impl_; }

  void forward(const KernelArgs& a) override {
    const bool train = a.training && train_.valid();
    PrimitiveCall& call = train ? train_ : eval_;
    call.bind(DNNL_ARG_SRC, a.inputs[0].data);
    void* y_buffer = bufs_.at(a.workspace, y_buffer_);
    call.bind(DNNL_ARG_DST, y_out_.target(a.output.data, y_buffer));
    if (train && saved_) call.bind(DNNL_ARG_WORKSPACE, a.saved[0]);
    call.bind_scratchpad(a.workspace);
    call.execute();
    y_out_.from_buffer(y_buffer, a.output.data);
  }

  void backward(const KernelArgs& a) override {
    if (!a.grad_inputs[0]) return;
    bwd_.bind(DNNL_ARG_DIFF_DST,
              dy_in_.to_buffer(a.grad_output.data, bufs_.at(a.workspace, dy_buffer_)));
    bwd_.bind(DNNL_ARG_DIFF_SRC, a.grad_inputs[0].data);
    if (saved_) bwd_.bind(DNNL_ARG_WORKSPACE, a.saved[0]);
    bwd_.bind_scratchpad(a.workspace);
    bwd_.execute();
  }

 private:
  std::size_t saved_ = 0, y_buffer_ = 0, dy_buffer_ = 0;
  Relayout y_out_, dy_in_;
  KernelBuffers bufs_;
  std::string impl_;
  PrimitiveCall eval_, train_, bwd_;
};

// Mean over H*W per (n, c): a reduction oneDNN pooling would also do, but this
// loop is memory-bound and as fast. An input or output in another format
// (blocked, bf16) is converted from or to plain float32, and so are their
// gradients.
class GlobalAvgPoolKernel final : public Kernel {
 public:
  explicit GlobalAvgPoolKernel(const KernelContext& ctx) {
    const Shape& x = ctx.inputs.at(0);
    planes_ = x[0] * x[1];
    hw_ = x[2] * x[3];
    const auto in = tensor_md(x, ctx.input_format(0)), plain = plain_md(x);
    const auto out = tensor_md(ctx.output, ctx.output_format), plain_out = plain_md(ctx.output);
    x_in_ = Relayout::into(in, plain);
    y_out_ = Relayout::out_of(plain_out, out);
    x_buffer_ = bufs_.add(x_in_.bytes());
    y_buffer_ = bufs_.add(y_out_.bytes());
    bufs_.next_phase();
    dy_in_ = Relayout::into(out, plain_out);
    dx_out_ = Relayout::out_of(plain, in);
    dy_buffer_ = bufs_.add(dy_in_.bytes());
    dx_buffer_ = bufs_.add(dx_out_.bytes());
  }
  std::string implementation() const override { return "loop"; }
  std::size_t workspace_bytes() const override { return bufs_.total(); }

  void forward(const KernelArgs& a) override {
    const auto* x = static_cast<const float*>(
        x_in_.to_buffer(a.inputs[0].data, bufs_.at(a.workspace, x_buffer_)));
    void* y_buffer = bufs_.at(a.workspace, y_buffer_);
    auto* y = static_cast<float*>(y_out_.target(a.output.data, y_buffer));
    const float inv = 1.0f / static_cast<float>(hw_);
    for (std::int64_t p = 0; p < planes_; ++p) {
      const float* row = x + p * hw_;
      float s = 0;
      for (std::int64_t k = 0; k < hw_; ++k) s += row[k];
      y[p] = s * inv;
    }
    y_out_.from_buffer(y_buffer, a.output.data);
  }

  void backward(const KernelArgs& a) override {
    if (!a.grad_inputs[0]) return;
    const auto* dy = static_cast<const float*>(
        dy_in_.to_buffer(a.grad_output.data, bufs_.at(a.workspace, dy_buffer_)));
    void* dx_buffer = bufs_.at(a.workspace, dx_buffer_);
    auto* dx = static_cast<float*>(dx_out_.target(a.grad_inputs[0].data, dx_buffer));
    const float inv = 1.0f / static_cast<float>(hw_);
    for (std::int64_t p = 0; p < planes_; ++p) {
      const float g = dy[p] * inv;
      float* row = dx + p * hw_;
      for (std::int64_t k = 0; k < hw_; ++k) row[k] = g;
    }
    dx_out_.from_buffer(dx_buffer, a.grad_inputs[0].data);
  }

 private:
  std::int64_t planes_ = 0, hw_ = 0;
  Relayout x_in_, y_out_, dy_in_, dx_out_;
  KernelBuffers bufs_;
  std::size_t x_buffer_ = 0, y_buffer_ = 0, dy_buffer_ = 0, dx_buffer_ = 0;
};

}  // namespace

void register_pool_kernels(Backend& backend) {
  backend.add_kernel("maxpool2d", [](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    return std::make_unique<PoolKernel>(ctx, true);
  });
  backend.add_kernel("avgpool2d", [](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    return std::make_unique<PoolKernel>(ctx, false);
  });
  backend.add_kernel("global_avgpool", [](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    return std::make_unique<GlobalAvgPoolKernel>(ctx);
  });
}

}  // namespace trainer::cpu
