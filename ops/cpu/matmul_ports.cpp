// The argument conversions of conv2d and linear (see matmul_ports.h).
#include "ops/cpu/matmul_ports.h"

namespace trainer::cpu {
namespace {

// Plans `port` for an input of the forward (`plain` -> `fwd`): into a buffer
// kept from forward to backward when the backward call that reads it wants the
// same conversion (`backward`) and it is a copy; else into the workspace.
// Returns whether it is kept.
bool plan_kept_input(Port& port, const dnnl::memory::desc& plain, const dnnl::memory::desc& fwd,
                     const dnnl::memory::desc& backward, KernelBuffers& bufs, bool emulate_half) {
  const bool kept = backward == fwd && (fwd != plain || emulate_half);
  if (kept)
    port.plan_in_saved(plain, fwd, emulate_half);
  else
    port.plan_in(plain, fwd, bufs, emulate_half);
  return kept;
}

}  // namespace

void MatmulPorts::plan_forward(const dnnl::primitive_desc_base& fwd, const Plain& plain,
                               KernelBuffers& bufs, bool emulate_half) {
  x_fwd_.plan_in(plain.x, chosen_md(fwd, DNNL_ARG_SRC), bufs, emulate_half);
  w_fwd_.plan_in(plain.w, chosen_md(fwd, DNNL_ARG_WEIGHTS), bufs, emulate_half);
  y_fwd_.plan_out(chosen_md(fwd, DNNL_ARG_DST), plain.y, bufs, emulate_half);
}

void MatmulPorts::plan_training(const dnnl::primitive_desc_base& fwd,
                                const dnnl::primitive_desc_base& bwd_data,
                                const dnnl::primitive_desc_base& bwd_weights, const Plain& plain,
                                KernelBuffers& bufs, bool emulate_half, bool plain_dy) {
  // Forward phase: x -> x' (saved when the backward-weights call reads that
  // layout and it is a copy), w -> w', y' -> y.
  const auto fwd_x = chosen_md(fwd, DNNL_ARG_SRC), bw_x = chosen_md(bwd_weights, DNNL_ARG_SRC);
  x_from_saved_ = plan_kept_input(x_fwd_, plain.x, fwd_x, bw_x, bufs, emulate_half);
  // The converted weights too, when backward data reads the same conversion
  // (bf16: one conversion of the weights per step instead of two).
  const auto fwd_w = chosen_md(fwd, DNNL_ARG_WEIGHTS), bd_w = chosen_md(bwd_data, DNNL_ARG_WEIGHTS);
  w_from_saved_ = plan_kept_input(w_fwd_, plain.w, fwd_w, bd_w, bufs, emulate_half);
  y_fwd_.plan_out(chosen_md(fwd, DNNL_ARG_DST), plain.y, bufs, emulate_half);
  // Backward phase: dy -> dy', w -> w'', dx' -> dx; x -> x'' unless saved, dy
  // once more when the two calls want it in different layouts, dw' -> dw.
  bufs.next_phase();
  const auto bd_dy = chosen_md(bwd_data, DNNL_ARG_DIFF_DST);
  dy_bd_.plan_in(plain.y, bd_dy, bufs, emulate_half);
  if (!w_from_saved_) w_bd_.plan_in(plain.w, bd_w, bufs, emulate_half);
  dx_bd_.plan_out(chosen_md(bwd_data, DNNL_ARG_DIFF_SRC), plain.x, bufs, emulate_half);
  if (!x_from_saved_) x_bw_.plan_in(plain.x, bw_x, bufs, emulate_half);
  dy_shared_ = chosen_md(bwd_weights, DNNL_ARG_DIFF_DST) == bd_dy;
  if (!dy_shared_)
    dy_bw_.plan_in(plain.y, chosen_md(bwd_weights, DNNL_ARG_DIFF_DST), bufs, emulate_half);
  dw_bw_.plan_out(chosen_md(bwd_weights, DNNL_ARG_DIFF_WEIGHTS), plain.dw, bufs, emulate_half);
  if (plain_dy) {
    const auto dims = plain.y.dims();
    dy_plain_.plan_in(plain.y, plain_md(Shape(dims.begin(), dims.end())), bufs);
  }
}

const float* MatmulPorts::plain_dy(const KernelArgs& a, const KernelBuffers& bufs) {
  return static_cast<const float*>(dy_plain_.in(dy_, a.workspace, bufs));
}

std::vector<std::size_t> MatmulPorts::saved_bytes() const {
  std::vector<std::size_t> bytes;
  if (x_from_saved_) bytes.push_back(x_fwd_.saved_bytes());
  if (w_from_saved_) bytes.push_back(w_fwd_.saved_bytes());
  return bytes;
}

void* MatmulPorts::saved_w(const KernelArgs& a) const {
  return a.saved[x_from_saved_ ? 1 : 0];
}

void MatmulPorts::bind_forward(PrimitiveCall& call, const KernelArgs& a, const KernelBuffers& bufs,
                               void* y) {
  void* ws = a.workspace;
  call.bind(DNNL_ARG_SRC, x_from_saved_ ? x_fwd_.in_saved(a.inputs[0].data, a.saved[0])
                                        : x_fwd_.in(a.inputs[0].data, ws, bufs));
  call.bind(DNNL_ARG_WEIGHTS, w_from_saved_ ? w_fwd_.in_saved(a.params[0].data, saved_w(a))
                                            : w_fwd_.in(a.params[0].data, ws, bufs));
  call.bind(DNNL_ARG_DST, y_fwd_.out_target(y, ws, bufs));
  call.bind_scratchpad(ws);
}

void MatmulPorts::finish_forward(const KernelArgs& a, const KernelBuffers& bufs, void* y) {
  y_fwd_.out_finish(y, a.workspace, bufs);
}

void MatmulPorts::backward_data(PrimitiveCall& call, const KernelArgs& a,
                                const KernelBuffers& bufs) {
  void* ws = a.workspace;
  void* dx = a.grad_inputs[0].data;
  dy_converted_ = dy_bd_.in(dy_, ws, bufs);
  call.bind(DNNL_ARG_DIFF_DST, dy_converted_);
  call.bind(DNNL_ARG_WEIGHTS, w_from_saved_ ? saved_w(a) : w_bd_.in(a.params[0].data, ws, bufs));
  call.bind(DNNL_ARG_DIFF_SRC, dx_bd_.out_target(dx, ws, bufs));
  call.bind_scratchpad(ws);
  call.execute();
  dx_bd_.out_finish(dx, ws, bufs);
}

void MatmulPorts::bind_backward_weights(PrimitiveCall& call, const KernelArgs& a,
                                        const KernelBuffers& bufs) {
  void* ws = a.workspace;
  const void* dy = !dy_shared_     ? dy_bw_.in(dy_, ws, bufs)
                   : dy_converted_ ? dy_converted_
                                   : dy_bd_.in(dy_, ws, bufs);
  call.bind(DNNL_ARG_SRC, x_from_saved_ ? a.saved[0] : x_bw_.in(a.inputs[0].data, ws, bufs));
  call.bind(DNNL_ARG_DIFF_DST, dy);
  call.bind(DNNL_ARG_DIFF_WEIGHTS, dw_bw_.out_target(a.grad_params[0].data, ws, bufs));
  call.bind_scratchpad(ws);
}

void MatmulPorts::finish_backward_weights(const KernelArgs& a, const KernelBuffers& bufs) {
  dw_bw_.out_finish(a.grad_params[0].data, a.workspace, bufs);
}

}  // namespace trainer::cpu
