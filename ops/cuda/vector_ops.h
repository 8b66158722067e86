// The CUDA implementation of the whole-model vector work (ops/update.h):
// multi-tensor optimizer steps in one launch, gradient norm with non-finite
// detection, accumulation and fill, all on the compute stream.
#pragma once

#include <memory>

#include "ops/cuda/context.h"
#include "ops/update.h"

namespace trainer::cuda {

std::unique_ptr<VectorOps> make_vector_ops(CudaContext& ctx);

}  // namespace trainer::cuda
