// linear on oneDNN inner product: forward, backward data, backward weights (+ bias).
// Under mixed precision (KernelContext::compute) the input, weights and incoming
// gradient are converted to bf16 (or rounded through fp16) on their way into the
// primitives (layout.h Port), and the outputs stay float32.
#include <algorithm>
#include <memory>

#include "ops/cpu/families.h"
#include "ops/cpu/layout.h"
#include "ops/cpu/onednn.h"

namespace trainer::cpu {
namespace {

using ip_fwd = dnnl::inner_product_forward;
using ip_bwd_data = dnnl::inner_product_backward_data;
using ip_bwd_weights = dnnl::inner_product_backward_weights;

class LinearKernel final : public Kernel {
 public:
  explicit LinearKernel(const KernelContext& ctx) {
    const Shape& x = ctx.inputs.at(0);
    rows_ = x[0];
    out_ = ctx.output[1];
    has_bias_ = ctx.param_decls.size() > 1;
    const auto src = plain_md(x), dst = plain_md(ctx.output), w = plain_md({out_, x[1]});
    const auto b = plain_md({out_});
    // float32: the plain layouts. bf16: the primitives read bf16 (x, w, dy) in the
    // layouts they choose and write float32 (y, dx, dw). fp16: float32 primitives
    // with every argument rounded through fp16.
    const bool low = ctx.compute == DType::bf16;
    const bool half = ctx.compute == DType::f16;
    const auto in_md = [&](const dnnl::memory::desc& md) {
      return low ? any_md(md, dnnl::memory::data_type::bf16) : md;
    };
    const auto attr = user_scratchpad_attr();
    auto& eng = cpu_engine();
    const auto prop =
        ctx.training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    ip_fwd::primitive_desc fwd_pd =
        has_bias_
            ? ip_fwd::primitive_desc(ip_fwd::desc(prop, in_md(src), in_md(w), b, dst), attr, eng)
            : ip_fwd::primitive_desc(ip_fwd::desc(prop, in_md(src), in_md(w), dst), attr, eng);
    fwd_ = PrimitiveCall(ip_fwd(fwd_pd));
    const bool serial = 2 * rows_ * x[1] * out_ < kSerialFlops;
    if (serial) fwd_.run_serially();
    for (int arg : {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST})
      fwd_.arg(arg, chosen_md(fwd_pd, arg));
    if (has_bias_) fwd_.arg(DNNL_ARG_BIAS, b);
    bufs_.need_scratchpad(add_scratchpad(fwd_, fwd_pd));
    impl_ = impl_name(fwd_pd);
    const auto fwd_src = chosen_md(fwd_pd, DNNL_ARG_SRC);
    if (!ctx.training) {
      x_fwd_.plan_in(src, fwd_src, bufs_, half);
      w_fwd_.plan_in(w, chosen_md(fwd_pd, DNNL_ARG_WEIGHTS), bufs_, half);
      y_fwd_.plan_out(chosen_md(fwd_pd, DNNL_ARG_DST), dst, bufs_, half);
      return;
    }

    ip_bwd_data::primitive_desc bd_pd(ip_bwd_data::desc(src, in_md(w), in_md(dst)), attr, eng,
                                      fwd_pd);
    bwd_data_ = PrimitiveCall(ip_bwd_data(bd_pd));
    if (serial) bwd_data_.run_serially();
    for (int arg : {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC})
      bwd_data_.arg(arg, chosen_md(bd_pd, arg));
    bufs_.need_scratchpad(add_scratchpad(bwd_data_, bd_pd));

    ip_bwd_weights::primitive_desc bw_pd =
        has_bias_ ? ip_bwd_weights::primitive_desc(
                        ip_bwd_weights::desc(in_md(src), w, b, in_md(dst)), attr, eng, fwd_pd)
                  : ip_bwd_weights::primitive_desc(ip_bwd_weights::desc(in_md(src), w, in_md(dst)),
                                                   attr, eng, fwd_pd);
    bwd_weights_ = PrimitiveCall(ip_bwd_weights(bw_pd));
    if (serial) bwd_weights_.run_serially();
    for (int arg : {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS})
      bwd_weights_.arg(arg, chosen_md(bw_pd, arg));
    if (has_bias_) bwd_weights_.arg(DNNL_ARG_DIFF_BIAS, b);
    bufs_.need_scratchpad(add_scratchpad(bwd_weights_, bw_pd));

    // Forward phase: x -> x' (saved when the backward-weights call reads that
    // layout and it is a copy), w -> w', y' -> y.
    const auto bw_src = chosen_md(bw_pd, DNNL_ARG_SRC);
    x_from_saved_ = bw_src == fwd_src && (bw_src != src || half);
    if (x_from_saved_)
      x_fwd_.plan_in_saved(src, fwd_src, half);
    else
      x_fwd_.plan_in(src, fwd_src, bufs_, half);
    w_fwd_.plan_in(w, chosen_md(fwd_pd, DNNL_ARG_WEIGHTS), bufs_, half);
    y_fwd_.plan_out(chosen_md(fwd_pd, DNNL_ARG_DST), dst, bufs_, half);
    // Backward phase: dy -> dy', w -> w'', dx' -> dx, x -> x'' unless saved,
    // dy once more when the two calls want different layouts, dw' -> dw, and
    // room for a bias gradient nobody asked for.
    bufs_.next_phase();
    const auto bd_dy = chosen_md(bd_pd, DNNL_ARG_DIFF_DST);
    dy_bd_.plan_in(dst, bd_dy, bufs_, half);
    w_bd_.plan_in(w, chosen_md(bd_pd, DNNL_ARG_WEIGHTS), bufs_, half);
    dx_bd_.plan_out(chosen_md(bd_pd, DNNL_ARG_DIFF_SRC), src, bufs_, half);
    if (!x_from_saved_) x_bw_.plan_in(src, bw_src, bufs_, half);
    dy_shared_ = chosen_md(bw_pd, DNNL_ARG_DIFF_DST) == bd_dy;
    if (!dy_shared_) dy_bw_.plan_in(dst, chosen_md(bw_pd, DNNL_ARG_DIFF_DST), bufs_, half);
    dw_bw_.plan_out(chosen_md(bw_pd, DNNL_ARG_DIFF_WEIGHTS), w, bufs_, half);
    if (has_bias_) unwanted_bias_ = bufs_.add(static_cast<std::size_t>(out_) * sizeof(float));
  }

