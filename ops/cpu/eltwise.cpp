// Element-wise oneDNN operations (eltwise.h).
#include "ops/cpu/eltwise.h"

namespace trainer::cpu {

using elt_fwd = dnnl::eltwise_forward;
using elt_bwd = dnnl::eltwise_backward;

EltwiseSpec eltwise_spec(Epilogue epilogue) {
  using alg = dnnl::algorithm;
  switch (epilogue) {
    case Epilogue::relu:
      return {alg::eltwise_relu_use_dst_for_bwd, 0.0f, true};
    case Epilogue::gelu:
      return {alg::eltwise_gelu_erf, 0.0f, false};
    case Epilogue::gelu_tanh:
      return {alg::eltwise_gelu_tanh, 0.0f, false};
    case Epilogue::none:
      break;
  }
  return {alg::eltwise_linear, 1.0f, false};
}

Eltwise::Eltwise(EltwiseSpec spec, std::int64_t n, DType type, bool training)
    : uses_output_(spec.uses_output) {
  const auto md = plain_md({n}, dnnl_type(type));
  const auto attr = user_scratchpad_attr();
  auto& eng = cpu_engine();
  const auto prop =
      training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  elt_fwd::primitive_desc fwd_pd(elt_fwd::desc(prop, spec.algorithm, md, spec.alpha, 0.0f), attr,
                                 eng);
  fwd_ = PrimitiveCall(elt_fwd(fwd_pd));
  const bool serial = n < kSerialElements;
  if (serial) fwd_.run_serially();
  fwd_.arg(DNNL_ARG_SRC, md);
  fwd_.arg(DNNL_ARG_DST, md);
  impl_ = impl_name(fwd_pd);
  if (!training) return;
  elt_bwd::primitive_desc bwd_pd(elt_bwd::desc(spec.algorithm, md, md, spec.alpha, 0.0f), attr, eng,
                                 fwd_pd);
  bwd_ = PrimitiveCall(elt_bwd(bwd_pd));
  if (serial) bwd_.run_serially();
  bwd_.arg(uses_output_ ? DNNL_ARG_DST : DNNL_ARG_SRC, md);
  bwd_.arg(DNNL_ARG_DIFF_DST, md);
  bwd_.arg(DNNL_ARG_DIFF_SRC, md);
}

void Eltwise::forward(const void* x, void* y) {
  fwd_.bind(DNNL_ARG_SRC, x);
  fwd_.bind(DNNL_ARG_DST, y);
  fwd_.execute();
}

void Eltwise::backward(const void* x_or_y, const void* dy, void* dx) {
  bwd_.bind(uses_output_ ? DNNL_ARG_DST : DNNL_ARG_SRC, x_or_y);
  bwd_.bind(DNNL_ARG_DIFF_DST, dy);
  bwd_.bind(DNNL_ARG_DIFF_SRC, dx);
  bwd_.execute();
}

}  // namespace trainer::cpu
