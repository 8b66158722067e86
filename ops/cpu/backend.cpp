// The CPU backend: 64-byte aligned host memory (counted, for the memory
// figures of logs and the plan check) and the table of CPU kernels.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <optional>
#include <string>

#include <sys/resource.h>
#include <unistd.h>

#include "ops/allocation_counter.h"
#include "ops/cpu/cgroup_memory.h"
#include "ops/cpu/onednn.h"

#include "ops/cpu/kernels.h"
#include "ops/cpu/vector_ops.h"
#include "ops/kernel.h"

namespace trainer {
namespace {

// The instruction set oneDNN uses here, when it is below AVX-512.
std::string effective_isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41:
      return "SSE4.1";
    case dnnl::cpu_isa::avx:
      return "AVX";
    case dnnl::cpu_isa::avx2:
      return "AVX2";
    case dnnl::cpu_isa::avx2_vnni:
      return "AVX2 with VNNI";
    default:
      return "an instruction set below AVX-512";
  }
}

// The process's resident set, from /proc/self/statm (0 when unknown).
std::size_t resident_bytes() {
  std::ifstream in("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  if (!(in >> pages >> resident)) return 0;
  return resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

// What the machine could still give this process and the others beside it:
// the least of MemAvailable and the room left under its cgroups' memory
// limits (v1 or v2, nested ones included: cgroup_memory.h). 0 when neither
// is known.
std::size_t machine_available_bytes() {
  std::optional<std::size_t> least;
  const auto consider = [&](std::size_t bytes) { least = least ? std::min(*least, bytes) : bytes; };
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  std::size_t kib = 0;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") consider(kib * 1024);
  if (const auto room = cgroup_memory_room()) consider(*room);
  return least.value_or(0);
}

// The room left under this process's own address-space limit (ulimit -v);
// 0 without one.
std::size_t address_space_room() {
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 0;
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0;
  statm >> pages;
  const std::size_t used = pages * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return limit.rlim_cur > used ? limit.rlim_cur - used : 1;  // 1: none left, but known
}

// What this process could still allocate: the machine's, and the room under
// its own address-space limit. 0 when none is known.
std::size_t available_bytes() {
  const std::size_t machine = machine_available_bytes(), own = address_space_room();
  if (machine == 0 || own == 0) return std::max(machine, own);
  return std::min(machine, own);
}

class CpuBackend final : public Backend {
 public:
  CpuBackend() : Backend("cpu") { register_cpu_kernels(*this); }

  void* allocate(std::size_t bytes) override {
    const std::size_t rounded = std::max<std::size_t>(64, (bytes + 63) / 64 * 64);
    void* p = std::aligned_alloc(64, rounded);
    if (!p)
      throw OutOfMemoryError("out of host memory: asked for " +
                             std::to_string(rounded / (1024 * 1024)) + " MiB, " +
                             std::to_string(available_bytes() / (1024 * 1024)) + " MiB available");
    counter_.added(p, rounded);
    return p;
  }
  void release(void* ptr) override {
    counter_.removed(ptr);
    std::free(ptr);
  }
  MemoryStats memory_stats() const override {
    MemoryStats stats = counter_.stats();
    stats.reserved = resident_bytes();
    return stats;
  }
  std::size_t available_memory() const override { return available_bytes(); }
  std::size_t shared_available_memory() const override { return machine_available_bytes(); }
  bool supports_compute(DType type) const override {
    // bf16 through oneDNN, whose bf16 kernels need AVX-512; fp16 emulated
    // (fp16 rounding around float32 kernels) everywhere.
    if (type == DType::bf16) return dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core;
    return type == DType::f32 || type == DType::f16;
  }
  std::string compute_refusal(DType type) const override {
    if (type == DType::bf16)
      return "oneDNN's bf16 kernels need AVX-512, and oneDNN runs at " + effective_isa_name() +
             " on this CPU" +
             (std::getenv("ONEDNN_MAX_CPU_ISA") || std::getenv("DNNL_MAX_CPU_ISA")
                  ? " (as ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA limits it)"
                  : "") +
             ": use precision: fp32, or fp16 (emulated)";
    return "use precision: fp32";
  }
  ActivationFormats activation_formats() const override {
    // oneDNN's fast convolution, batchnorm and pooling kernels run on nChw16c
    // (AVX-512) or nChw8c (AVX2); its bf16 kernels need AVX-512.
    const auto isa = dnnl::get_effective_cpu_isa();
    if (isa >= dnnl::cpu_isa::avx512_core) return {16, true};
    if (isa >= dnnl::cpu_isa::avx2) return {8, false};
    return {};
  }
  // relu as a post-op of the inner product, inside oneDNN's batch
  // normalisation (fuse_norm_relu) and in add's own loop. The gelus need their
  // input kept, which a post-op cannot write: they run after the GEMM either way.
  bool fuses_activation(const std::string& op, Epilogue activation) const override {
    return (op == "linear" || op == "batchnorm" || op == "add") && activation == Epilogue::relu;
  }
  void copy_to_device(void* dst, const void* src, std::size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  VectorOps& vector_ops() override { return cpu_vector_ops(); }

 private:
  AllocationCounter counter_;
};

}  // namespace

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace trainer
