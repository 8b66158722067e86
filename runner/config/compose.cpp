// extends resolution, deep merge and shorthand expansion.
#include "runner/config/compose.h"

#include <filesystem>
#include <map>
#include <set>

#include "runner/config/registry.h"
#include "runner/config/scalar.h"
#include "runner/config/yaml_reader.h"

namespace trainer::config {
namespace {

namespace fs = std::filesystem;

std::string identity_of(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(path, ec);
  return ec ? path : p.string();
}

// One file on the way down the `extends` chain: its identity (canonical path)
// and the path as written, for messages.
struct ChainEntry {
  std::string id;
  std::string shown;
};

// The files of a composition in the order they merge, each once: a file after
// all of its bases, its bases in the order it lists them, and a base that
// several files extend at its first place (the order Python gives a class's
// bases). So in `extends: [b.yaml, c.yaml]`, where both extend base.yaml, c
// overrides b only where c or a base of its own sets a key, and base.yaml never
// comes back over b's values.
struct Linearization {
  std::vector<Node> layers;      // each file's own keys, without `extends`
  std::set<std::string> placed;  // identities in `layers`
  std::set<std::string> failed;  // identities whose errors are reported
};

// The most files one `extends` chain may pass through: far more than any
// composition needs, and far fewer than would exhaust the stack.
constexpr std::size_t kMaxExtendsDepth = 64;

// Reads the file at `path` (identity `id`), places its bases (load_recursive)
// and then the file itself.
bool load_file(const std::string& path, const std::string& id, const Mark& where,
               const std::string& where_key, std::vector<ChainEntry>& chain, Linearization& order,
               Diagnostics& diags);

bool load_recursive(const std::string& path, const Mark& where, const std::string& where_key,
                    std::vector<ChainEntry>& chain, Linearization& order, Diagnostics& diags) {
  const std::string id = identity_of(path);
  for (std::size_t i = 0; i < chain.size(); ++i) {
    if (chain[i].id != id) continue;
    std::string cycle;
    for (std::size_t j = i; j < chain.size(); ++j) cycle += chain[j].shown + " -> ";
    diags.add(where, where_key, "extends cycle: " + cycle + path);
    return false;
  }
  if (chain.size() >= kMaxExtendsDepth) {
    diags.add(where, where_key,
              "extends chain of more than " + std::to_string(kMaxExtendsDepth) + " files (from " +
                  chain.front().shown + ")",
              "merge some of the bases into one file");
    return false;
  }
  if (order.placed.contains(id)) return true;
  if (order.failed.contains(id)) return false;
  if (load_file(path, id, where, where_key, chain, order, diags)) return true;
  order.failed.insert(id);
  return false;
}

bool load_file(const std::string& path, const std::string& id, const Mark& where,
               const std::string& where_key, std::vector<ChainEntry>& chain, Linearization& order,
               Diagnostics& diags) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    if (fs::exists(path, ec)) {
      diags.add(where, where_key, "'" + path + "' is not a regular file");
    } else if (where_key == "extends") {
      const fs::path full = fs::absolute(path, ec).lexically_normal();
      // Of the file made absolute: "exp.yaml" has no folder in its name.
      const fs::path folder = fs::absolute(where.file, ec).lexically_normal().parent_path();
      diags.add(where, where_key, "file not found: '" + full.string() + "'",
                "a relative path is read from the folder of the file that names it (" +
                    folder.string() + "), not from the working directory");
    } else {
      diags.add(where, where_key, "file not found: '" + path + "'");
    }
    return false;
  }
  bool ok = true;
  Node node = read_yaml_file(path, where, diags, &ok);
  if (!ok) return false;
  if (node.is_null()) node = Node::map({path, 1, 1});
  if (!node.is_map()) {
    diags.add(node.mark(), "",
              "expected a map of sections (name:, model:, data:, ...) at the top level, found " +
                  describe(node));
    return false;
  }
  expand_shorthands(node);

  if (const Node* ext = node.find("extends")) {
    Mark key_mark;
    for (std::size_t i = 0; i < node.size(); ++i)
      if (node.key_at(i) == "extends") key_mark = node.key_mark_at(i);
    std::vector<const Node*> bases;
    if (ext->is_scalar() && classify(*ext) == ScalarKind::string) {
      bases.push_back(ext);
    } else if (ext->is_sequence()) {
      for (const auto& item : ext->items()) bases.push_back(&item);
    } else {
      diags.add(ext->mark(), "extends",
                "expected a file name or a list of file names, found " + describe(*ext));
      return false;
    }
    chain.push_back({id, path});
    bool all_ok = true;
    for (const Node* base : bases) {
      if (!base->is_scalar() || classify(*base) != ScalarKind::string ||
          base->text().find('\0') != std::string::npos) {
        diags.add(base->mark(), "extends", "expected a file name, found " + describe(*base));
        all_ok = false;
        continue;
      }
      fs::path base_path = base->text();
      if (base_path.is_relative()) base_path = fs::path(path).parent_path() / base_path;
      // A base of a list is reported at its item; one file alone at the key.
      const Mark& named_at = ext->is_sequence() ? base->mark() : key_mark;
      if (!load_recursive(base_path.lexically_normal().string(), named_at, "extends", chain, order,
                          diags))
        all_ok = false;
    }
    chain.pop_back();
    if (!all_ok) return false;
    node.erase("extends");
  }
  order.layers.push_back(std::move(node));
  order.placed.insert(id);
  return true;
}

