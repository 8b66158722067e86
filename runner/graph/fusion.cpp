// The fusion pass (fusion.h).
#include "runner/graph/fusion.h"

#include <algorithm>
#include <vector>

#include "ops/epilogue.h"

namespace trainer::graph {
namespace {

// Whether `node` has no activation yet and its op lists `activation` among
// the values of its `activation` attribute.
bool takes_activation(const Node& node, Epilogue activation) {
  if (epilogue_of(node.attrs) != Epilogue::none) return false;
  for (const FieldSpec& f : node.op->attrs)
    if (f.name == "activation")
      return std::find(f.choices.begin(), f.choices.end(), epilogue_name(activation)) !=
             f.choices.end();
  return false;
}

// Drops the marked nodes and values and renumbers what refers to the rest.
void compact(Graph& graph, const std::vector<bool>& drop_node,
             const std::vector<bool>& drop_value) {
  std::vector<int> node_at(graph.nodes.size(), -1);
  std::vector<ValueId> value_at(graph.values.size(), kNoValue);
  std::vector<Node> nodes;
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    if (drop_node[n]) continue;
    node_at[n] = static_cast<int>(nodes.size());
    nodes.push_back(std::move(graph.nodes[n]));
  }
  std::vector<Value> values;
  for (std::size_t v = 0; v < graph.values.size(); ++v) {
    if (drop_value[v]) continue;
    value_at[v] = static_cast<ValueId>(values.size());
    values.push_back(std::move(graph.values[v]));
  }
  const auto value = [&](ValueId v) { return v == kNoValue ? kNoValue : value_at[v]; };
  for (Node& node : nodes) {
    for (ValueId& in : node.inputs) in = value(in);
    node.output = value(node.output);
  }
  for (Value& v : values)
    if (v.producer >= 0) v.producer = node_at[v.producer];
  for (Param& p : graph.params)
    if (p.node >= 0) p.node = node_at[p.node];
  for (ValueId* v : {&graph.input, &graph.labels, &graph.logits, &graph.loss}) *v = value(*v);
  graph.nodes = std::move(nodes);
  graph.values = std::move(values);
}

}  // namespace

int fuse_activations(Graph& graph, const FusionRule& fuses) {
  std::vector<int> readers(graph.values.size(), 0);
  std::vector<int> reader(graph.values.size(), -1);
  for (std::size_t n = 0; n < graph.nodes.size(); ++n)
    for (ValueId in : graph.nodes[n].inputs) {
      ++readers[in];
      reader[in] = static_cast<int>(n);
    }
  for (ValueId v : {graph.input, graph.labels, graph.logits, graph.loss})
    if (v != kNoValue) ++readers[v];  // fed or read outside the nodes: never folded away

  std::vector<bool> drop_node(graph.nodes.size(), false);
  std::vector<bool> drop_value(graph.values.size(), false);
  int fused = 0;
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    Node& layer = graph.nodes[n];
    const int a = reader[layer.output];
    if (readers[layer.output] != 1 || a < 0) continue;  // read elsewhere too, or not by a node
    Node& activation = graph.nodes[a];
    const auto epilogue = epilogue_for_layer(activation.op->name, activation.attrs);
    if (!epilogue || !takes_activation(layer, *epilogue) || !fuses(layer.op->name, *epilogue) ||
        activation.recompute != layer.recompute || activation.inputs.size() != 1)
      continue;
    drop_value[layer.output] = true;
    drop_node[a] = true;
    layer.attrs.set("activation", std::string(epilogue_name(*epilogue)));
    layer.output = activation.output;
    layer.forward_flops += activation.forward_flops;
    graph.values[activation.output].producer = static_cast<int>(n);
    ++fused;
  }
  if (fused > 0) compact(graph, drop_node, drop_value);
  return fused;
}

std::string op_label(const Node& node) {
  const Epilogue epilogue = epilogue_of(node.attrs);
  return epilogue == Epilogue::none ? node.op->name : node.op->name + "+" + epilogue_name(epilogue);
}

}  // namespace trainer::graph
