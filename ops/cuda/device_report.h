// What `trainer doctor` asks of the CUDA stack, in plain types so the runner
// needs no CUDA header: driver and runtime versions, the library versions
// compiled against and loaded (and the files they were loaded from), and
// every visible GPU.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace trainer::cuda {

struct GpuReport {
  int index = 0;
  std::string name;
  int major = 0, minor = 0;                       // compute capability
  std::size_t memory_total = 0, memory_free = 0;  // free: with GpuQuery::free_memory
  bool ecc = false;
  bool bf16 = false;  // sm_80 and later
  bool tf32 = false;  // sm_80 and later
  std::string error;  // set when the GPU could not be queried
};

struct CudaReport {
  int driver_version = 0;   // 0: no driver installed
  int runtime_version = 0;  // the CUDA runtime this build uses
  bool driver_missing = false;
  bool driver_too_old = false;  // driver present but older than the runtime
  std::string device_error;     // cudaGetDeviceCount's failure, when another one
  std::string cudnn_compiled, cudnn_loaded;
  std::string cublas_compiled, cublas_loaded;
  std::string nccl_compiled, nccl_loaded;
  // The shared library files in use ("" when unknown): which of several
  // installs the dynamic loader picked is what a version mismatch turns on.
  std::string runtime_file, cudnn_file, cublas_file, nccl_file;
  std::vector<GpuReport> gpus;
};

// How far cuda_report looks at each GPU: its properties only (no CUDA context
// is created: a run's manifest), or also its free memory, which opens a
// context on every visible GPU (`trainer doctor`). Either way the calling
// thread's current device is left as it was.
enum class GpuQuery { properties, free_memory };

CudaReport cuda_report(GpuQuery query);

// Empty when GPU `device` is there to use; otherwise why not (no driver, no
// such GPU). Opens no CUDA context: a process that starts ranks checks every
// GPU they will use without holding memory (or, in an exclusive compute mode,
// the GPU itself) on each; whether one is busy shows when its rank opens it.
std::string gpu_unavailable_reason(int device = 0);

// "13.0" from 13000.
std::string cuda_version_string(int version);

}  // namespace trainer::cuda
