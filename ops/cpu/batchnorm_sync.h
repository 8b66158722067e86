// The batchnorm kernel with `sync: true` (SyncBN) on the CPU backend.
#pragma once

#include <memory>

#include "ops/kernel.h"

namespace trainer::cpu {

// Own loops over [N, C] or [N, C, H, W] (NCHW). In training the per-channel
// sums (forward: count, sum x, sum x^2; backward: sum dy, sum dy * xhat) are
// taken in double over the batch's real rows (StepValues::valid_rows) and
// added over the ranks of KernelContext::collective (none: this process
// alone, which equals plain batchnorm).
std::unique_ptr<Kernel> make_sync_batchnorm_kernel(const KernelContext& ctx);

}  // namespace trainer::cpu
