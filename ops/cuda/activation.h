// The CUDA activations as calls over n contiguous floats, for kernels that run
// one after their own work: linear, when cuBLASLt has no epilogue for its
// activation (the erf gelu, 16-bit operands with a bias, or a shape it
// refuses), and for the gradient of the pre-activation in its backward.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/epilogue.h"

namespace trainer::cuda {

// y = act(x); y may be x.
void activation_forward(Epilogue act, const float* x, float* y, std::int64_t n,
                        cudaStream_t stream);
// dx = act'(.) dy, where `v` is the output for relu and the input for the gelus.
void activation_backward(Epilogue act, const float* dy, const float* v, float* dx, std::int64_t n,
                         cudaStream_t stream);

}  // namespace trainer::cuda
