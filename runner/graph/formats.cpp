// The format pass (formats.h).
#include "runner/graph/formats.h"

#include <numeric>
#include <vector>

namespace trainer::graph {
namespace {

FormatRule rule_of(const Node& node) {
  // Synchronised batchnorm reduces its statistics in its own float32 loops.
  if (node.attrs.has("sync") && node.attrs.get_bool("sync")) return FormatRule::plain;
  return node.op->formats;
}

// Union-find over values: the values one `same_as_input` node ties together.
class ValueGroups {
 public:
  explicit ValueGroups(std::size_t n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), 0); }
  ValueId find(ValueId v) {
    while (parent_[v] != v) v = parent_[v] = parent_[parent_[v]];
    return v;
  }
  void join(ValueId a, ValueId b) { parent_[find(a)] = find(b); }

 private:
  std::vector<ValueId> parent_;
};

}  // namespace

void assign_formats(Graph& graph, const Backend::ActivationFormats& support,
                    const std::string& precision_mode) {
  const bool bf16 = support.bf16_storage && precision_mode == "bf16";
  if (support.channel_block == 0 && !bf16) return;
  const std::size_t n = graph.values.size();
  std::vector<int> readers(n, 0);
  std::vector<bool> any_format(n, true);  // every node touching the value takes any format
  std::vector<bool> float32_only(n, false);
  ValueGroups groups(n);
  for (const Node& node : graph.nodes) {
    const FormatRule rule = rule_of(node);
    for (ValueId in : node.inputs) {
      ++readers[in];
      if (rule == FormatRule::plain) any_format[in] = false;
    }
    if (rule == FormatRule::plain) any_format[node.output] = false;
    if (rule == FormatRule::same_as_input || rule == FormatRule::same_layout)
      for (ValueId in : node.inputs) groups.join(in, node.output);
    if (rule == FormatRule::same_layout) float32_only[node.output] = true;
  }
  for (ValueId v : {graph.input, graph.labels, graph.logits, graph.loss})
    if (v != kNoValue) any_format[v] = false;

  // A group takes the format when all its values do; images are blocked when
  // every value's channels divide into blocks.
  struct Group {
    bool any_format = true, blocked = true, single_reader = true, float32_only = false;
  };
  std::vector<Group> group(n);
  for (std::size_t v = 0; v < n; ++v) {
    const Value& value = graph.values[v];
    Group& g = group[groups.find(static_cast<ValueId>(v))];
    g.any_format = g.any_format && any_format[v] && value.producer >= 0 &&
                   value.kind == ValueKind::activation && value.dtype == DType::f32;
    g.blocked = g.blocked && support.channel_block > 0 && value.shape.size() == 4 &&
                value.shape[1] % support.channel_block == 0;
    g.single_reader = g.single_reader && readers[v] == 1;
    g.float32_only = g.float32_only || float32_only[v];
  }
  for (std::size_t v = 0; v < n; ++v) {
    const Group& g = group[groups.find(static_cast<ValueId>(v))];
    if (!g.any_format) continue;
    Value& value = graph.values[v];
    if (g.blocked) value.channel_block = support.channel_block;
    if (bf16 && g.single_reader && !g.float32_only) value.dtype = DType::bf16;
  }
}

std::string format_name(const Value& value) {
  std::string name(dtype_name(value.dtype));
  if (value.channel_block > 0) name += " nChw" + std::to_string(value.channel_block) + "c";
  return name;
}

}  // namespace trainer::graph
