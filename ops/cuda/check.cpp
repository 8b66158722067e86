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
  // cuDNN keeps why its last call failed apart from the status.
  char why[1024] = {};
  cudnnGetLastErrorString(why, sizeof why);
  fail(call,
       std::string(cudnnGetErrorString(status)) + (why[0] ? std::string(" (") + why + ")" : ""));
}

std::string cublas_status_text(cublasStatus_t status) {
  return std::string(cublasLtGetStatusName(status)) + ": " + cublasLtGetStatusString(status);
}

void check(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  fail(call, cublas_status_text(status));
}

void check(ncclResult_t status, const char* call) {
  if (status == ncclSuccess) return;
  fail(call, ncclGetErrorString(status));
}

void refuse_inside_recording(cudaStream_t stream, const std::string& what) {
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream, &capturing), "cudaStreamIsCapturing");
  if (capturing != cudaStreamCaptureStatusNone)
    throw std::logic_error(what + " inside a recorded step");
}

void* device_malloc(std::size_t bytes) {
  void* ptr = nullptr;
  const cudaError_t status = cudaMalloc(&ptr, bytes == 0 ? 256 : bytes);
  if (status == cudaSuccess) return ptr;
  cudaGetLastError();
  if (status == cudaErrorMemoryAllocation) {
    std::size_t free_bytes = 0, total_bytes = 0;
    ignore_status(cudaMemGetInfo(&free_bytes, &total_bytes));
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
