// Relayout (reorders between a plain tensor and a primitive's chosen layout) and
// KernelBuffers (the workspace carve-up).
#include "ops/cpu/layout.h"

#include <algorithm>
#include <vector>

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
  return dnnl::memory::desc(md.dims(), md.data_type(), dnnl::memory::format_tag::any);
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

}  // namespace trainer::cpu
