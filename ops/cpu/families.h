// One registration function per CPU kernel family; each lives in its own file
// under ops/cpu/ and is listed once in kernels.cpp.
#pragma once

#include "ops/kernel.h"

namespace trainer::cpu {

void register_linear_kernels(Backend& backend);      // linear.cpp
void register_conv_kernels(Backend& backend);        // conv.cpp
void register_norm_kernels(Backend& backend);        // norm.cpp: batchnorm, layernorm
void register_activation_kernels(Backend& backend);  // activation.cpp
void register_pool_kernels(Backend& backend);        // pool.cpp
void register_shape_kernels(Backend& backend);       // shape_ops.cpp: flatten, reshape, add, concat
void register_dropout_kernels(Backend& backend);     // dropout.cpp
void register_loss_kernels(Backend& backend);        // loss.cpp: cross_entropy, mse

}  // namespace trainer::cpu
