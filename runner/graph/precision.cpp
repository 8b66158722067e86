// Compute types per node under mixed precision.
#include "runner/graph/precision.h"

namespace trainer::graph {

std::optional<DType> low_precision_type(const std::string& mode) {
  if (mode == "bf16") return DType::bf16;
  if (mode == "fp16") return DType::f16;
  return std::nullopt;
}

std::vector<bool> bf16_weight_copies(const Graph& graph) {
  std::vector<bool> copies(graph.params.size(), false);
  for (const Node& node : graph.nodes)
    if (node.compute == DType::bf16 && node.op->low_precision && !node.params.empty())
      copies[node.params[0]] = true;
  return copies;
}

bool reads_bf16_weight_copy(const Node& node, const std::vector<bool>& copies) {
  return node.compute == DType::bf16 && !node.params.empty() && copies[node.params[0]];
}

void assign_compute_types(Graph& graph, const std::string& mode) {
  const std::optional<DType> low = low_precision_type(mode);
  for (Node& node : graph.nodes) node.compute = low && node.op->low_precision ? *low : DType::f32;
}

}  // namespace trainer::graph
