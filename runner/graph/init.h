// Parameter initializers (kaiming/xavier normal/uniform, uniform_fan_in, zeros,
// ones), seeded per parameter name so a parameter's initial value does not
// depend on what else the model holds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runner/graph/ir.h"

namespace trainer::graph {

// A stable 64-bit hash of a name (FNV-1a). Parameter initialisation and each
// stochastic layer's random stream are keyed by name, so neither depends on
// what else the model holds or which layers the fusion pass folded together.
std::uint64_t hash_name(const std::string& name);

// Fills `out` (numel(param.shape) floats) with the parameter's initial values.
void initialize_param(const Param& param, std::uint64_t seed, std::vector<float>& out);

}  // namespace trainer::graph