  // The input converted by the forward, for the backward-weights call.
  std::vector<std::size_t> saved_bytes() const override {
    if (!x_from_saved_) return {};
    return {x_fwd_.saved_bytes()};
  }
  std::size_t workspace_bytes() const override { return bufs_.total(); }
  std::string implementation() const override { return impl_; }

  void forward(const KernelArgs& a) override {
    void* ws = a.workspace;
    fwd_.bind(DNNL_ARG_SRC, x_from_saved_ ? x_fwd_.in_saved(a.inputs[0].data, a.saved[0])
                                          : x_fwd_.in(a.inputs[0].data, ws, bufs_));
    fwd_.bind(DNNL_ARG_WEIGHTS, w_fwd_.in(a.params[0].data, ws, bufs_));
    if (has_bias_) fwd_.bind(DNNL_ARG_BIAS, a.params[1].data);
    fwd_.bind(DNNL_ARG_DST, y_fwd_.out_target(a.output.data, ws, bufs_));
    fwd_.bind_scratchpad(ws);
    fwd_.execute();
    y_fwd_.out_finish(a.output.data, ws, bufs_);
  }

  void backward(const KernelArgs& a) override {
    void* ws = a.workspace;
    const void* dy_bd = nullptr;  // grad_output in the backward-data layout, once converted
    if (a.grad_inputs[0]) {
      dy_bd = dy_bd_.in(a.grad_output.data, ws, bufs_);
      void* dx = a.grad_inputs[0].data;
      bwd_data_.bind(DNNL_ARG_DIFF_DST, dy_bd);
      bwd_data_.bind(DNNL_ARG_WEIGHTS, w_bd_.in(a.params[0].data, ws, bufs_));
      bwd_data_.bind(DNNL_ARG_DIFF_SRC, dx_bd_.out_target(dx, ws, bufs_));
      bwd_data_.bind_scratchpad(ws);
      bwd_data_.execute();
      dx_bd_.out_finish(dx, ws, bufs_);
    }
    const bool want_w = a.grad_params.size() > 0 && a.grad_params[0];
    const bool want_b = has_bias_ && a.grad_params.size() > 1 && a.grad_params[1];
    if (!want_w && !want_b) return;
    if (!want_w) {  // bias only: the column sums of grad_output
      const float* dy = a.grad_output.f32();
      float* db = a.grad_params[1].f32();
      std::fill(db, db + out_, 0.0f);
      for (std::int64_t r = 0; r < rows_; ++r)
        for (std::int64_t o = 0; o < out_; ++o) db[o] += dy[r * out_ + o];
      return;
    }
    const void* dy_bw = !dy_shared_ ? dy_bw_.in(a.grad_output.data, ws, bufs_)
                        : dy_bd     ? dy_bd
                                    : dy_bd_.in(a.grad_output.data, ws, bufs_);
    bwd_weights_.bind(DNNL_ARG_SRC,
                      x_from_saved_ ? a.saved[0] : x_bw_.in(a.inputs[0].data, ws, bufs_));
    bwd_weights_.bind(DNNL_ARG_DIFF_DST, dy_bw);
    void* dw = a.grad_params[0].data;
    bwd_weights_.bind(DNNL_ARG_DIFF_WEIGHTS, dw_bw_.out_target(dw, ws, bufs_));
    if (has_bias_)
      bwd_weights_.bind(DNNL_ARG_DIFF_BIAS,
                        want_b ? a.grad_params[1].data : bufs_.at(ws, unwanted_bias_));
    bwd_weights_.bind_scratchpad(ws);
    bwd_weights_.execute();
    dw_bw_.out_finish(dw, ws, bufs_);
  }

 private:
  std::int64_t rows_ = 0, out_ = 0;
  bool has_bias_ = false, x_from_saved_ = false, dy_shared_ = false;
  std::size_t unwanted_bias_ = 0;
  KernelBuffers bufs_;
  Port x_fwd_, w_fwd_, y_fwd_, dy_bd_, w_bd_, dx_bd_, x_bw_, dy_bw_, dw_bw_;
  std::string impl_;
  PrimitiveCall fwd_, bwd_data_, bwd_weights_;
};

}  // namespace

void register_linear_kernels(Backend& backend) {
  backend.add_kernel("linear", [](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    return std::make_unique<LinearKernel>(ctx);
  });
}

}  // namespace trainer::cpu
