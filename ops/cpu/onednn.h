// The shared oneDNN engine and stream of the CPU backend, the thread-count
// control, and PrimitiveCall: a primitive with its argument list built once, so
// a step only binds data pointers and executes (no allocation per call).
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ops/shape.h"
#include "ops/tensor.h"

namespace trainer::cpu {

dnnl::engine& cpu_engine();
dnnl::stream& cpu_stream();

// Sets the number of threads oneDNN uses for the calls made from this thread
// (the Debian oneDNN is built with OpenMP: this is omp_set_num_threads, looked
// up in the OpenMP runtime oneDNN loads). Returns false when no OpenMP runtime
// is present; then OMP_NUM_THREADS in the environment decides.
bool set_cpu_threads(int n);
int cpu_threads();  // the current OpenMP thread limit, or 0 when unknown

// OMP_NUM_THREADS when the environment sets it to a positive number (its
// first entry for a nested list); nullopt otherwise.
std::optional<int> omp_num_threads();
// The CPUs this process may run on (its affinity mask: taskset, a container's
// cpuset), at least 1.
int usable_cpus();
// The compute threads `backend.threads: 0` stands for in one process:
// OMP_NUM_THREADS when set (as PyTorch users expect), else usable_cpus().
int default_cpu_threads();

// Some oneDNN kernels (the bf16 ones among them) return with the upper halves
// of the AVX registers in use, on every thread they ran on. Until a vzeroupper,
// each SSE instruction of the code that runs next on that thread (our own
// loops: losses, optimizers) pays a transition penalty: the MLP's optimizer
// step took 3-4x longer after bf16 kernels. PrimitiveCall::execute clears the
// calling thread; our own parallel loops clear each of their threads.
void clear_upper_vector_state();

// A plain row-major f32 memory descriptor of `shape` (any rank 1..6).
dnnl::memory::desc plain_md(const Shape& shape,
                            dnnl::memory::data_type type = dnnl::memory::data_type::f32);

// The descriptor of a tensor of `shape` in `format` (ops/tensor.h): plain
// row-major, or nChw16c / nChw8c for a channel-blocked image; f32 or bf16.
dnnl::memory::desc tensor_md(const Shape& shape, const TensorFormat& format);
// The oneDNN data type of `type` (f32, bf16, f16).
dnnl::memory::data_type dnnl_type(DType type);

// The name of the implementation oneDNN chose for `pd`, e.g. "onednn:gemm:jit".
std::string impl_name(const dnnl::primitive_desc_base& pd);

// A scratchpad-in-user-memory attribute: the scratchpad is the kernel's workspace.
dnnl::primitive_attr user_scratchpad_attr();

class PrimitiveCall {
 public:
  PrimitiveCall() = default;
  explicit PrimitiveCall(dnnl::primitive primitive) : primitive_(std::move(primitive)) {}

  // Declares an argument of the primitive; its buffer is bound before execute().
  void arg(int id, const dnnl::memory::desc& md);
  // Points argument `id` at `data` (unchanged pointers cost nothing).
  void bind(int id, const void* data);
  // Binds the scratchpad to `workspace` when this primitive has one.
  void bind_scratchpad(void* workspace);
  void execute();  // on the shared stream; CPU execution is synchronous
  bool valid() const { return static_cast<bool>(primitive_); }
  // Runs on the calling thread alone: for primitives too small for a parallel
  // region to pay (waking the other threads costs more than the work, and far
  // more when the cores are shared). Takes effect for primitives that size their
  // thread team when executed (eltwise, gemm-based inner product).
  void run_serially() { serial_ = true; }

 private:
  struct Arg {
    int id;
    dnnl::memory memory;
    const void* bound;
  };
  dnnl::primitive primitive_;
  bool serial_ = false;
  std::vector<Arg> args_;
  std::vector<dnnl_exec_arg_t> exec_args_;
};

// Work below which a primitive runs serially (see PrimitiveCall::run_serially):
// about 20 microseconds on one core.
constexpr std::int64_t kSerialElements = std::int64_t{1} << 17;  // element-wise ops
constexpr std::int64_t kSerialFlops = std::int64_t{4} << 20;     // GEMM-like ops

// Adds DNNL_ARG_SCRATCHPAD to `call` when `pd` needs one; returns its size.
std::size_t add_scratchpad(PrimitiveCall& call, const dnnl::primitive_desc_base& pd);

}  // namespace trainer::cpu
