// `{type: X, ...}` items checked against data/registry.h definitions.
#include "runner/config/data_items.h"

#include <algorithm>
#include <filesystem>

#include "data/registry.h"
#include "runner/config/diagnostics.h"
#include "runner/config/fields.h"
#include "runner/config/scalar.h"

namespace trainer::config {
namespace {

namespace fs = std::filesystem;

struct ItemDef {
  const std::string* name;
  const std::vector<FieldSpec>* fields;
  const std::vector<std::string>* path_fields;
};

std::string join_names(const std::vector<std::string>& names) {
  if (names.empty()) return "(none registered)";
  return join(names);
}

// A setting written with a value of its own while the sibling it depends on
// (FieldSpec::applies_when) rules it out, as CIFAR-10's `label: coarse` or a
// regression CSV's `classes`: an error at the setting, as it would have no
// effect. Its default value, written out, is let pass.
void check_settings_without_effect(const Node& node, const std::vector<FieldSpec>& fields,
                                   const Attrs& attrs, const std::string& key_path,
                                   Diagnostics& diags) {
  for (const FieldSpec& spec : fields) {
    if (spec.applies_when.empty()) continue;
    const Node* given = node.find(spec.name);
    const auto control = std::find_if(fields.begin(), fields.end(), [&](const FieldSpec& f) {
      return f.name == spec.applies_when;
    });
    if (!given || given->mark().is_default() || !attrs.has(spec.name) || control == fields.end() ||
        !attrs.has(control->name))
      continue;
    Diagnostics ignored;
    FieldValue fallback;
    if (parse_field(default_node(spec), spec, key_path, ignored, fallback) &&
        attrs.values().at(spec.name) == fallback)
      continue;
    const FieldValue& setting = attrs.values().at(control->name);
    std::string listed;
    bool applies = false;
    for (const auto& text : spec.applies_values) {
      FieldValue value;
      applies =
          applies || (parse_field(Node::scalar(text, Mark{}), *control, key_path, ignored, value) &&
                      value == setting);
      listed += (listed.empty() ? "" : " or ") + text;
    }
    if (applies) continue;
    const Node* written = node.find(control->name);
    const std::string control_text =
        written && written->is_scalar() ? written->text() : control->default_yaml;
    diags.add(
        given->mark(), join_key(key_path, spec.name),
        spec.name + ": " + (given->is_scalar() ? given->text() : describe(*given)) +
            " has no effect with " + control->name + ": " + control_text + " (it acts only with " +
            control->name + ": " + listed + ")",
        "remove " + spec.name + ", or set " + control->name + ": " + spec.applies_values.front());
  }
}

// "add type: csv (the one data source with path and label)" when one type
// alone has every key that `node` gives, or how to write a type given as a
// key (`- scale: {factor: 255}`); nullopt otherwise.
std::optional<std::string> type_of_keys(const Node& node, const std::vector<ItemDef>& defs,
                                        const char* what) {
  if (node.size() == 0) return std::nullopt;
  // `- scale: {factor: 255}`: the type written as a key.
  for (std::size_t i = 0; i < node.size(); ++i)
    for (const auto& def : defs)
      if (*def.name == node.key_at(i))
        return "write the type as the value of `type`, with its settings beside it: {type: " +
               *def.name + ", ...}";
  std::vector<std::string> fitting;
  for (const auto& def : defs) {
    bool has_all = true;
    for (std::size_t i = 0; i < node.size() && has_all; ++i)
      has_all = std::any_of(def.fields->begin(), def.fields->end(),
                            [&](const FieldSpec& f) { return f.name == node.key_at(i); });
    if (has_all) fitting.push_back(*def.name);
  }
  if (fitting.size() != 1) return std::nullopt;
  std::string keys;
  for (std::size_t i = 0; i < node.size(); ++i)
    keys += (i == 0 ? "" : i + 1 == node.size() ? " and " : ", ") + node.key_at(i);
  return "add type: " + fitting.front() + " (the one " + what + " type with " + keys + ")";
}

std::optional<TypedItem> read_item(Node& node, const std::string& key_path, const char* what,
                                   const std::vector<ItemDef>& defs, Diagnostics& diags) {
  std::vector<std::string> names;
  for (const auto& d : defs) names.push_back(*d.name);
  if (!node.is_map()) {
    diags.add(node.mark(), key_path,
              std::string("expected a ") + what + " map {type: <" + what + ">, ...}, found " +
                  describe(node),
              std::string("known ") + what + " types: " + join_names(names));
    return std::nullopt;
  }
  const Node* type = node.find("type");
  if (!type) {
    diags.add(node.mark(), join_key(key_path, "type"),
              std::string("missing required key 'type' (the ") + what + ")",
              type_of_keys(node, defs, what)
                  .value_or("known " + std::string(what) + " types: " + join_names(names)));
    return std::nullopt;
  }
  const auto def = std::find_if(defs.begin(), defs.end(),
                                [&](const ItemDef& d) { return *d.name == type->text(); });
  if (classify(*type) == ScalarKind::null) {
    diags.add(type->mark(), join_key(key_path, "type"),
              std::string("the ") + what + " type is empty (null)",
              "known " + std::string(what) + " types: " + join_names(names));
    return std::nullopt;
  }
  if (!type->is_scalar() || def == defs.end()) {
    const std::string near = type->is_scalar() ? nearest(type->text(), names) : "";
    diags.add(type->mark(), join_key(key_path, "type"),
              std::string("unknown ") + what + " type " + describe(*type) +
                  "; known: " + join_names(names),
              near.empty() ? "" : "did you mean '" + near + "'?");
    return std::nullopt;
  }
  const std::size_t reported = diags.size();
  TypedItem item{type->text(), read_fields(node, *def->fields, key_path, diags, {"type"}),
                 node.mark()};
  if (diags.size() == reported)
    check_settings_without_effect(node, *def->fields, item.attrs, key_path, diags);
  if (const auto elements = declared_sample_elements(item); elements > kMaxSampleElements) {
    const char* field = item.attrs.has("shape") ? "shape" : "size";
    const Node* value = node.find(field);
    diags.add(value ? value->mark() : node.mark(), join_key(key_path, field),
              "a sample of this " + std::string(field) + " has more than " +
                  std::to_string(kMaxSampleElements) + " (2^31) elements, the most supported",
              "use a smaller sample shape");
  }
  fill_defaults(node, *def->fields);
  for (const auto& field : *def->path_fields) {
    Node* value = node.find(field);
    if (!value || !item.attrs.has(field)) continue;
    if (auto* one = std::get_if<std::string>(&item.attrs.values().at(field))) {
      if (one->empty()) {
        diags.add(value->mark(), join_key(key_path, field), "an empty path names no file",
                  "give the file's path (relative to this YAML file, or absolute)");
        continue;
      }
      const std::string resolved = resolve_path(*one, value->mark().file);
      item.attrs.set(field, resolved);
      *value = Node::scalar(resolved, value->mark(), true);
    } else if (auto* list = std::get_if<std::vector<std::string>>(&item.attrs.values().at(field))) {
      std::vector<std::string> resolved;
      for (std::size_t i = 0; i < list->size(); ++i) {
        Node& entry = value->items()[i];
        if ((*list)[i].empty()) {
          diags.add(entry.mark(), join_key(key_path, field) + "[" + std::to_string(i) + "]",
                    "an empty path names no file",
                    "give the file's path (relative to this YAML file, or absolute)");
          continue;
        }
        resolved.push_back(resolve_path((*list)[i], entry.mark().file));
        entry = Node::scalar(resolved.back(), entry.mark(), true);
      }
      item.attrs.set(field, resolved);
    }
  }
  return item;
}

std::vector<ItemDef> source_item_defs() {
  std::vector<ItemDef> defs;
  for (const auto& d : data::source_defs()) defs.push_back({&d.name, &d.fields, &d.path_fields});
  return defs;
}

std::vector<ItemDef> transform_item_defs() {
  static const std::vector<std::string> no_paths;
  std::vector<ItemDef> defs;
  for (const auto& d : data::transform_defs()) defs.push_back({&d.name, &d.fields, &no_paths});
  return defs;
}

// a * b, or kMaxSampleElements + 1 when it is larger (or a factor is not positive).
std::int64_t bounded_product(std::int64_t a, std::int64_t b) {
  constexpr std::int64_t over = kMaxSampleElements + 1;
  if (a < 1 || b < 1 || a > over || b > over || a > over / b) return over;
  return a * b;
}

}  // namespace

std::int64_t bounded_elements(const std::vector<std::int64_t>& extents) {
  std::int64_t n = 1;
  for (std::int64_t d : extents) n = bounded_product(n, d);
  return n;
}

std::optional<std::int64_t> declared_sample_elements(const TypedItem& item) {
  if (item.attrs.has("shape"))  // synthetic
    return bounded_elements(item.attrs.get_ints("shape", 1));
  if (item.attrs.has("size") && item.attrs.has("channels")) {  // image_folder
    std::vector<std::int64_t> extents = item.attrs.get_ints("size", 2);
    extents.insert(extents.begin(), item.attrs.get_int("channels"));
    return bounded_elements(extents);
  }
  return std::nullopt;
}

std::string resolve_path(const std::string& path, const std::string& file) {
  fs::path p = path;
  if (p.is_absolute()) return p.lexically_normal().string();
  const bool from_file = !file.empty() && file[0] != '<';
  if (from_file) p = fs::path(file).parent_path() / p;
  return fs::absolute(p).lexically_normal().string();
}

std::optional<TypedItem> read_source_item(Node& node, const std::string& key_path,
                                          Diagnostics& diags) {
  return read_item(node, key_path, "data source", source_item_defs(), diags);
}

std::vector<TypedItem> read_transform_list(Node& node, const std::string& key_path,
                                           Diagnostics& diags) {
  std::vector<TypedItem> out;
  if (node.is_null()) return out;
  if (!node.is_sequence()) {
    diags.add(node.mark(), key_path,
              "expected a list of transforms [{type: <transform>, ...}], found " + describe(node));
    return out;
  }
  const auto defs = transform_item_defs();
  for (std::size_t i = 0; i < node.items().size(); ++i) {
    auto item = read_item(node.items()[i], key_path + "[" + std::to_string(i) + "]", "transform",
                          defs, diags);
    if (item) out.push_back(std::move(*item));
  }
  return out;
}

bool acts_on_eval_samples(const std::string& type) {
  for (const auto& d : data::transform_defs())
    if (d.name == type) return !d.random || !d.eval_form.empty();
  return true;
}

}  // namespace trainer::config
