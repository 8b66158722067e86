// CPU model from /proc/cpuinfo, ISA extensions from cpuid.
#include "runner/train/host_info.h"

#include <cpuid.h>

#include <fstream>

namespace trainer::train {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

std::string cpu_isa() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  std::string isa;
  auto add = [&](bool present, const char* name) {
    if (present) isa += isa.empty() ? name : std::string(" ") + name;
  };
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    add(b & (1u << 5), "avx2");
    add(b & (1u << 16), "avx512f");
    add(b & (1u << 30), "avx512bw");
    add(c & (1u << 11), "avx512_vnni");
    add(d & (1u << 22), "amx_bf16");
    add(d & (1u << 24), "amx_tile");
    add(d & (1u << 25), "amx_int8");
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) add(a & (1u << 5), "avx512_bf16");
  return isa.empty() ? "none of avx2/avx512/amx" : isa;
}

}  // namespace trainer::train