// A section that `layer` writes with no value (`train:` and nothing under
// it) where its bases set keys: the merge would put every one of them back
// to its default, most likely keys left out or commented away. An error, as
// `train=` is on the command line. `path`: where `layer` and `bases` stand.
void check_emptied_sections(const Node& bases, const Node& layer, const std::string& path,
                            Diagnostics& diags) {
  if (!bases.is_map() || !layer.is_map()) return;
  for (std::size_t i = 0; i < layer.size(); ++i) {
    const std::string key = path.empty() ? layer.key_at(i) : path + "." + layer.key_at(i);
    const Node* base = bases.find(layer.key_at(i));
    if (!base || !base->is_map() || !find_section(key)) continue;
    const Node& value = layer.value_at(i);
    if (value.is_map()) {
      check_emptied_sections(*base, value, key, diags);
    } else if (value.is_null() && base->size() > 0) {
      diags.add(layer.key_mark_at(i), key,
                "no value for the whole section: every key of " + key +
                    " that the configs merged before it set would be put back to its default",
                "remove '" + layer.key_at(i) +
                    ":' to keep what they set, or write under it the keys to change");
    }
  }
}

}  // namespace

bool load_composed(const std::string& path, Diagnostics& diags, Node& out) {
  std::vector<ChainEntry> chain;
  Linearization order;
  if (!load_recursive(path, Mark{path, 0, 0}, "", chain, order, diags)) return false;
  out = Node::map(order.layers.back().mark());
  const std::size_t reported = diags.size();
  for (const Node& layer : order.layers) {
    check_emptied_sections(out, layer, "", diags);
    out = merge_nodes(std::move(out), layer);
  }
  return diags.size() == reported;
}

namespace {

// The `type` a map names, or "" when it names none.
std::string type_named(const Node& map) {
  const Node* type = map.find("type");
  return type && type->is_scalar() ? type->text() : "";
}

// merge_nodes at `path` ("" for the top level, "data.train").
Node merge_at(Node base, const Node& over, const std::string& path) {
  if (!base.is_map() || !over.is_map()) return over;
  // A typed item (a data source, a loss) that names another type than its
  // base names has other keys: its base's would be unknown there. A section
  // (the optimizer, the schedule) keeps one set of keys whatever its type, so
  // it merges; so does a base that names no type (a loss of the default type).
  const std::string over_type = type_named(over), base_type = type_named(base);
  if (!path.empty() && !over_type.empty() && !base_type.empty() && over_type != base_type &&
      find_section(path) == nullptr)
    return over;
  for (std::size_t i = 0; i < over.size(); ++i) {
    const std::string& key = over.key_at(i);
    Node* existing = base.find(key);
    if (existing && existing->is_map() && over.value_at(i).is_map()) {
      Node merged = merge_at(*existing, over.value_at(i), path.empty() ? key : path + "." + key);
      *existing = std::move(merged);
    } else {
      base.set(key, over.value_at(i), over.key_mark_at(i));
    }
  }
  base.set_mark(over.mark());
  return base;
}

}  // namespace

Node merge_nodes(Node base, const Node& over) {
  return merge_at(std::move(base), over, "");
}

void expand_loss_shorthand(Node& model) {
  if (!model.is_map()) return;
  if (Node* loss = model.find("loss"); loss && loss->is_scalar()) {
    Node named = Node::map(loss->mark());
    named.set("type", *loss, loss->mark());
    *loss = std::move(named);
  }
}

void expand_shorthands(Node& root) {
  if (!root.is_map()) return;
  for (const auto& section : config_sections()) {
    if (section.shorthand.empty() || section.path.find('.') != std::string::npos) continue;
    Node* node = root.find(section.path);
    if (node && node->is_scalar()) {
      Node map = Node::map(node->mark());
      map.set(section.shorthand, *node, node->mark());
      *node = std::move(map);
    }
  }
  // devices: cpu -> {gpus: []};  devices: [0, 1] -> {gpus: [0, 1]}
  if (Node* devices = root.find("devices")) {
    if (devices->is_scalar() && devices->text() == "cpu") {
      Node map = Node::map(devices->mark());
      map.set("gpus", Node::sequence(devices->mark()), devices->mark());
      *devices = std::move(map);
    } else if (devices->is_sequence()) {
      Node map = Node::map(devices->mark());
      map.set("gpus", *devices, devices->mark());
      *devices = std::move(map);
    }
  }
}

}  // namespace trainer::config
