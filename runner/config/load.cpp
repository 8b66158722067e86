// The load pipeline: read + compose, overrides, validation, all errors at once.
#include "runner/config/load.h"

#include <algorithm>
#include <fstream>
#include <map>

#include "runner/config/bind.h"
#include "runner/config/compose.h"
#include "runner/config/overrides.h"
#include "runner/config/yaml_reader.h"

namespace trainer::config {
namespace {

// Orders diagnostics by file (in order of first appearance), then line and column.
Diagnostics sorted(const Diagnostics& diags) {
  std::map<std::string, std::size_t> file_rank;
  for (const auto& d : diags.list()) file_rank.emplace(d.mark.file, file_rank.size());
  std::vector<Diagnostic> list = diags.list();
  std::stable_sort(list.begin(), list.end(), [&](const Diagnostic& a, const Diagnostic& b) {
    const auto ra = file_rank[a.mark.file], rb = file_rank[b.mark.file];
    if (ra != rb) return ra < rb;
    if (a.mark.line != b.mark.line) return a.mark.line < b.mark.line;
    return a.mark.column < b.mark.column;
  });
  Diagnostics out;
  for (auto& d : list) out.add(std::move(d));
  return out;
}

// Whether `text` is a resolved config a run or sweep wrote (its first line
// says what it was resolved from).
bool is_resolved_config(const std::string& text) {
  return text.rfind("# resolved from ", 0) == 0;
}

// `resolved`: the tree is a resolved config a run or sweep wrote, whose
// derived values older versions wrote out as values (mark_derived_values).
// A config a person wrote keeps the eval_transforms it gives.
Config validate(Node tree, const std::string& source, const std::vector<std::string>& overrides,
                const OverrideOrigins& origins, Diagnostics& diags, bool resolved) {
  if (resolved) mark_derived_values(tree);
  apply_overrides(tree, overrides, diags, origins);
  expand_shorthands(tree);
  Config config = bind_config(tree, diags);
  if (!diags.empty()) sorted(annotate_overrides(diags, overrides)).throw_if_any();
  config.source_file = source;
  config.resolved = std::move(tree);
  return config;
}

}  // namespace

Node load_merged_tree(const std::string& path, const std::vector<std::string>& overrides) {
  Diagnostics diags;
  Node tree;
  if (!load_composed(path, diags, tree)) sorted(diags).throw_if_any();
  apply_overrides(tree, overrides, diags);
  expand_shorthands(tree);
  if (!diags.empty()) sorted(annotate_overrides(diags, overrides)).throw_if_any();
  return tree;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides,
                   const OverrideOrigins& origins) {
  Diagnostics diags;
  Node tree;
  if (!load_composed(path, diags, tree)) sorted(diags).throw_if_any();
  std::ifstream file(path, std::ios::binary);
  std::string first_line;
  std::getline(file, first_line);
  return validate(std::move(tree), path, overrides, origins, diags, is_resolved_config(first_line));
}

Config load_config_text(const std::string& text, const std::string& name,
                        const std::vector<std::string>& overrides) {
  Diagnostics diags;
  bool ok = true;
  Node tree = parse_yaml(text, name, diags, &ok);
  if (!ok) diags.throw_if_any();
  if (tree.is_null()) tree = Node::map({name, 1, 1});
  if (!tree.is_map()) {
    diags.add(tree.mark(), "", "expected a map of sections at the top level");
    diags.throw_if_any();
  }
  if (tree.find("extends")) {
    diags.add(tree.mark(), "extends", "`extends` needs a file; use load_config(path)");
    diags.throw_if_any();
  }
  expand_shorthands(tree);
  return validate(std::move(tree), name, overrides, {}, diags, is_resolved_config(text));
}

}  // namespace trainer::config
