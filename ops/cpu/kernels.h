// Registration of the CPU kernels: one function per op family, each in its own
// file under ops/cpu/.
#pragma once

#include "ops/kernel.h"

namespace trainer {

void register_cpu_kernels(Backend& backend);

}  // namespace trainer
