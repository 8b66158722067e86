// The CUDA backend: device memory, streams and the CUDA kernel table of one GPU.
#pragma once

#include "ops/kernel.h"

namespace trainer {

// The backend of GPU `device` (an index among the visible GPUs, after
// CUDA_VISIBLE_DEVICES), created on first use. Throws a clear error when the
// device does not exist or no driver is installed.
Backend& cuda_backend(int device);

}  // namespace trainer
