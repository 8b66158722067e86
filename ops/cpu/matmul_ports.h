// MatmulPorts: the argument conversions of a matmul-like op (conv2d, linear)
// around its three oneDNN primitives: forward (x, w -> y), backward data
// (dy, w -> dx) and backward weights (x, dy -> dw). Each argument goes between
// the graph's tensor (plain float32, or the format the format pass gave it)
// and the layout and type its primitive chose (layout.h Port); the converted input is kept from
// forward to backward when the backward-weights call reads the same layout, and the incoming
// gradient is converted once when both backward calls read it the same way. The kernels bind their
// own extra arguments (bias) and run the calls.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstddef>
#include <vector>

#include "ops/cpu/layout.h"
#include "ops/cpu/onednn.h"
#include "ops/kernel.h"

namespace trainer::cpu {

class MatmulPorts {
 public:
  // The graph's tensors as they lie in memory: input x, weights w as the
  // kernel reads them (float32, or their bf16 copy), output y, and the
  // weights' float32 gradient dw.
  struct Plain {
    dnnl::memory::desc x, w, y, dw;
  };

  // An inference kernel: the forward primitive alone.
  void plan_forward(const dnnl::primitive_desc_base& fwd, const Plain& plain, KernelBuffers& bufs,
                    bool emulate_half);
  // A training kernel: forward, backward data and backward weights.
  void plan_training(const dnnl::primitive_desc_base& fwd,
                     const dnnl::primitive_desc_base& bwd_data,
                     const dnnl::primitive_desc_base& bwd_weights, const Plain& plain,
                     KernelBuffers& bufs, bool emulate_half, bool plain_dy = false);

  // The converted input and weights kept from forward to backward (when the
  // backward calls read them as converted; none: {}).
  std::vector<std::size_t> saved_bytes() const;

  // Binds SRC, WEIGHTS and DST of the forward call, writing `y` (the output,
  // or where the kernel wants the GEMM's result); finish_forward() after it ran.
  void bind_forward(PrimitiveCall& call, const KernelArgs& a, const KernelBuffers& bufs, void* y);
  void finish_forward(const KernelArgs& a, const KernelBuffers& bufs, void* y);

  // At the start of each backward call: `dy` is the gradient the GEMMs read
  // (the output's, or one the kernel derived from it).
  void begin_backward(const void* dy) {
    dy_ = dy;
    dy_converted_ = nullptr;
  }
  // Backward data: dx from dy and w (binds, runs, converts dx back).
  void backward_data(PrimitiveCall& call, const KernelArgs& a, const KernelBuffers& bufs);
  // Binds SRC, DIFF_DST and DIFF_WEIGHTS of the backward-weights call (after
  // backward_data of the same step, when there was one); finish_backward_weights()
  // after it ran.
  void bind_backward_weights(PrimitiveCall& call, const KernelArgs& a, const KernelBuffers& bufs);
  void finish_backward_weights(const KernelArgs& a, const KernelBuffers& bufs);

  // The incoming gradient as plain float32, for the kernel's own bias sums
  // (converted when its format is another; plan_training with plain_dy).
  const float* plain_dy(const KernelArgs& a, const KernelBuffers& bufs);

 private:
  void* saved_w(const KernelArgs& a) const;

  bool x_from_saved_ = false, w_from_saved_ = false, dy_shared_ = false;
  const void* dy_ = nullptr;            // the incoming gradient, this step
  const void* dy_converted_ = nullptr;  // dy in the backward-data layout, this step
  Port x_fwd_, w_fwd_, y_fwd_, dy_bd_, w_bd_, dx_bd_, x_bw_, dy_bw_, dw_bw_, dy_plain_;
};

}  // namespace trainer::cpu
