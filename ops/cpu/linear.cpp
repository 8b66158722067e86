// linear on oneDNN inner product: forward, backward data, backward weights (+ bias).
#include <algorithm>
#include <memory>

#include "ops/cpu/families.h"
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
    const auto attr = user_scratchpad_attr();
    auto& eng = cpu_engine();
    const auto prop =
        ctx.training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    ip_fwd::primitive_desc fwd_pd =
        has_bias_ ? ip_fwd::primitive_desc(ip_fwd::desc(prop, src, w, b, dst), attr, eng)
                  : ip_fwd::primitive_desc(ip_fwd::desc(prop, src, w, dst), attr, eng);
    fwd_ = PrimitiveCall(ip_fwd(fwd_pd));
    const bool serial = 2 * rows_ * x[1] * out_ < kSerialFlops;
    if (serial) fwd_.run_serially();
    fwd_.arg(DNNL_ARG_SRC, src);
    fwd_.arg(DNNL_ARG_WEIGHTS, w);
    if (has_bias_) fwd_.arg(DNNL_ARG_BIAS, b);
    fwd_.arg(DNNL_ARG_DST, dst);
    scratch_ = add_scratchpad(fwd_, fwd_pd);
    impl_ = impl_name(fwd_pd);
    if (!ctx.training) return;

    ip_bwd_data::primitive_desc bd_pd(ip_bwd_data::desc(src, w, dst), attr, eng, fwd_pd);
    bwd_data_ = PrimitiveCall(ip_bwd_data(bd_pd));
    if (serial) bwd_data_.run_serially();
    bwd_data_.arg(DNNL_ARG_DIFF_DST, dst);
    bwd_data_.arg(DNNL_ARG_WEIGHTS, w);
    bwd_data_.arg(DNNL_ARG_DIFF_SRC, src);
    scratch_ = std::max(scratch_, add_scratchpad(bwd_data_, bd_pd));

    ip_bwd_weights::primitive_desc bw_pd =
        has_bias_
            ? ip_bwd_weights::primitive_desc(ip_bwd_weights::desc(src, w, b, dst), attr, eng,
                                             fwd_pd)
            : ip_bwd_weights::primitive_desc(ip_bwd_weights::desc(src, w, dst), attr, eng, fwd_pd);
    bwd_weights_ = PrimitiveCall(ip_bwd_weights(bw_pd));
    if (serial) bwd_weights_.run_serially();
    bwd_weights_.arg(DNNL_ARG_SRC, src);
    bwd_weights_.arg(DNNL_ARG_DIFF_DST, dst);
    bwd_weights_.arg(DNNL_ARG_DIFF_WEIGHTS, w);
    if (has_bias_) bwd_weights_.arg(DNNL_ARG_DIFF_BIAS, b);
    scratch_ = std::max(scratch_, add_scratchpad(bwd_weights_, bw_pd));
  }

  // The scratchpad, then room for a bias gradient nobody asked for.
  std::size_t workspace_bytes() const override { return bias_offset() + out_bytes(); }
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
  std::size_t out_bytes() const { return has_bias_ ? static_cast<std::size_t>(out_) * 4 : 0; }

  std::int64_t rows_ = 0, out_ = 0;
  bool has_bias_ = false;
  std::size_t scratch_ = 0;
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
