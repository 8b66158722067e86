// batchnorm over the real rows of a batch, as own CUDA kernels: the kernel a
// training program that meets short batches (KernelContext::short_batches)
// takes instead of cuDNN's, which would count the padding rows in its
// statistics. batchnorm_rows.cu says what it computes.
#pragma once

#include <memory>

#include "ops/cuda/context.h"
#include "ops/kernel.h"

namespace trainer::cuda {

std::unique_ptr<Kernel> make_real_rows_batchnorm_kernel(const KernelContext& k, CudaContext& ctx);

}  // namespace trainer::cuda
