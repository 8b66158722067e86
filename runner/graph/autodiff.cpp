// The backward schedule and gradient values, from the ops' backward rules.
#include "runner/graph/autodiff.h"

#include <algorithm>
#include <stdexcept>

namespace trainer::graph {

TrainingGraph differentiate(Graph graph) {
  TrainingGraph tg;
  const int model_nodes = static_cast<int>(graph.nodes.size());
  tg.model_nodes = model_nodes;

  // Live nodes: those the loss depends on.
  std::vector<bool> live(graph.nodes.size(), false);
  std::vector<bool> value_needed(graph.values.size(), false);
  if (graph.loss != kNoValue) value_needed[graph.loss] = true;
  for (int n = model_nodes - 1; n >= 0; --n) {
    if (!value_needed[graph.nodes[n].output]) continue;
    live[n] = true;
    for (ValueId in : graph.nodes[n].inputs) value_needed[in] = true;
  }

  // Which values carry a gradient: those computed from a trainable parameter.
  std::vector<bool> requires_grad(graph.values.size(), false);
  tg.param_needs_grad.assign(graph.params.size(), false);
  for (int n = 0; n < model_nodes; ++n) {
    const Node& node = graph.nodes[n];
    if (!live[n] || !node.op->has_backward) continue;
    bool any = false;
    for (int p : node.params) {
      if (graph.params[p].trainable) {
        any = true;
        tg.param_needs_grad[p] = true;
      }
    }
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      const auto& nd = node.op->non_differentiable_inputs;
      if (std::find(nd.begin(), nd.end(), static_cast<int>(i)) == nd.end() &&
          requires_grad[node.inputs[i]])
        any = true;
    }
    requires_grad[node.output] = any;
  }

  for (int n = 0; n < model_nodes; ++n)
    if (live[n]) tg.schedule.push_back({Step::Kind::forward, n});
  tg.forward_steps = static_cast<int>(tg.schedule.size());

  tg.grad_inputs.assign(graph.nodes.size(), {});
  tg.grad_output.assign(graph.nodes.size(), kNoValue);
  std::vector<std::vector<ValueId>> partials(graph.values.size());
  if (graph.loss != kNoValue && requires_grad[graph.loss]) {
    tg.loss_seed = graph.add_value({"loss.grad", {1}, DType::f32, ValueKind::gradient, -1});
    partials[graph.loss].push_back(tg.loss_seed);
  }
  const OpDef* add_op = op_registry().find("add");

  for (int n = model_nodes - 1; n >= 0; --n) {
    if (!live[n]) continue;
    const ValueId out = graph.nodes[n].output;
    if (partials[out].empty()) continue;  // no gradient reaches this node
    // The gradient of the output: one partial as is, several summed by an `add` node.
    ValueId grad = partials[out].front();
    if (partials[out].size() > 1) {
      if (!add_op) throw std::logic_error("gradient fan-in needs the 'add' op");
      Node sum;
      sum.name = graph.values[out].name + ".grad_sum";
      sum.op = add_op;
      sum.inputs = partials[out];
      sum.mark = graph.nodes[n].mark;
      const int index = static_cast<int>(graph.nodes.size());
      grad = graph.add_value({graph.values[out].name + ".grad", graph.values[out].shape,
                              DType::f32, ValueKind::gradient, index});
      sum.output = grad;
      graph.nodes.push_back(std::move(sum));
      tg.grad_inputs.emplace_back();
      tg.grad_output.push_back(kNoValue);
      tg.schedule.push_back({Step::Kind::forward, index});
    }
    Node& node = graph.nodes[n];
    tg.grad_output[n] = grad;
    std::vector<ValueId> grads(node.inputs.size(), kNoValue);
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      const auto& nd = node.op->non_differentiable_inputs;
      const ValueId in = node.inputs[i];
      if (!requires_grad[in] ||
          std::find(nd.begin(), nd.end(), static_cast<int>(i)) != nd.end())
        continue;
      const std::string name = graph.values[in].name + ".grad" +
                               (partials[in].empty() ? "" : "." + std::to_string(partials[in].size()));
      grads[i] = graph.add_value({name, graph.values[in].shape, DType::f32, ValueKind::gradient, n});
      partials[in].push_back(grads[i]);
    }
    tg.grad_inputs[n] = std::move(grads);
    tg.schedule.push_back({Step::Kind::backward, n});
  }
  tg.graph = std::move(graph);
  return tg;
}

}  // namespace trainer::graph
