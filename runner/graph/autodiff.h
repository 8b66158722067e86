// Reverse-mode autodiff over the graph IR: from each op's backward rule, builds
// the training schedule (forward steps, then backward steps in reverse order),
// the gradient values each backward step writes, and `add` nodes that sum the
// gradient of a value consumed more than once. Nodes that do not reach the loss
// are dropped from the schedule (dead-node elimination).
//
// Activation checkpointing: a node marked for recompute keeps its output only
// as long as the forward pass needs it; right before the backward steps that
// read it, a recompute step runs the node's forward again (inputs recomputed
// first where they are recomputed too) into a fresh value. Every step carries
// its own value bindings, so the memory planner and the lowering see a
// recomputed value as just another buffer with its own lifetime.
#pragma once

#include <vector>

#include "runner/graph/ir.h"

namespace trainer::graph {

struct Step {
  enum class Kind { forward, backward };
  Kind kind = Kind::forward;
  int node = -1;
  bool recompute = false;            // a forward step repeated for the backward pass
  std::vector<ValueId> inputs;       // the forward values the call reads
  ValueId output = kNoValue;         // forward: written; backward: the forward output read
  ValueId grad_output = kNoValue;    // backward: the gradient of the output
  std::vector<ValueId> grad_inputs;  // backward: per input, the gradient written (kNoValue: none)
  int saved_from = -1;  // backward: index of the forward step whose saved buffers it reads
};

struct TrainingGraph {
  Graph graph;                   // the model graph plus gradient values and gradient-sum nodes
  std::vector<Step> schedule;    // one training step
  int forward_steps = 0;         // schedule[0, forward_steps) is the forward pass (eval runs it)
  ValueId loss_seed = kNoValue;  // [1]: dLoss/dLoss times the loss scale, fed each step
  std::vector<bool> param_needs_grad;  // per param
  int model_nodes = 0;                 // nodes [0, model_nodes) are the model's
  int recompute_steps = 0;             // forward steps repeated for the backward pass
};

// Nodes with Node::recompute set are checkpointed as described above.
TrainingGraph differentiate(Graph graph);

}  // namespace trainer::graph
