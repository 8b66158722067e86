// The CUDA backend: device memory, streams and the CUDA kernel table of one GPU.
#pragma once

#include <cuda_runtime_api.h>

#include "ops/kernel.h"

namespace trainer {

// The backend of GPU `device` (an index among the visible GPUs, after
// CUDA_VISIBLE_DEVICES), created on first use. Throws a clear error when the
// device does not exist or no driver is installed.
Backend& cuda_backend(int device);

// The stream that backend queues its work on, for a library whose work must
// run in order with it (NCCL's gradient reduction between backward and the
// update).
cudaStream_t cuda_compute_stream(int device);

}  // namespace trainer
