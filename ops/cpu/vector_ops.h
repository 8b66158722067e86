// CPU implementation of the whole-model vector work (ops/update.h): plain loops
// the compiler vectorises.
#pragma once

#include "ops/update.h"

namespace trainer {

VectorOps& cpu_vector_ops();

}  // namespace trainer
