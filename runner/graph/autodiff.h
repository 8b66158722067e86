// Reverse-mode autodiff over the graph IR: from each op's backward rule, builds
// the training schedule (forward steps, then backward steps in reverse order),
// the gradient values each backward step writes, and `add` nodes that sum the
// gradient of a value consumed more than once. Nodes that do not reach the loss
// are dropped from the schedule (dead-node elimination).
#pragma once

#include <vector>

#include "runner/graph/ir.h"

namespace trainer::graph {

struct Step {
  enum class Kind { forward, backward };
  Kind kind = Kind::forward;
  int node = -1;
};

struct TrainingGraph {
  Graph graph;                 // the model graph plus gradient values and gradient-sum nodes
  std::vector<Step> schedule;  // one training step
  int forward_steps = 0;       // schedule[0, forward_steps) is the forward pass (eval runs it)
  ValueId loss_seed = kNoValue;  // [1]: dLoss/dLoss times the loss scale, fed each step
  // For every node, per input slot, the gradient value its backward writes (kNoValue: not wanted).
  std::vector<std::vector<ValueId>> grad_inputs;
  std::vector<ValueId> grad_output;  // per node: the gradient of its output its backward reads
  std::vector<bool> param_needs_grad;  // per param
  int model_nodes = 0;                 // nodes [0, model_nodes) are the model's
};

TrainingGraph differentiate(Graph graph);

}  // namespace trainer::graph
