// Checks of model.blocks definitions and their use (model_blocks.h).
#include "runner/config/model_blocks.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "runner/config/scalar.h"

namespace trainer::config {
namespace {

// The block names that the layers of `layers` use (`block: NAME`).
void collect_used(const Node* layers, std::vector<std::string>& names) {
  if (!layers || !layers->is_sequence()) return;
  for (const Node& layer : layers->items()) {
    const Node* block = layer.is_map() ? layer.find("block") : nullptr;
    if (block && block->is_scalar()) names.push_back(block->text());
  }
}

}  // namespace

bool refers_to_parameter(const Node& node, const std::string& name) {
  if (node.is_scalar()) return !node.quoted() && block_parameter_name(node.text()) == name;
  if (node.is_sequence())
    return std::any_of(node.items().begin(), node.items().end(),
                       [&](const Node& item) { return refers_to_parameter(item, name); });
  if (node.is_map())
    for (std::size_t i = 0; i < node.size(); ++i)
      if (refers_to_parameter(node.value_at(i), name)) return true;
  return false;
}

void check_model_blocks(const Node& model, Config& config, Diagnostics& diags) {
  const Node* blocks = model.find("blocks");
  if (!blocks || !blocks->is_map()) return;  // the builder reports one that is no map
  for (std::size_t i = 0; i < blocks->size(); ++i) {
    const std::string path = "model.blocks." + blocks->key_at(i);
    const Node& def = blocks->value_at(i);
    if (!def.is_map()) continue;  // the builder's, where an instance uses it
    for (std::size_t k = 0; k < def.size(); ++k) {
      const std::string& key = def.key_at(k);
      if (key == "layers" || key == "params") continue;
      const std::string near = nearest(key, {"layers", "params"});
      diags.add(def.key_mark_at(k), path + "." + key, "unknown key '" + key + "'",
                near.empty() ? "a block definition has layers: (a list) and params: (a map)"
                             : "did you mean '" + near + "'?");
    }
    if (const Node* params = def.find("params"); params && !params->is_map()) {
      diags.add(params->mark(), path + ".params",
                "expected a map of parameter names to default values, found " + describe(*params),
                "e.g. params: {channels: 64, stride: 1}");
    } else if (params) {
      for (std::size_t k = 0; k < params->size(); ++k)
        if (const std::string& name = params->key_at(k);
            std::find(kBlockInstanceKeys.begin(), kBlockInstanceKeys.end(), name) !=
            kBlockInstanceKeys.end())
          diags.add(params->key_mark_at(k), path + ".params." + name,
                    "'" + name + "' is a key of every block instance (" + join(kBlockInstanceKeys) +
                        "), so no instance could set this parameter",
                    "rename the parameter, e.g. '" + name + "s' or 'n_" + name + "'");
    }
    const Node* layers = def.find("layers");
    if (layers && layers->is_sequence() && layers->items().empty())
      diags.add(layers->mark(), path + ".layers", "a block needs at least one layer");
    // A parameter no layer refers to: setting it on an instance changes nothing.
    if (const Node* params = def.find("params"); params && params->is_map() && layers)
      for (std::size_t k = 0; k < params->size(); ++k)
        if (const std::string& name = params->key_at(k); !refers_to_parameter(*layers, name))
          config.warnings.push_back(
              {params->key_mark_at(k), path + ".params." + name,
               "no layer of the block refers to $" + name +
                   ", so setting it on an instance changes nothing",
               "use it in the block's layers (a value `$" + name + "`), or remove it"});
  }
  // Used: named by the model's layers, or by a used block's layers.
  std::vector<std::string> pending;
  collect_used(model.find("layers"), pending);
  std::set<std::string> used;
  while (!pending.empty()) {
    const std::string name = pending.back();
    pending.pop_back();
    if (!used.insert(name).second) continue;
    if (const Node* def = blocks->find(name); def && def->is_map())
      collect_used(def->find("layers"), pending);
  }
  for (std::size_t i = 0; i < blocks->size(); ++i) {
    if (used.count(blocks->key_at(i))) continue;
    config.warnings.push_back(
        {blocks->key_mark_at(i), "model.blocks." + blocks->key_at(i),
         "no layer uses this block, so its layers are not checked",
         "use it ({block: " + blocks->key_at(i) + ", name: ...} in model.layers), or remove it"});
  }
}

}  // namespace trainer::config
