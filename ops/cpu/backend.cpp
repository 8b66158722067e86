// The CPU backend: 64-byte aligned host memory and the table of CPU kernels.
#include <cstdlib>
#include <cstring>
#include <new>

#include "ops/cpu/kernels.h"
#include "ops/cpu/vector_ops.h"
#include "ops/kernel.h"

namespace trainer {
namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend() : Backend("cpu") { register_cpu_kernels(*this); }

  void* allocate(std::size_t bytes) override {
    const std::size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void release(void* ptr) override { std::free(ptr); }
  void copy_to_device(void* dst, const void* src, std::size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  VectorOps& vector_ops() override { return cpu_vector_ops(); }
};

}  // namespace

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace trainer
