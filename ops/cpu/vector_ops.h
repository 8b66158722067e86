// CPU implementation of the whole-model vector work (ops/update.h): loops the compiler
// vectorises, spread over the backend's OpenMP threads when they are long.
#pragma once

#include "ops/update.h"

namespace trainer {

VectorOps& cpu_vector_ops();

}  // namespace trainer
