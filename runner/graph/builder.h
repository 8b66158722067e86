// Builds the graph IR from the YAML `model:` section: sequential `layers:`,
// named layers with `inputs:` (a DAG: residual add, concat), reusable `blocks:`
// with parameters and `repeat:`, and the `loss:`. Validates every layer against
// its op's attribute schema and infers every shape; each error names the layer
// and its position in the YAML.
#pragma once

#include <cstdint>

#include "runner/config/diagnostics.h"
#include "runner/config/node.h"
#include "runner/graph/ir.h"

namespace trainer::graph {

struct ModelInput {
  std::int64_t batch = 1;
  Shape sample_shape;             // one sample, without the batch dimension
  std::int64_t num_classes = 0;   // > 0: integer class labels; 0: regression targets
  bool classes_inferred = false;  // num_classes read off the largest label, not declared
  Shape target_shape;             // regression: one target, without the batch dimension
};

// Returns the graph; every problem found is added to `diagnostics` (the graph is
// then incomplete and must not be used).
Graph build_graph(const config::Node& model, const ModelInput& input,
                  config::Diagnostics& diagnostics);

// `model.loss` as a map {type: <loss>, ...}: as written, from the `loss: mse`
// shorthand, or the default loss.
config::Node loss_spec(const config::Node& model);

// Every layer's type, keys and values, checked without the data (no shapes,
// block parameters left to their instances): what `trainer print-config`
// can check. Adds each problem to `diagnostics`.
void check_model_fields(const config::Node& model, config::Diagnostics& diagnostics);

}  // namespace trainer::graph
