// Status checks: turn CUDA, cuDNN, cuBLAS and NCCL statuses into clear errors.
#include "ops/cuda/check.h"

#include "ops/out_of_memory.h"

#include <stdexcept>
#include <string>

namespace trainer::cuda {
namespace {

std::string mib(std::size_t bytes) {
  return std::to_string(bytes / (1024 * 1024)) + " MiB (" + std::to_string(bytes) + " bytes)";
}

[[noreturn]] void fail(const char* call, const std::string& what) {
  throw std::runtime_error(std::string(call) + " failed: " + what);
}

}  // namespace

void check(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear the sticky-free error so later calls are not blamed
  fail(call, std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status));
}

void check(cudnnStatus_t status, const char* call) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  fail(call, cudnnGetErrorString(status));
}

const char* cublas_status_name(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "unknown cuBLAS status";
}

void check(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  fail(call, cublas_status_name(status));
}

void check(ncclResult_t status, const char* call) {
  if (status == ncclSuccess) return;
  fail(call, ncclGetErrorString(status));
}

void* device_malloc(std::size_t bytes) {
  void* ptr = nullptr;
  const cudaError_t status = cudaMalloc(&ptr, bytes == 0 ? 256 : bytes);
  if (status == cudaSuccess) return ptr;
  cudaGetLastError();
  if (status == cudaErrorMemoryAllocation) {
    std::size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    int device = -1;
    cudaGetDevice(&device);
    throw OutOfMemoryError("out of GPU memory on device " + std::to_string(device) +
                           ": asked for " + mib(bytes) + ", " + mib(free_bytes) + " free of " +
                           mib(total_bytes) +
                           "; reduce the batch size or the model, or use a GPU with more memory");
  }
  check(status, "cudaMalloc");
  return nullptr;
}

}  // namespace trainer::cuda
