// Status checks for every CUDA library we call: a failed call becomes a
// std::runtime_error naming the call and the library's own status string.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nccl.h>

#include <cstddef>

namespace trainer::cuda {

void check(cudaError_t status, const char* call);
void check(cudnnStatus_t status, const char* call);
void check(cublasStatus_t status, const char* call);
void check(ncclResult_t status, const char* call);

// cudaMalloc that reports, on failure, how much was asked and how much is free.
void* device_malloc(std::size_t bytes);

// The name of a cuBLAS status (cuBLAS has no such function of its own).
const char* cublas_status_name(cublasStatus_t status);

}  // namespace trainer::cuda
