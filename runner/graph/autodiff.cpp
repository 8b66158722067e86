// The backward schedule, gradient values and recompute steps, from the ops'
// backward rules.
#include "runner/graph/autodiff.h"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace trainer::graph {
namespace {

// The gradient of `value`, in the same format (formats.h).
Value gradient_value(const Value& value, std::string name, int producer) {
  Value g{std::move(name), value.shape, value.dtype, ValueKind::gradient, producer};
  g.channel_block = value.channel_block;
  return g;
}

bool differentiable_input(const OpDef& op, std::size_t i) {
  const auto& nd = op.non_differentiable_inputs;
  return std::find(nd.begin(), nd.end(), static_cast<int>(i)) == nd.end();
}

}  // namespace

TrainingGraph differentiate(Graph graph) {
  TrainingGraph tg;
  const int model_nodes = static_cast<int>(graph.nodes.size());
  tg.model_nodes = model_nodes;
  auto recomputed = [&](int n) {
    return n >= 0 && n < model_nodes && graph.nodes[n].recompute && !graph.nodes[n].op->is_loss;
  };

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
    for (std::size_t i = 0; i < node.inputs.size(); ++i)
      if (differentiable_input(*node.op, i) && requires_grad[node.inputs[i]]) any = true;
    requires_grad[node.output] = any;
  }

  std::vector<int> forward_step_of(graph.nodes.size(), -1);
  for (int n = 0; n < model_nodes; ++n) {
    if (!live[n]) continue;
    forward_step_of[n] = static_cast<int>(tg.schedule.size());
    Step s;
    s.node = n;
    s.inputs = graph.nodes[n].inputs;
    s.output = graph.nodes[n].output;
    tg.schedule.push_back(std::move(s));
  }
  tg.forward_steps = static_cast<int>(tg.schedule.size());

  // Recomputed values: original value -> the copy made for the backward pass,
  // and the forward step that made it.
  std::map<ValueId, ValueId> recomputed_value;
  std::map<int, int> recompute_step_of;  // node -> its recompute step
  // Returns the value the backward pass reads for `v`, recomputing it (and
  // whatever recomputed values it needs) on first use.
  auto materialize = [&](auto&& self, ValueId v) -> ValueId {
    const int producer = graph.values[v].producer;
    if (v == kNoValue || !recomputed(producer)) return v;
    if (auto it = recomputed_value.find(v); it != recomputed_value.end()) return it->second;
    Step s;
    s.node = producer;
    s.recompute = true;
    for (ValueId in : graph.nodes[producer].inputs) s.inputs.push_back(self(self, in));
    Value copy = graph.values[v];
    copy.name += ".recomputed";
    s.output = graph.add_value(std::move(copy));
    recomputed_value[v] = s.output;
    recompute_step_of[producer] = static_cast<int>(tg.schedule.size());
    tg.schedule.push_back(std::move(s));
    ++tg.recompute_steps;
    return recomputed_value[v];
  };

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
      grad = graph.add_value(
          gradient_value(graph.values[out], graph.values[out].name + ".grad", index));
      sum.output = grad;
      Step s;
      s.node = index;
      s.inputs = sum.inputs;
      s.output = grad;
      graph.nodes.push_back(std::move(sum));
      tg.schedule.push_back(std::move(s));
    }

    Step back;
    back.kind = Step::Kind::backward;
    back.node = n;
    back.grad_output = grad;
    // The forward values (and saved buffers) this backward reads: recomputed
    // nodes read the copies their recompute step makes.
    const Node& node = graph.nodes[n];
    const BackwardReads reads = node.op->reads(node.attrs);
    if (recomputed(n)) {
      back.output = materialize(materialize, out);
      back.saved_from = recompute_step_of.at(n);
      back.inputs = tg.schedule[back.saved_from].inputs;
      if (!reads.output) back.output = graph.nodes[n].output;
    } else {
      back.saved_from = forward_step_of[n];
      back.inputs = node.inputs;
      back.output = out;
      if (reads.inputs)
        for (ValueId& in : back.inputs) in = materialize(materialize, in);
      if (reads.output) back.output = materialize(materialize, out);
    }
    const Node& node_now = graph.nodes[n];  // materialize may have grown graph.values only
    back.grad_inputs.assign(node_now.inputs.size(), kNoValue);
    for (std::size_t i = 0; i < node_now.inputs.size(); ++i) {
      const ValueId in = node_now.inputs[i];
      if (!requires_grad[in] || !differentiable_input(*node_now.op, i)) continue;
      const std::string name =
          graph.values[in].name + ".grad" +
          (partials[in].empty() ? "" : "." + std::to_string(partials[in].size()));
      back.grad_inputs[i] = graph.add_value(gradient_value(graph.values[in], name, n));
      partials[in].push_back(back.grad_inputs[i]);
    }
    tg.schedule.push_back(std::move(back));
  }
  tg.graph = std::move(graph);
  return tg;
}

}  // namespace trainer::graph
