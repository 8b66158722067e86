// The op registry and the backend kernel table.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <new>
#include <stdexcept>

#include "ops/defs/defs.h"
#include "ops/kernel.h"
#include "ops/op.h"

namespace trainer {

void OpRegistry::add(OpDef def) {
  if (find(def.name)) throw std::logic_error("op '" + def.name + "' registered twice");
  defs_.push_back(std::move(def));
}

const OpDef* OpRegistry::find(const std::string& name) const {
  for (const auto& d : defs_)
    if (d.name == name) return &d;
  return nullptr;
}

std::vector<std::string> OpRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& d : defs_) out.push_back(d.name);
  std::sort(out.begin(), out.end());
  return out;
}

const OpRegistry& op_registry() {
  static const OpRegistry registry = [] {
    OpRegistry r;
    register_builtin_ops(r);
    return r;
  }();
  return registry;
}

void* Backend::allocate_host(std::size_t bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) throw std::bad_alloc();
  return p;
}

void Backend::release_host(void* ptr) {
  std::free(ptr);
}

std::unique_ptr<RecordedWork> Backend::record(const std::function<void()>&, std::string& why_not) {
  why_not = "the " + name_ + " backend runs its kernels as they are called";
  return nullptr;
}

double Backend::time_work_ms(const std::function<void()>& queue_work) {
  synchronize();
  const auto start = std::chrono::steady_clock::now();
  queue_work();
  synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

std::unique_ptr<Kernel> Backend::make_kernel(const KernelContext& ctx) const {
  auto it = kernels_.find(ctx.op->name);
  if (it == kernels_.end())
    throw std::runtime_error("backend '" + name_ + "' has no kernel for op '" + ctx.op->name + "'");
  if (!supports_compute(ctx.compute))
    throw std::runtime_error("backend '" + name_ + "' cannot compute " + ctx.op->name + " in " +
                             std::string(dtype_name(ctx.compute)) + ": " +
                             compute_refusal(ctx.compute));
  return it->second(ctx);
}

}  // namespace trainer
