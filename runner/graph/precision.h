// Mixed precision: which nodes of a model compute in the low type. Under
// `precision: bf16` / `fp16`, matmul-like ops (OpDef::low_precision: conv2d,
// linear) compute in bf16 / fp16; batchnorm statistics, softmax, losses,
// reductions and the optimizer stay float32, and so do the parameters (the
// master weights) and the activations and gradients in memory. The casts are
// part of each low-precision kernel's input conversion (ops/cpu/layout.h),
// one pass over the data instead of a separate cast node and buffer.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ops/dtype.h"
#include "runner/graph/ir.h"

namespace trainer::graph {

// The compute type of matmul-like ops for a `precision.mode` (none for fp32 / tf32).
std::optional<DType> low_precision_type(const std::string& mode);

// Sets Node::compute on every node for `mode`.
void assign_compute_types(Graph& graph, const std::string& mode);

// Per parameter: whether it is the weight (first parameter) of a node that
// computes in bf16. Such a weight gets a bf16 copy that the optimizer rewrites
// with each update, so the kernels read it without converting every step.
std::vector<bool> bf16_weight_copies(const Graph& graph);

// Whether `node` reads its weights as their bf16 copy (`copies`: bf16_weight_copies).
bool reads_bf16_weight_copy(const Node& node, const std::vector<bool>& copies);

}  // namespace trainer::graph
