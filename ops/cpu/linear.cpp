// linear on oneDNN inner product: forward, backward data, backward weights (+ bias).
// Under mixed precision (KernelContext::compute) the input, weights and incoming
// gradient are converted to bf16 (or rounded through fp16) on their way into the
// primitives (layout.h Port), unless they are stored in bf16 already (the format
// pass); y and dx are written in their tensors' type, dw in float32.
// An epilogue activation (the `activation` attribute): relu runs as a oneDNN
// post-op of the forward primitive; the gelus, which oneDNN cannot also keep
// the pre-activation of, write it to a saved buffer and run after the GEMM.
// The backward turns dy into the pre-activation's gradient in the workspace
// first, then runs the GEMMs on it.
#include <algorithm>
#include <memory>

#include "ops/cpu/eltwise.h"
#include "ops/cpu/families.h"
#include "ops/cpu/layout.h"
#include "ops/cpu/matmul_ports.h"
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
    epilogue_ = epilogue_of(*ctx.attrs);
    const auto src = tensor_md(x, ctx.input_format(0)), w = plain_md({out_, x[1]});
    const auto dst = tensor_md(ctx.output, ctx.output_format);
    const auto b = plain_md({out_});
    // float32: the plain layouts. bf16: the primitives read bf16 (x, w, dy) in the
    // layouts they choose and write y and dx in their tensors' type, dw in
    // float32. fp16: float32 primitives with every argument rounded through fp16.
    const bool low = ctx.compute == DType::bf16;
    const bool half = ctx.compute == DType::f16;
    const auto in_md = [&](const dnnl::memory::desc& md) {
      return low ? any_md(md, dnnl::memory::data_type::bf16) : md;
    };
    // The weights' bf16 copy when the program keeps one (KernelContext::param_decls):
    // the primitives read it as it is (oneDNN's bf16 gemm takes plain weights),
    // with no conversion per step.
    const bool copy = ctx.param_decls[0].dtype == DType::bf16;
    const auto w_read = copy ? plain_md({out_, x[1]}, dnnl::memory::data_type::bf16) : w;
    const auto w_prim = copy ? w_read : in_md(w);
    const auto attr = user_scratchpad_attr();
    auto& eng = cpu_engine();
    const auto prop =
        ctx.training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    auto fwd_attr = user_scratchpad_attr();
    if (epilogue_ == Epilogue::relu) {
      dnnl::post_ops relu;
      relu.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
      fwd_attr.set_post_ops(relu);
    }
    ip_fwd::primitive_desc fwd_pd =
        has_bias_
            ? ip_fwd::primitive_desc(ip_fwd::desc(prop, in_md(src), w_prim, b, dst), fwd_attr, eng)
            : ip_fwd::primitive_desc(ip_fwd::desc(prop, in_md(src), w_prim, dst), fwd_attr, eng);
    fwd_ = PrimitiveCall(ip_fwd(fwd_pd));
    const bool serial = 2 * rows_ * x[1] * out_ < kSerialFlops;
    if (serial) fwd_.run_serially();
    for (int arg : {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST})
      fwd_.arg(arg, chosen_md(fwd_pd, arg));
    if (has_bias_) fwd_.arg(DNNL_ARG_BIAS, b);
    bufs_.need_scratchpad(add_scratchpad(fwd_, fwd_pd));
    impl_ = impl_name(fwd_pd);
    if (epilogue_ != Epilogue::none) impl_ += std::string("+") + epilogue_name(epilogue_);
    const MatmulPorts::Plain plain{src, w_read, dst, w};
    const DType y_type = ctx.output_format.dtype;
    y_bytes_ = static_cast<std::size_t>(rows_ * out_) * dtype_size(y_type);
    if (epilogue_ != Epilogue::none)
      activation_ = Eltwise(eltwise_spec(epilogue_), rows_ * out_, y_type, ctx.training);
    if (!ctx.training) {
      ports_.plan_forward(fwd_pd, plain, bufs_, half);
      return;
    }

    // Backward data reads the weights as the forward converted them when it can
    // (then they are converted once per step); otherwise in its own layout.
    const auto backward_data_pd = [&](const dnnl::memory::desc& weights) {
      return ip_bwd_data::primitive_desc(ip_bwd_data::desc(src, weights, in_md(dst)), attr, eng,
                                         fwd_pd);
    };
    ip_bwd_data::primitive_desc bd_pd = backward_data_pd(w_prim);
    if (low && chosen_md(bd_pd, DNNL_ARG_WEIGHTS) != chosen_md(fwd_pd, DNNL_ARG_WEIGHTS)) {
      try {
        bd_pd = backward_data_pd(chosen_md(fwd_pd, DNNL_ARG_WEIGHTS));
      } catch (const dnnl::error&) {  // no implementation for that layout: keep its own
      }
    }
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

    ports_.plan_training(fwd_pd, bd_pd, bw_pd, plain, bufs_, half, has_bias_);
    // Room for a bias gradient nobody asked for (in the backward phase).
    if (has_bias_) unwanted_bias_ = bufs_.add(static_cast<std::size_t>(out_) * sizeof(float));
    // The pre-activation's gradient (backward phase).
    if (epilogue_ != Epilogue::none) pre_activation_grad_ = bufs_.add(y_bytes_);
  }

  // The input converted by the forward, for the backward-weights call, then
  // the pre-activation when the backward differentiates from it.
  std::vector<std::size_t> saved_bytes() const override {
    std::vector<std::size_t> bytes = ports_.saved_bytes();
    if (epilogue_keeps_input(epilogue_)) bytes.push_back(y_bytes_);
    return bytes;
  }
  std::size_t workspace_bytes() const override { return bufs_.total(); }
  std::string implementation() const override { return impl_; }

  void forward(const KernelArgs& a) override {
    // The GEMM writes y, or with a gelu the pre-activation it keeps.
    const bool keeps_input = epilogue_keeps_input(epilogue_);
    void* z = keeps_input ? pre_activation(a) : a.output.data;
    ports_.bind_forward(fwd_, a, bufs_, z);
    if (has_bias_) fwd_.bind(DNNL_ARG_BIAS, a.params[1].data);
    fwd_.execute();
    ports_.finish_forward(a, bufs_, z);
    if (keeps_input) activation_.forward(z, a.output.data);
  }

  void backward(const KernelArgs& a) override {
    // The GEMMs read dy, or with an epilogue the pre-activation's gradient,
    // computed here into the workspace.
    const void* dy = a.grad_output.data;
    if (epilogue_ != Epilogue::none) {
      void* dz = bufs_.at(a.workspace, pre_activation_grad_);
      activation_.backward(activation_.uses_output() ? a.output.data : pre_activation(a), dy, dz);
      dy = dz;
    }
    ports_.begin_backward(dy);
    if (a.grad_inputs[0]) ports_.backward_data(bwd_data_, a, bufs_);
    const bool want_w = a.grad_params.size() > 0 && a.grad_params[0];
    const bool want_b = has_bias_ && a.grad_params.size() > 1 && a.grad_params[1];
    if (!want_w && !want_b) return;
    if (!want_w) {  // bias only: the column sums of dy
      const float* plain = ports_.plain_dy(a, bufs_);
      float* db = a.grad_params[1].f32();
      std::fill(db, db + out_, 0.0f);
      for (std::int64_t r = 0; r < rows_; ++r)
        for (std::int64_t o = 0; o < out_; ++o) db[o] += plain[r * out_ + o];
      return;
    }
    ports_.bind_backward_weights(bwd_weights_, a, bufs_);
    if (has_bias_)
      bwd_weights_.bind(DNNL_ARG_DIFF_BIAS,
                        want_b ? a.grad_params[1].data : bufs_.at(a.workspace, unwanted_bias_));
    bwd_weights_.execute();
    ports_.finish_backward_weights(a, bufs_);
  }

 private:
  // The pre-activation (kept by the gelus): the last saved buffer.
  void* pre_activation(const KernelArgs& a) const { return a.saved.back(); }

  std::int64_t rows_ = 0, out_ = 0;
  bool has_bias_ = false;
  Epilogue epilogue_ = Epilogue::none;
  Eltwise activation_;  // the epilogue's element-wise operation (backward too for relu)
  std::size_t y_bytes_ = 0;
  std::size_t unwanted_bias_ = 0, pre_activation_grad_ = 0;
  KernelBuffers bufs_;
  MatmulPorts ports_;
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
