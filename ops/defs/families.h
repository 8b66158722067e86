// One registration function per op family; each lives in its own file under
// ops/defs/ and is listed once in defs.cpp.
#pragma once

#include "ops/op.h"

namespace trainer::defs {

void register_linear(OpRegistry& registry);      // linear.cpp
void register_conv(OpRegistry& registry);        // conv.cpp
void register_norm(OpRegistry& registry);        // norm.cpp: batchnorm, layernorm
void register_activation(OpRegistry& registry);  // activation.cpp
void register_pool(OpRegistry& registry);        // pool.cpp
void register_shape_ops(OpRegistry& registry);   // shape_ops.cpp: flatten, reshape, add, concat
void register_dropout(OpRegistry& registry);     // dropout.cpp
void register_loss(OpRegistry& registry);        // loss.cpp: cross_entropy, mse

}  // namespace trainer::defs
