// The shared oneDNN engine/stream, the thread-count control and PrimitiveCall.
#include "ops/cpu/onednn.h"

#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <thread>

namespace trainer::cpu {

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& cpu_stream() {
  static dnnl::stream stream(cpu_engine());
  return stream;
}

namespace {

using SetThreadsFn = void (*)(int);
using GetThreadsFn = int (*)();

// The OpenMP runtime's thread-limit functions (null without one), looked up once.
SetThreadsFn omp_set_threads() {
  static const auto fn = reinterpret_cast<SetThreadsFn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  return fn;
}

GetThreadsFn omp_get_threads() {
  static const auto fn = reinterpret_cast<GetThreadsFn>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
  return fn;
}

}  // namespace

bool set_cpu_threads(int n) {
  auto fn = omp_set_threads();
  if (!fn || n < 1) return false;
  fn(n);
  return true;
}

int cpu_threads() {
  auto fn = omp_get_threads();
  return fn ? fn() : 0;
}

std::optional<int> omp_num_threads() {
  const char* text = std::getenv("OMP_NUM_THREADS");
  if (!text) return std::nullopt;
  char* end = nullptr;
  const long n = std::strtol(text, &end, 10);
  if (end == text || (*end != '\0' && *end != ',') || n < 1 || n > 4096) return std::nullopt;
  return static_cast<int>(n);
}

int usable_cpus() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0 && CPU_COUNT(&allowed) > 0)
    return CPU_COUNT(&allowed);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int default_cpu_threads() {
  return omp_num_threads().value_or(usable_cpus());
}

dnnl::memory::desc plain_md(const Shape& shape, dnnl::memory::data_type type) {
  using tag = dnnl::memory::format_tag;
  static const tag tags[] = {tag::a, tag::ab, tag::abc, tag::abcd, tag::abcde, tag::abcdef};
  if (shape.empty() || shape.size() > 6)
    throw std::logic_error("plain_md: rank " + std::to_string(shape.size()) + " not supported");
  return dnnl::memory::desc(dnnl::memory::dims(shape.begin(), shape.end()), type,
                            tags[shape.size() - 1]);
}

dnnl::memory::data_type dnnl_type(DType type) {
  switch (type) {
    case DType::f32:
      return dnnl::memory::data_type::f32;
    case DType::bf16:
      return dnnl::memory::data_type::bf16;
    case DType::f16:
      return dnnl::memory::data_type::f16;
    default:
      throw std::logic_error("no oneDNN type for " + std::string(dtype_name(type)));
  }
}

dnnl::memory::desc tensor_md(const Shape& shape, const TensorFormat& format) {
  using tag = dnnl::memory::format_tag;
  const auto type = dnnl_type(format.dtype);
  if (format.channel_block == 0) return plain_md(shape, type);
  if (shape.size() != 4 || shape[1] % format.channel_block != 0)
    throw std::logic_error("tensor_md: a blocked layout needs [N, C, H, W] with C a multiple of " +
                           std::to_string(format.channel_block));
  const dnnl::memory::dims dims(shape.begin(), shape.end());
  if (format.channel_block == 16) return dnnl::memory::desc(dims, type, tag::aBcd16b);
  if (format.channel_block == 8) return dnnl::memory::desc(dims, type, tag::aBcd8b);
  throw std::logic_error("tensor_md: no layout for channel block " +
                         std::to_string(format.channel_block));
}

std::string impl_name(const dnnl::primitive_desc_base& pd) {
  return std::string("onednn:") + pd.impl_info_str();
}

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

void PrimitiveCall::arg(int id, const dnnl::memory::desc& md) {
  args_.push_back({id, dnnl::memory(md, cpu_engine(), DNNL_MEMORY_NONE), nullptr});
  exec_args_.clear();
  for (const auto& a : args_) exec_args_.push_back({a.id, a.memory.get()});
}

void PrimitiveCall::bind(int id, const void* data) {
  for (auto& a : args_) {
    if (a.id != id) continue;
    if (a.bound != data) {
      a.memory.set_data_handle(const_cast<void*>(data));
      a.bound = data;
    }
    return;
  }
  throw std::logic_error("PrimitiveCall::bind: argument " + std::to_string(id) + " not declared");
}

void PrimitiveCall::bind_scratchpad(void* workspace) {
  for (const auto& a : args_)
    if (a.id == DNNL_ARG_SCRATCHPAD) return bind(DNNL_ARG_SCRATCHPAD, workspace);
}

void clear_upper_vector_state() {
  static const bool has_avx = __builtin_cpu_supports("avx");
  if (has_avx) asm volatile("vzeroupper" ::: "memory");
}

void PrimitiveCall::execute() {
  const int threads = serial_ ? cpu_threads() : 0;
  if (threads > 1) set_cpu_threads(1);
  const dnnl_status_t status = dnnl_primitive_execute(
      primitive_.get(), cpu_stream().get(), static_cast<int>(exec_args_.size()), exec_args_.data());
  if (threads > 1) set_cpu_threads(threads);
  clear_upper_vector_state();
  if (status != dnnl_success)
    throw std::runtime_error("oneDNN primitive failed to execute (status " +
                             std::to_string(static_cast<int>(status)) + ")");
}

std::size_t add_scratchpad(PrimitiveCall& call, const dnnl::primitive_desc_base& pd) {
  const dnnl::memory::desc md = pd.scratchpad_desc();
  const std::size_t bytes = md.get_size();
  if (bytes) call.arg(DNNL_ARG_SCRATCHPAD, md);
  return bytes;
}

}  // namespace trainer::cpu
