// Status checks for every CUDA library we call: a failed call becomes a
// std::runtime_error naming the call and the library's own status string.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nccl.h>

#include <cstddef>
#include <string>

namespace trainer::cuda {

void check(cudaError_t status, const char* call);
void check(cudnnStatus_t status, const char* call);
void check(cublasStatus_t status, const char* call);
void check(ncclResult_t status, const char* call);

// For a status deliberately ignored (releases in destructors, optional
// queries): a failed CUDA runtime call's error is cleared, so that the next
// checked call or launch check is not blamed for it. The libraries' statuses
// leave nothing behind.
inline void ignore_status(cudaError_t status) {
  if (status != cudaSuccess) cudaGetLastError();
}
inline void ignore_status(cudnnStatus_t) {}
inline void ignore_status(cublasStatus_t) {}
inline void ignore_status(ncclResult_t) {}

// Throws std::logic_error("<what> inside a recorded step") when `stream` is
// being captured into a CUDA graph: for work that must not be recorded (a
// host upload, an allocation), checked before anything is queued, so that a
// refused step leaves no half-joined stream behind.
void refuse_inside_recording(cudaStream_t stream, const std::string& what);

// cudaMalloc that reports, on failure, how much was asked and how much is free.
void* device_malloc(std::size_t bytes);

// A cuBLAS status as "CUBLAS_STATUS_NOT_SUPPORTED: <what it means>".
std::string cublas_status_text(cublasStatus_t status);

}  // namespace trainer::cuda
