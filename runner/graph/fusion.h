// The fusion pass: a layer with an `activation` attribute (linear, batchnorm,
// add) whose output is read only by an activation layer the backend applies
// inside that layer's own work (Backend::fuses_activation: on the CPU relu
// after linear, batchnorm and add; on CUDA relu and gelu_tanh after linear,
// relu after add) becomes one node with that `activation`. The activation's node and the
// pre-activation value go; the layer writes the activation's output value, so
// every later reader is unchanged, and its parameters (and checkpoint keys)
// stay as they were. Both layers must be recomputed alike under activation
// checkpointing.
#pragma once

#include <functional>
#include <string>

#include "ops/kernel.h"
#include "runner/graph/ir.h"

namespace trainer::graph {

// Which (op, activation) pairs to fold: a backend's fuses_activation.
using FusionRule = std::function<bool(const std::string& op, Epilogue activation)>;

// Folds every activation layer `fuses` accepts into the layer before it;
// returns how many.
int fuse_activations(Graph& graph, const FusionRule& fuses);

// What a node computes, for `trainer plan`: its op, and its epilogue when it
// has one ("linear+relu").
std::string op_label(const Node& node);

}  // namespace trainer::graph
