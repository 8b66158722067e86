// Plain tensors <-> the memory layouts and data types oneDNN primitives prefer. A primitive
// created with format_tag::any picks a blocked layout (nChw16c, OIhw16i16o...)
// where its fast implementations live; the graph only knows plain row-major
// tensors. Relayout converts one argument between the two through a buffer of
// the kernel's own (or passes the pointer through when the layouts agree), and
// KernelBuffers carves those buffers and the primitives' shared scratchpad out
// of one workspace.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstddef>
#include <string>

#include "ops/cpu/onednn.h"

namespace trainer::cpu {

// The layout `pd` chose for argument `arg` (DNNL_ARG_SRC, DNNL_ARG_DIFF_WEIGHTS...).
dnnl::memory::desc chosen_md(const dnnl::primitive_desc_base& pd, int arg);

// `md` with its format left to the primitive (format_tag::any), in `type`
// (default: md's own).
dnnl::memory::desc any_md(const dnnl::memory::desc& md);
dnnl::memory::desc any_md(const dnnl::memory::desc& md, dnnl::memory::data_type type);

// oneDNN's name of a layout: "abcd" (plain NCHW), "aBcd16b" (nChw16c), "acdb" (NHWC)...
std::string layout_name(const dnnl::memory::desc& md);

// Converts data from layout `from` to layout `to` with a reorder primitive created
// once; no primitive and no buffer when the two layouts are the same.
class Relayout {
 public:
  Relayout() = default;
  // For an input of the primitive: user layout `plain` -> the primitive's `chosen`.
  static Relayout into(const dnnl::memory::desc& plain, const dnnl::memory::desc& chosen);
  // For an output of the primitive: its `chosen` layout -> the user's `plain`.
  static Relayout out_of(const dnnl::memory::desc& chosen, const dnnl::memory::desc& plain);

  bool needed() const { return reorder_.valid(); }
  // Bytes of the buffer in the primitive's layout (0 when no conversion is needed).
  std::size_t bytes() const { return needed() ? bytes_ : 0; }

  // Input direction: converts `src` into `buffer` and returns `buffer`, or
  // returns `src` unchanged when no conversion is needed.
  const void* to_buffer(const void* src, void* buffer);
  // Output direction: where the primitive should write (`buffer` when a
  // conversion follows, else the user's `dst`), then from_buffer() converts.
  void* target(void* dst, void* buffer) const { return needed() ? buffer : dst; }
  void from_buffer(const void* buffer, void* dst);

 private:
  Relayout(const dnnl::memory::desc& from, const dnnl::memory::desc& to, std::size_t bytes);
  void run(const void* src, void* dst);

  PrimitiveCall reorder_;
  std::size_t bytes_ = 0;
};

// Workspace of a kernel: the primitives' scratchpad (shared, used within one
// primitive call) at offset 0, then the kernel's conversion buffers. Buffers of
// one phase (one kernel call: the forward, the backward) are disjoint; a new
// phase reuses the space of the previous ones.
class KernelBuffers {
 public:
  void need_scratchpad(std::size_t bytes);
  // Reserves a buffer in the current phase; returns its handle (an offset after
  // the scratchpad).
  std::size_t add(std::size_t bytes);
  void next_phase();
  void* at(void* workspace, std::size_t handle) const;
  std::size_t total() const;

 private:
  std::size_t scratch_ = 0, phase_ = 0, largest_phase_ = 0;
};

// One argument of a primitive and the graph's plain float32 tensor behind it:
// the conversion between the two (layout and data type, e.g. plain f32 ->
// blocked bf16 under mixed precision) and its buffer in the workspace. With
// `emulate_half` the values also pass through fp16 rounding (half.h), for
// fp16 mixed precision on a CPU without fp16 kernels.
class Port {
 public:
  // An input of the primitive: plain -> chosen.
  void plan_in(const dnnl::memory::desc& plain, const dnnl::memory::desc& chosen, KernelBuffers& ws,
               bool emulate_half = false);
  // An output of the primitive: chosen -> plain.
  void plan_out(const dnnl::memory::desc& chosen, const dnnl::memory::desc& plain,
                KernelBuffers& ws, bool emulate_half = false);
  // As plan_in, but the converted copy lives in a buffer the caller provides
  // (a saved buffer kept from forward to backward); 0 bytes: none is needed.
  void plan_in_saved(const dnnl::memory::desc& plain, const dnnl::memory::desc& chosen,
                     bool emulate_half = false);
  std::size_t saved_bytes() const { return copies() ? bytes_ : 0; }

  // The primitive's view of input `user` (converted into the buffer, or `user` itself).
  const void* in(const void* user, void* workspace, const KernelBuffers& bufs);
  const void* in_saved(const void* user, void* saved);
  // Where the primitive writes output `user`; then out_finish() converts.
  void* out_target(void* user, void* workspace, const KernelBuffers& bufs) const;
  void out_finish(void* user, void* workspace, const KernelBuffers& bufs);

 private:
  bool copies() const { return relayout_.needed() || emulate_half_; }
  void set(Relayout relayout, std::size_t plain_bytes, bool emulate_half);

  Relayout relayout_;
  bool emulate_half_ = false;
  std::size_t bytes_ = 0;        // of the buffer
  std::size_t plain_bytes_ = 0;  // of the user's tensor
  std::size_t buffer_ = 0;       // handle in KernelBuffers
};

}  // namespace trainer::cpu
