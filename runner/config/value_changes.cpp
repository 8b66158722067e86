// Value-by-value comparison of two YAML configs (value_changes.h).
#include "runner/config/value_changes.h"

#include <algorithm>
#include <exception>
#include <map>
#include <utility>
#include <vector>

#include "runner/config/diagnostics.h"
#include "runner/config/emit.h"
#include "runner/config/load.h"
#include "runner/config/yaml_reader.h"

namespace trainer::config {
namespace {

using Leaves = std::vector<std::pair<std::string, std::string>>;

// Every scalar of a YAML tree by its key path ("model.layers[1].out_features").
void collect_leaves(const Node& node, const std::string& path, Leaves& out) {
  if (node.is_map()) {
    for (std::size_t i = 0; i < node.size(); ++i)
      collect_leaves(node.value_at(i), path.empty() ? node.key_at(i) : path + "." + node.key_at(i),
                     out);
  } else if (node.is_sequence()) {
    for (std::size_t i = 0; i < node.items().size(); ++i)
      collect_leaves(node.items()[i], path + "[" + std::to_string(i) + "]", out);
    if (node.items().empty()) out.emplace_back(path, "[]");
  } else {
    out.emplace_back(path, node.is_null() ? "null" : node.text());
  }
}

Leaves leaves_of(const std::string& yaml) {
  Diagnostics diags;
  const Node root = parse_yaml(yaml, "config.yaml", diags);
  Leaves out;
  if (diags.empty()) collect_leaves(root, "", out);
  return out;
}

}  // namespace

std::string value_changes(const std::string& was, const std::string& now) {
  constexpr std::size_t kShown = 4;
  const Leaves old_leaves = leaves_of(was), new_leaves = leaves_of(now);
  std::map<std::string, std::string> old_values(old_leaves.begin(), old_leaves.end());
  std::vector<std::string> changes;
  for (const auto& [key, value] : new_leaves) {
    const auto old = old_values.find(key);
    if (old == old_values.end())
      changes.push_back(key + ": (not set) -> " + value);
    else if (old->second != value)
      changes.push_back(key + ": " + old->second + " -> " + value);
    if (old != old_values.end()) old_values.erase(old);
  }
  for (const auto& [key, value] : old_leaves)
    if (old_values.count(key)) changes.push_back(key + ": " + value + " -> (not set)");
  std::string out;
  for (std::size_t i = 0; i < std::min(changes.size(), kShown); ++i)
    out += (i ? ", " : "") + changes[i];
  if (changes.size() > kShown) out += " and " + std::to_string(changes.size() - kShown) + " more";
  return out;
}

std::string resolved_today(const std::string& was, const std::string& without_key) {
  try {
    Node today = load_config_text(was, "config.yaml").resolved;
    if (!without_key.empty()) today.erase(without_key);
    return to_yaml(today);
  } catch (const std::exception&) {  // it no longer loads: compared as it is
    return was;
  }
}

}  // namespace trainer::config
