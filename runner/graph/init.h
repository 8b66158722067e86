// Parameter initializers (kaiming/xavier normal/uniform, zeros, ones), seeded
// per parameter name so a parameter's initial value does not depend on what
// else the model holds.
#pragma once

#include <cstdint>
#include <vector>

#include "runner/graph/ir.h"

namespace trainer::graph {

// Fills `out` (numel(param.shape) floats) with the parameter's initial values.
void initialize_param(const Param& param, std::uint64_t seed, std::vector<float>& out);

}  // namespace trainer::graph
