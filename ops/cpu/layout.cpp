// Relayout (reorders between a plain tensor and a primitive's chosen layout),
// KernelBuffers (the workspace carve-up) and Port (one converted argument).
#include "ops/cpu/layout.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/cpu/half.h"

namespace trainer::cpu {
namespace {

std::size_t align64(std::size_t n) {
  return (n + 63) / 64 * 64;
}

}  // namespace

dnnl::memory::desc chosen_md(const dnnl::primitive_desc_base& pd, int arg) {
  return pd.query_md(dnnl::query::exec_arg_md, arg);
}

dnnl::memory::desc any_md(const dnnl::memory::desc& md) {
  return any_md(md, md.data_type());
}

dnnl::memory::desc any_md(const dnnl::memory::desc& md, dnnl::memory::data_type type) {
  return dnnl::memory::desc(md.dims(), type, dnnl::memory::format_tag::any);
}

std::string layout_name(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.format_kind != dnnl_blocked) return "any";
  const dnnl_blocking_desc_t& blk = d.format_desc.blocking;
  std::vector<int> order(static_cast<std::size_t>(d.ndims));
  for (int k = 0; k < d.ndims; ++k) order[static_cast<std::size_t>(k)] = k;
  std::stable_sort(order.begin(), order.end(),
                   [&](int x, int y) { return blk.strides[x] > blk.strides[y]; });
  std::string name;
  for (int k : order) {
    bool blocked = false;
    for (int b = 0; b < blk.inner_nblks; ++b) blocked = blocked || blk.inner_idxs[b] == k;
    name += static_cast<char>((blocked ? 'A' : 'a') + k);
  }
  for (int b = 0; b < blk.inner_nblks; ++b)
    name += std::to_string(blk.inner_blks[b]) + static_cast<char>('a' + blk.inner_idxs[b]);
  return name;
}

Relayout Relayout::into(const dnnl::memory::desc& plain, const dnnl::memory::desc& chosen) {
  return Relayout(plain, chosen, chosen.get_size());
}

Relayout Relayout::out_of(const dnnl::memory::desc& chosen, const dnnl::memory::desc& plain) {
  return Relayout(chosen, plain, chosen.get_size());
}

Relayout::Relayout(const dnnl::memory::desc& from, const dnnl::memory::desc& to,
                   std::size_t bytes) {
  if (from == to) return;
  dnnl::reorder::primitive_desc pd(cpu_engine(), from, cpu_engine(), to);
  reorder_ = PrimitiveCall(dnnl::reorder(pd));
  reorder_.arg(DNNL_ARG_FROM, from);
  reorder_.arg(DNNL_ARG_TO, to);
  bytes_ = bytes;
}

const void* Relayout::to_buffer(const void* src, void* buffer) {
  if (!needed()) return src;
  run(src, buffer);
  return buffer;
}

void Relayout::from_buffer(const void* buffer, void* dst) {
  if (needed()) run(buffer, dst);
}

void Relayout::run(const void* src, void* dst) {
  reorder_.bind(DNNL_ARG_FROM, src);
  reorder_.bind(DNNL_ARG_TO, dst);
  reorder_.execute();
}

void KernelBuffers::need_scratchpad(std::size_t bytes) {
  scratch_ = std::max(scratch_, bytes);
}

std::size_t KernelBuffers::add(std::size_t bytes) {
  const std::size_t handle = phase_;
  phase_ += align64(bytes);
  largest_phase_ = std::max(largest_phase_, phase_);
  return handle;
}

void KernelBuffers::next_phase() {
  phase_ = 0;
}

void* KernelBuffers::at(void* workspace, std::size_t handle) const {
  return static_cast<char*>(workspace) + align64(scratch_) + handle;
}

std::size_t KernelBuffers::total() const {
  return align64(scratch_) + largest_phase_;
}

void Port::set(Relayout relayout, std::size_t plain_bytes, bool emulate_half) {
  relayout_ = std::move(relayout);
  emulate_half_ = emulate_half;
  plain_bytes_ = plain_bytes;
  bytes_ = relayout_.needed() ? relayout_.bytes() : plain_bytes;
}

void Port::plan_in(const dnnl::memory::desc& plain, const dnnl::memory::desc& chosen,
                   KernelBuffers& ws, bool emulate_half) {
  set(Relayout::into(plain, chosen), plain.get_size(), emulate_half);
  if (copies()) buffer_ = ws.add(bytes_);
}

void Port::plan_out(const dnnl::memory::desc& chosen, const dnnl::memory::desc& plain,
                    KernelBuffers& ws, bool emulate_half) {
  set(Relayout::out_of(chosen, plain), plain.get_size(), emulate_half);
  if (relayout_.needed()) buffer_ = ws.add(bytes_);
}

void Port::plan_in_saved(const dnnl::memory::desc& plain, const dnnl::memory::desc& chosen,
                         bool emulate_half) {
  set(Relayout::into(plain, chosen), plain.get_size(), emulate_half);
}

const void* Port::in(const void* user, void* workspace, const KernelBuffers& bufs) {
  return in_saved(user, copies() ? bufs.at(workspace, buffer_) : nullptr);
}

const void* Port::in_saved(const void* user, void* buffer) {
  if (!copies()) return user;
  if (relayout_.needed())
    relayout_.to_buffer(user, buffer);
  else
    std::memcpy(buffer, user, bytes_);
  // The buffer is float32 whenever fp16 is emulated (the primitives compute in f32).
  if (emulate_half_) round_to_half(static_cast<float*>(buffer), bytes_ / sizeof(float));
  return buffer;
}

void* Port::out_target(void* user, void* workspace, const KernelBuffers& bufs) const {
  return relayout_.target(user, relayout_.needed() ? bufs.at(workspace, buffer_) : nullptr);
}

void Port::out_finish(void* user, void* workspace, const KernelBuffers& bufs) {
  if (relayout_.needed()) relayout_.from_buffer(bufs.at(workspace, buffer_), user);
  if (emulate_half_) round_to_half(static_cast<float*>(user), plain_bytes_ / sizeof(float));
}

}  // namespace trainer::cpu
