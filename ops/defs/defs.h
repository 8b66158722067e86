// Registration of the built-in op definitions: one function per op family,
// each in its own file under ops/defs/.
#pragma once

#include "ops/op.h"

namespace trainer {

void register_builtin_ops(OpRegistry& registry);

}  // namespace trainer
