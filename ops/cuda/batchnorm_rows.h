// batchnorm over the real rows of a batch, as own CUDA kernels: the kernel a
// training program takes instead of cuDNN's when it meets short batches
// (KernelContext::short_batches: cuDNN would count the padding rows in its
// statistics) or synchronises batchnorm over several ranks (`sync: true`).
// batchnorm_rows.cu says what it computes.
#pragma once

#include <memory>

#include "ops/cuda/context.h"
#include "ops/kernel.h"

namespace trainer::cuda {

// `ranks`: the job whose statistics it combines (SyncBN); null or one rank:
// this batch alone.
std::unique_ptr<Kernel> make_real_rows_batchnorm_kernel(const KernelContext& k, CudaContext& ctx,
                                                        Collective* ranks);

}  // namespace trainer::cuda
