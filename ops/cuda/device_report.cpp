// The CUDA stack as `trainer doctor` reports it.
#include "ops/cuda/device_report.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <dlfcn.h>
#include <nccl.h>

#include <stdexcept>

#include "ops/cuda/context.h"
#include "ops/cuda/cublaslt.h"
#include "ops/cuda/cudnn_descriptors.h"
#include "ops/cuda/cudnn_handle.h"
#include "ops/version_code.h"

namespace trainer::cuda {
namespace {

// The shared library file that holds `function` ("" when it is not in one).
template <typename Function>
std::string file_of(Function* function) {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(function), &info) == 0 || !info.dli_fname) return {};
  return info.dli_fname;
}

// Empty when cuDNN and cuBLASLt start on the current GPU; otherwise why not.
// cuDNN 9 loads its parts (graph, ops, cnn, engines, and NVRTC for runtime-
// compiled engines) only when first used: a handle and one convolution's
// algorithm query load them, so an install that lacks one shows here rather
// than at a run's first step.
std::string libraries_start_error() {
  try {
    const CudnnHandle cudnn(nullptr);
    const TensorDescriptor x(1, 1, 4, 4), y(1, 1, 4, 4);
    const FilterDescriptor w(1, 1, 1, 1);
    const ConvolutionDescriptor conv(Conv2dGeometry{}, /*allow_tf32=*/false);
    cudnnConvolutionFwdAlgoPerf_t found[1]{};
    int count = 0;
    check(cudnnGetConvolutionForwardAlgorithm_v7(cudnn.get(), x.get(), w.get(), conv.get(), y.get(),
                                                 1, &count, found),
          "cudnnGetConvolutionForwardAlgorithm_v7");
    const LtHandle cublas;
  } catch (const std::exception& e) {
    cudaGetLastError();
    return std::string("cuDNN or cuBLASLt cannot start on this GPU: ") + e.what() +
           " (cuDNN 9 loads its parts on first use: check that every library file of the "
           "install reported above is there, and that its version suits this CUDA)";
  }
  return {};
}

GpuReport query_gpu(int index, GpuQuery query) {
  GpuReport gpu;
  gpu.index = index;
  cudaDeviceProp props{};
  cudaError_t status = cudaGetDeviceProperties(&props, index);
  if (status != cudaSuccess) {
    gpu.error = std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(status);
    cudaGetLastError();
    return gpu;
  }
  gpu.name = props.name;
  gpu.major = props.major;
  gpu.minor = props.minor;
  gpu.memory_total = props.totalGlobalMem;
  gpu.ecc = props.ECCEnabled != 0;
  gpu.bf16 = props.major >= 8;
  gpu.tf32 = props.major >= 8;
  if (query == GpuQuery::properties) return gpu;
  std::size_t free_bytes = 0, total_bytes = 0;
  status = cudaSetDevice(index);
  if (status == cudaSuccess) status = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (status != cudaSuccess) {
    gpu.error =
        std::string("cannot open the GPU (busy or in a bad state?): ") + cudaGetErrorString(status);
    cudaGetLastError();
  } else {
    gpu.memory_free = free_bytes;
    gpu.error = libraries_start_error();
  }
  return gpu;
}

}  // namespace

std::string cuda_version_string(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

std::string gpu_unavailable_reason(int device) {
  try {
    require_visible_device(device);
    return {};
  } catch (const std::exception& e) {
    return e.what();
  }
}

CudaReport cuda_report(GpuQuery query) {
  CudaReport r;
  cudaDriverGetVersion(&r.driver_version);
  cudaRuntimeGetVersion(&r.runtime_version);
  r.cudnn_compiled = version_from_code(CUDNN_VERSION);
  r.cudnn_loaded = version_from_code(static_cast<long long>(cudnnGetVersion()));
  r.cublas_compiled = version_from_code(CUBLAS_VERSION);
  r.cublas_loaded = version_from_code(static_cast<long long>(cublasLtGetVersion()));
  r.nccl_compiled = version_from_code(NCCL_VERSION_CODE);
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) r.nccl_loaded = version_from_code(nccl);
  r.runtime_file = file_of(&cudaRuntimeGetVersion);
  r.cudnn_file = file_of(&cudnnGetVersion);
  r.cublas_file = file_of(&cublasLtGetVersion);
  r.nccl_file = file_of(&ncclGetVersion);

  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  cudaGetLastError();
  if (r.driver_version == 0) {
    r.driver_missing = true;
  } else if (status == cudaErrorInsufficientDriver ||
             r.driver_version / 1000 < r.runtime_version / 1000) {
    r.driver_too_old = true;
  } else if (status != cudaSuccess && status != cudaErrorNoDevice) {
    r.device_error = std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
  }
  if (status == cudaSuccess) {
    // Opening GPU i makes it the thread's current device: put back the one
    // the caller had (a run's kernels, handles and streams live on it).
    int current = -1;
    const bool had_device = cudaGetDevice(&current) == cudaSuccess;
    for (int i = 0; i < count; ++i) r.gpus.push_back(query_gpu(i, query));
    if (query == GpuQuery::free_memory && had_device) ignore_status(cudaSetDevice(current));
    cudaGetLastError();
  }
  return r;
}

}  // namespace trainer::cuda
