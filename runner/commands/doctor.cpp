// `trainer doctor`: what this machine offers for training and whether it works:
// the CPU (model, ISA, threads), oneDNN, and in a CUDA build the driver, the
// CUDA runtime, cuDNN / cuBLAS / NCCL and every GPU. Exit 0 when training can
// run here (on the CPU at least), 1 when something needed is broken.
#include <oneapi/dnnl/dnnl.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "ops/kernel.h"
#include "runner/commands.h"
#include "runner/commands/library_version.h"
#include "runner/train/host_info.h"

#ifdef TRAINER_WITH_CUDA
#include "ops/cuda/device_report.h"
#endif

namespace trainer {
namespace {

// CPU training works when oneDNN can create its CPU engine.
bool report_cpu() {
  std::printf("CPU\n");
  std::printf("  model:    %s\n", train::cpu_model().c_str());
  std::printf("  ISA:      %s\n", train::cpu_isa().c_str());
  const char* omp_threads = std::getenv("OMP_NUM_THREADS");
  std::printf("  threads:  %u hardware threads%s%s\n", std::thread::hardware_concurrency(),
              omp_threads ? ", OMP_NUM_THREADS=" : "", omp_threads ? omp_threads : "");
  const dnnl_version_t* v = dnnl_version();
  std::printf("  oneDNN:   %d.%d.%d (cpu runtime %s)\n", v->major, v->minor, v->patch,
              v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "threads");
  dnnl_engine_t engine = nullptr;
  const bool ok = dnnl_engine_create(&engine, dnnl_cpu, 0) == dnnl_success;
  if (engine) dnnl_engine_destroy(engine);
  if (ok) {
    const Backend& cpu = cpu_backend();
    const bool bf16 = cpu.supports_compute(DType::bf16);
    std::printf("  compute:  fp32, %sfp16 (emulated: fp16 rounding around float32 kernels)%s%s\n",
                bf16 ? "bf16 (oneDNN), " : "",
                bf16 ? "" : "; no bf16: ", bf16 ? "" : cpu.compute_refusal(DType::bf16).c_str());
  }
  std::printf("  status:   %s\n",
              ok ? "CPU training works" : "BROKEN: oneDNN cannot create a CPU engine");
  return ok;
}

#ifdef TRAINER_WITH_CUDA
// Returns false when the CUDA stack is present but broken.
bool report_cuda() {
  const cuda::CudaReport r = cuda::cuda_report(cuda::GpuQuery::free_memory);
  std::printf("CUDA\n");
  // "  (from /usr/local/cuda/lib64/libcudnn.so.9)", or nothing when unknown.
  const auto from = [](const std::string& file) {
    return file.empty() ? std::string() : " (from " + file + ")";
  };
  std::printf("  runtime:  %s%s\n", cuda::cuda_version_string(r.runtime_version).c_str(),
              from(r.runtime_file).c_str());
  std::printf("  driver:   %s\n", r.driver_missing
                                      ? "none (driver version 0)"
                                      : cuda::cuda_version_string(r.driver_version).c_str());
  std::string broken_library;  // the first library of another major version
  const auto library = [&](const char* label, const char* name, const std::string& compiled,
                           const std::string& loaded, const std::string& file) {
    const LibraryVersionCheck check = check_library_version(name, compiled, loaded);
    std::printf("  %-9s compiled %s, loaded %s%s%s%s\n", label, compiled.c_str(),
                loaded.empty() ? "unknown" : loaded.c_str(), from(file).c_str(),
                check.note.empty() ? "" : ": ", check.note.c_str());
    if (check.broken && broken_library.empty()) broken_library = check.note;
  };
  library("cuDNN:", "cuDNN", r.cudnn_compiled, r.cudnn_loaded, r.cudnn_file);
  library("cuBLAS:", "cuBLAS", r.cublas_compiled, r.cublas_loaded, r.cublas_file);
  library("NCCL:", "NCCL", r.nccl_compiled, r.nccl_loaded, r.nccl_file);
  if (r.driver_missing) {
    std::printf(
        "  status:   no GPU: no NVIDIA driver is installed on this machine (driver version 0; "
        "the CUDA runtime's \"CUDA driver version is insufficient for CUDA runtime version\" "
        "means no driver at all here, not an old one). Training runs on the "
        "CPU (devices: cpu); to use a GPU, run on a machine with an NVIDIA GPU and install "
        "its driver (R580 or newer for CUDA %s).\n",
        cuda::cuda_version_string(r.runtime_version).c_str());
    return true;
  }
  if (r.driver_too_old) {
    std::printf(
        "  status:   BROKEN: CUDA driver version is insufficient for CUDA runtime version: the "
        "driver supports CUDA %s, this build needs CUDA %s. Update the NVIDIA driver (R580 or "
        "newer), or use devices: cpu.\n",
        cuda::cuda_version_string(r.driver_version).c_str(),
        cuda::cuda_version_string(r.runtime_version).c_str());
    return false;
  }
  if (!broken_library.empty()) {
    std::printf("  status:   BROKEN: %s\n", broken_library.c_str());
    return false;
  }
  if (!r.device_error.empty()) {
    std::printf("  status:   BROKEN: cannot list the GPUs: %s\n", r.device_error.c_str());
    return false;
  }
  if (r.gpus.empty()) {
    std::printf(
        "  status:   no GPU: the driver is installed but reports no GPU; training runs "
        "on the CPU\n");
    return true;
  }
  bool ok = true;
  for (const auto& g : r.gpus) {
    std::printf(
        "  GPU %d:    %s, compute capability %d.%d, %.1f GiB total, %.1f GiB free, ECC %s, "
        "bf16 %s, tf32 %s\n",
        g.index, g.name.c_str(), g.major, g.minor, static_cast<double>(g.memory_total) / (1 << 30),
        static_cast<double>(g.memory_free) / (1 << 30), g.ecc ? "on" : "off",
        g.bf16 ? "yes" : "no (needs sm_80+)", g.tf32 ? "yes" : "no (needs sm_80+)");
    if (!g.error.empty()) {
      std::printf("            BROKEN: %s\n", g.error.c_str());
      ok = false;
    }
  }
  std::printf("  status:   %s\n", ok ? "GPU training available" : "BROKEN: a GPU cannot be used");
  return ok;
}
#endif

}  // namespace

int command_doctor() {
  std::printf("trainer %s\n", TRAINER_VERSION);
  const bool cpu_ok = report_cpu();
#ifdef TRAINER_WITH_CUDA
  const bool cuda_ok = report_cuda();
#else
  std::printf("CUDA\n  status:   not built (configure with -DTRAINER_CUDA=ON for GPU training)\n");
  const bool cuda_ok = true;
#endif
  std::fflush(stdout);
  return cpu_ok && cuda_ok ? 0 : 1;
}

}  // namespace trainer
