// The fusion pass: a linear layer whose output is read only by an activation
// layer the backend applies inside its GEMM (Backend::fuses_into_matmul:
// relu on oneDNN, relu and gelu_tanh on cuBLASLt) becomes one node, the linear
// with that `activation`. The activation's node and the pre-activation value
// go; the linear writes the activation's output value, so every later reader
// is unchanged, and its parameters (and checkpoint keys) stay as they were.
// Both layers must be recomputed alike under activation checkpointing.
#pragma once

#include <functional>
#include <string>

#include "ops/kernel.h"
#include "runner/graph/ir.h"

namespace trainer::graph {

// Folds every activation `fuses` accepts into the linear before it (a backend
// passes its fuses_into_matmul); returns how many.
int fuse_activations(Graph& graph, const std::function<bool(Epilogue)>& fuses);

// What a node computes, for `trainer plan`: its op, and its epilogue when it
// has one ("linear+relu").
std::string op_label(const Node& node);

}  // namespace trainer::graph
