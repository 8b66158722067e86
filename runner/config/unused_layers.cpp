// Warnings for layers whose output nothing reads (unused_layers.h).
#include "runner/config/unused_layers.h"

#include <map>
#include <set>
#include <string>
#include <vector>

namespace trainer::config {
namespace {

// The names an item's `inputs:` lists (a scalar or a list of scalars); false
// when one of them is a block parameter or not a plain name.
bool named_inputs(const Node& inputs, std::set<std::string>& names) {
  const std::vector<Node> items = inputs.is_sequence() ? inputs.items() : std::vector<Node>{inputs};
  for (const Node& item : items) {
    if (!item.is_scalar() || item.text().empty() || item.text()[0] == '$') return false;
    names.insert(item.text());
  }
  return true;
}

// The name an item's output goes by: its `name:`, else its type (or block)
// and how many of that type the list has up to it ("relu2"), as the graph
// builder names it; "" when neither is written.
std::string output_name(const Node& item, std::map<std::string, int>& type_counts) {
  const Node* type = item.find("type");
  if (!type) type = item.find("block");
  const std::string kind = type && type->is_scalar() ? type->text() : "";
  const int count = ++type_counts[kind];
  if (const Node* name = item.find("name")) return name->is_scalar() ? name->text() : "";
  return kind.empty() ? "" : kind + std::to_string(count);
}

// The warning for one list of layers, `path` being where it is
// ("model.layers", "model.blocks.NAME.layers").
void warn_in_list(const Node* layers, const std::string& path, Config& config) {
  if (!layers || !layers->is_sequence()) return;
  const std::vector<Node>& items = layers->items();
  std::set<std::string> read;  // names some `inputs:` lists
  for (const Node& item : items) {
    if (!item.is_map()) return;  // the builder reports it
    if (const Node* inputs = item.find("inputs"))
      if (!named_inputs(*inputs, read)) return;
  }
  std::map<std::string, int> type_counts;
  for (std::size_t i = 0; i + 1 < items.size(); ++i) {
    const std::string name = output_name(items[i], type_counts);
    if (name.empty() || !items[i + 1].find("inputs") || read.count(name)) continue;
    config.warnings.push_back(
        {items[i].mark(), path + "[" + std::to_string(i) + "]",
         "no layer reads the output of '" + name +
             "': the next layer names other `inputs:` and no later one names it, so it is "
             "left out of every step: its parameters never train (a checkpoint keeps them as "
             "initialised)",
         "add '" + name + "' to a later layer's inputs, or remove the layer"});
  }
}

}  // namespace

void warn_unused_layers(const Node& model, Config& config) {
  warn_in_list(model.find("layers"), "model.layers", config);
  if (const Node* blocks = model.find("blocks"); blocks && blocks->is_map())
    for (std::size_t i = 0; i < blocks->size(); ++i)
      if (const Node& def = blocks->value_at(i); def.is_map())
        warn_in_list(def.find("layers"), "model.blocks." + blocks->key_at(i) + ".layers", config);
}

}  // namespace trainer::config
