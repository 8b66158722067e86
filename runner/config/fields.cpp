// read_fields / parse_field: FieldSpec-driven validation of YAML maps.
#include "runner/config/fields.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>

#include "runner/config/diagnostics.h"
#include "runner/config/overrides.h"
#include "runner/config/scalar.h"
#include "runner/config/yaml_reader.h"

namespace trainer::config {
namespace {

bool is_integer_type(FieldType t) {
  return t == FieldType::integer || t == FieldType::int_list;
}

// "an integer >= 1", "a number > 0 and <= 1".
std::string expected_number(const FieldSpec& spec) {
  std::string out = is_integer_type(spec.type) ? "an integer" : "a number";
  if (spec.min) out += std::string(spec.min_exclusive ? " > " : " >= ") + format_number(*spec.min);
  if (spec.max) out += std::string(spec.min ? " and" : "") + " <= " + format_number(*spec.max);
  return out;
}

// A value float32 cannot hold usefully: a nonzero magnitude below
// kFloat32Smallest (it would become 0) or above kFloat32Largest.
bool beyond_float32(double v) {
  const double magnitude = std::fabs(v);
  return v != 0 && (magnitude < kFloat32Smallest || magnitude > kFloat32Largest);
}

// The suggestion under an error about a float32 setting's value.
std::string float32_advice() {
  return "it is used in float32, where a nonzero magnitude below " +
         format_number(kFloat32Smallest) + " comes too near 0, and one above " +
         format_number(kFloat32Largest) + " too near infinity";
}

// The suggestion under an out-of-range value: the field's own advice, else
// float32's limits when they are what the value broke.
std::string range_advice(const FieldSpec& spec, bool float32_limit) {
  if (!spec.out_of_range_advice.empty()) return spec.out_of_range_advice;
  return float32_limit ? float32_advice() : "";
}

bool in_range(const FieldSpec& spec, double v) {
  if (std::isnan(v)) return false;
  if (spec.min && (spec.min_exclusive ? v <= *spec.min : v < *spec.min)) return false;
  if (spec.max && v > *spec.max) return false;
  return true;
}

// Advice for a quoted "$name" or "${name}" where a value belongs: quoted, it
// is a string, not a block parameter; "" for any other node.
std::string quoted_reference_advice(const Node& node) {
  if (!node.is_scalar() || !node.quoted()) return {};
  const std::string name = block_parameter_name(node.text());
  if (name.empty()) return {};
  return "a block parameter is written without quotes: $" + name + " (quoted, it is the string '" +
         node.text() + "')";
}

// One number/integer element (a scalar or a list item). Every number field
// rejects infinities here (NaN fails the range check), so no field needs its own.
template <class T>
bool parse_number_element(const Node& node, const FieldSpec& spec, const std::string& key_path,
                          Diagnostics& diags, T& out) {
  const bool want_int = std::is_integral_v<T>;
  const ScalarKind kind = node.is_scalar() ? classify(node) : ScalarKind::string;
  std::optional<double> value;
  if (want_int) {
    if (auto i = as_int(node)) {
      value = static_cast<double>(*i), out = static_cast<T>(*i);
    } else if (kind == ScalarKind::integer) {
      diags.add(node.mark(), key_path,
                "integer " + node.text() +
                    " is outside the representable range (-9223372036854775808 to "
                    "9223372036854775807); expected " +
                    expected_number(spec));
      return false;
    }
  } else if (auto d = as_number(node)) {
    if (std::isinf(*d)) {
      diags.add(
          node.mark(), key_path,
          "expected a finite " + expected_number(spec).substr(2) + ", found " + describe(node) +
              (kind == ScalarKind::integer || node.text().find_first_of("eE") != std::string::npos
                   ? " (too large to represent)"
                   : ""));
      return false;
    }
    value = *d;
    out = static_cast<T>(*d);
  }
  if (!value || !in_range(spec, *value)) {
    const bool float32_limit = value && spec.float32 && beyond_float32(*value);
    const std::string reference = quoted_reference_advice(node);
    diags.add(node.mark(), key_path,
              "expected " + expected_number(spec) + ", found " + describe(node),
              reference.empty() ? range_advice(spec, float32_limit) : reference);
    return false;
  }
  // In range, but between 0 and the smallest magnitude float32 holds.
  if (spec.float32 && beyond_float32(*value)) {
    diags.add(node.mark(), key_path,
              "expected 0 or a number from " + format_number(kFloat32Smallest) + " to " +
                  format_number(spec.max.value_or(kFloat32Largest)) + ", found " + describe(node),
              range_advice(spec, true));
    return false;
  }
  return true;
}

bool parse_string_element(const Node& node, const FieldSpec& spec, const std::string& key_path,
                          Diagnostics& diags, std::string& out) {
  if (spec.integers_as_text && node.is_scalar() && classify(node) == ScalarKind::integer) {
    // As YAML reads it: 007 and +7 are 7.
    const std::optional<std::int64_t> value = as_int(node);
    out = value ? std::to_string(*value) : node.text();
    return true;
  }
  if (!node.is_scalar() || classify(node) != ScalarKind::string) {
    const bool plain = node.is_scalar();
    // A shell takes the quotes off an override's value: they go inside its own.
    const std::string quoted = "\"" + node.text() + "\"";
    const std::string advice =
        "quote it to make it a string: " + quoted +
        (node.mark().file == kCommandLine
             ? " (a shell keeps the quotes inside its own: " + key_path + "='" + quoted + "')"
             : "");
    diags.add(node.mark(), key_path,
              std::string(spec.integers_as_text ? "expected a string or an integer"
                                                : "expected a string") +
                  ", found " + describe(node),
              plain ? advice : "");
    return false;
  }
  // No file name or label holds one: a path would be cut there by the system.
  if (node.text().find('\0') != std::string::npos) {
    diags.add(node.mark(), key_path,
              "the string holds a NUL byte (\\0) at character " +
                  std::to_string(node.text().find('\0')) + ", which no name may hold",
              "remove it");
    return false;
  }
  out = node.text();
  return true;
}

// "2", "1 or 2", "at least 1": how many items a list field takes.
std::string item_count(const FieldSpec& spec) {
  const std::string least = std::to_string(spec.min_items);
  if (!spec.max_items) return "at least " + least;
  if (*spec.max_items == spec.min_items) return least;
  const std::string most = std::to_string(*spec.max_items);
  return least + (*spec.max_items == spec.min_items + 1 ? " or " : " to ") + most;
}

template <class T, class ParseOne>
bool parse_list(const Node& node, const FieldSpec& spec, const std::string& key_path,
                Diagnostics& diags, std::vector<T>& out, const std::string& what,
                ParseOne parse_one) {
  if (!node.is_sequence()) {
    diags.add(node.mark(), key_path, "expected a list of " + what + ", found " + describe(node));
    return false;
  }
  bool ok = true;
  for (std::size_t i = 0; i < node.items().size(); ++i) {
    T v{};
    if (parse_one(node.items()[i], key_path + "[" + std::to_string(i) + "]", v))
      out.push_back(v);
    else
      ok = false;
  }
  if (ok && (out.size() < spec.min_items || (spec.max_items && out.size() > *spec.max_items))) {
    diags.add(node.mark(), key_path,
              "expected a list of " + item_count(spec) + " " + what + ", found " +
                  std::to_string(out.size()) + " item(s)");
    return false;
  }
  return ok;
}

// For a `{type: X, ...}` map, what its keys depend on: "layer 2 is a relu; ",
// "data.train is of type idx; "; "" for other maps.
std::string of_type(const Node& map, const std::string& key_path,
                    const std::vector<std::string>& extra_allowed_keys) {
  const Node* type = map.find("type");
  if (!type || !type->is_scalar() || type->text().empty() ||
      std::find(extra_allowed_keys.begin(), extra_allowed_keys.end(), "type") ==
          extra_allowed_keys.end())
    return "";
  static const std::regex top_layer(R"(model\.layers\[(\d+)\])");
  std::smatch index;
  if (std::regex_match(key_path, index, top_layer)) {
    const char first = type->text()[0];
    const bool vowel = std::string("aeiou").find(first) != std::string::npos;
    return "layer " + index[1].str() + " is " + (vowel ? "an " : "a ") + type->text() + "; ";
  }
  return (key_path.empty() ? std::string("this map") : key_path) + " is of type " + type->text() +
         "; ";
}

}  // namespace

std::string format_number(double v) {
  std::ostringstream s;
  // A whole number up to 2^64 in full (1000000000, not 1e+09); others in 6 digits.
  if (std::nearbyint(v) == v && std::fabs(v) <= 18446744073709551616.0)
    s << std::fixed << std::setprecision(0);
  s << v;
  return s.str();
}

std::string join_key(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

std::string describe_constraint(const FieldSpec& spec) {
  std::string out;
  if (spec.type == FieldType::enumeration) out = "one of " + join(spec.choices);
  if (spec.min) out += std::string(spec.min_exclusive ? "> " : ">= ") + format_number(*spec.min);
  if (spec.max) out += std::string(out.empty() ? "" : ", ") + "<= " + format_number(*spec.max);
  if (spec.float32 && (!spec.min || *spec.min < kFloat32Smallest))
    out += std::string(out.empty() ? "" : ", ") + "none between 0 and " +
           format_number(kFloat32Smallest) + " (float32)";
  if (spec.min_items > 0 || spec.max_items)
    out += std::string(out.empty() ? "" : ", ") + item_count(spec) + " items";
  if (!spec.applies_when.empty()) {
    std::string values;
    for (const auto& v : spec.applies_values) values += (values.empty() ? "" : " or ") + v;
    out += std::string(out.empty() ? "" : "; ") +
           (spec.refused_otherwise ? "only with " : "acts only with ") + spec.applies_when + ": " +
           values + (spec.refused_otherwise ? " (an error otherwise)" : "");
  }
  if (!spec.applies_while_positive.empty())
    out += std::string(out.empty() ? "" : "; ") + "acts only with " + spec.applies_while_positive +
           " above 0";
  return out;
}

bool parse_field(const Node& node, const FieldSpec& spec, const std::string& key_path,
                 Diagnostics& diags, FieldValue& out) {
  switch (spec.type) {
    case FieldType::boolean: {
      auto b = as_bool(node);
      if (!b) {
        diags.add(node.mark(), key_path,
                  "expected a boolean (true or false), found " + describe(node));
        return false;
      }
      out = *b;
      return true;
    }
    case FieldType::integer: {
      std::int64_t v = 0;
      if (!parse_number_element(node, spec, key_path, diags, v)) return false;
      out = v;
      return true;
    }
    case FieldType::number: {
      double v = 0;
      if (!parse_number_element(node, spec, key_path, diags, v)) return false;
      out = v;
      return true;
    }
    case FieldType::string: {
      std::string s;
      if (!parse_string_element(node, spec, key_path, diags, s)) return false;
      out = s;
      return true;
    }
    case FieldType::enumeration: {
      const bool valid = node.is_scalar() && std::find(spec.choices.begin(), spec.choices.end(),
                                                       node.text()) != spec.choices.end();
      if (!valid) {
        const std::string near = node.is_scalar() ? nearest(node.text(), spec.choices) : "";
        diags.add(node.mark(), key_path,
                  "expected one of " + join(spec.choices) + ", found " + describe(node),
                  near.empty() ? "" : "did you mean '" + near + "'?");
        return false;
      }
      out = node.text();
      return true;
    }
    case FieldType::int_list: {
      std::vector<std::int64_t> list;
      if (node.is_scalar()) {  // a single integer, broadcast by the consumer
        std::int64_t v = 0;
        if (!parse_number_element(node, spec, key_path, diags, v)) return false;
        out = v;
        return true;
      }
      auto one = [&](const Node& n, const std::string& p, std::int64_t& v) {
        return parse_number_element(n, spec, p, diags, v);
      };
      if (!parse_list(node, spec, key_path, diags, list, "integers", one)) return false;
      out = list;
      return true;
    }
    case FieldType::number_list: {
      std::vector<double> list;
      auto one = [&](const Node& n, const std::string& p, double& v) {
        return parse_number_element(n, spec, p, diags, v);
      };
      if (!parse_list(node, spec, key_path, diags, list, "numbers", one)) return false;
      out = list;
      return true;
    }
    case FieldType::string_list: {
      std::vector<std::string> list;
      auto one = [&](const Node& n, const std::string& p, std::string& v) {
        return parse_string_element(n, spec, p, diags, v);
      };
      if (!parse_list(node, spec, key_path, diags, list, "strings", one)) return false;
      out = list;
      return true;
    }
  }
  return false;
}

FieldValue parse_field(const Node& value, const FieldSpec& spec, const std::string& key_path,
                       Diagnostics& diags) {
  FieldValue out;
  parse_field(value, spec, key_path, diags, out);
  return out;
}

Node default_node(const FieldSpec& spec) {
  if (spec.default_yaml.empty()) return Node{};
  // Defaults are parsed once per distinct text; they are compile-time constants.
  static std::mutex mutex;
  static std::map<std::string, Node> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(spec.default_yaml);
  if (it == cache.end()) {
    Diagnostics ignored;
    Node parsed = parse_yaml(spec.default_yaml, kDefaultFile, ignored);
    it = cache.emplace(spec.default_yaml, std::move(parsed)).first;
  }
  return it->second;
}

Attrs read_fields(const Node& map, const std::vector<FieldSpec>& specs, const std::string& key_path,
                  Diagnostics& diags, const std::vector<std::string>& extra_allowed_keys,
                  const std::function<std::string(const std::string&)>& key_elsewhere) {
  Attrs attrs;
  const bool usable = map.is_map() || map.is_null();
  if (!usable) {
    // `optimizer: adam`, as other tools name a choice: the choice it is, or
    // is nearest.
    const auto type = std::find_if(specs.begin(), specs.end(),
                                   [](const FieldSpec& s) { return s.name == "type"; });
    const std::string kind =
        type == specs.end() || !map.is_scalar() ? ""
        : std::find(type->choices.begin(), type->choices.end(), map.text()) != type->choices.end()
            ? map.text()
            : nearest(map.text(), type->choices);
    diags.add(map.mark(), key_path, "expected a map of settings, found " + describe(map),
              kind.empty()
                  ? ""
                  : "write the kind as its type: " + key_path.substr(key_path.rfind('.') + 1) +
                        ": {type: " + kind + "}");
  }
  std::vector<std::string> valid;
  for (const auto& s : specs) valid.push_back(s.name);
  valid.insert(valid.end(), extra_allowed_keys.begin(), extra_allowed_keys.end());

  std::set<std::string> seen;
  std::set<std::string> meant;  // what unknown keys were taken for: not also missing
  if (map.is_map()) {
    for (std::size_t i = 0; i < map.size(); ++i) {
      const std::string& key = map.key_at(i);
      const auto spec = std::find_if(specs.begin(), specs.end(),
                                     [&](const FieldSpec& s) { return s.name == key; });
      if (spec != specs.end()) {
        seen.insert(key);  // even when invalid (reported): no default replaces it
        FieldValue v;
        if (parse_field(map.value_at(i), *spec, join_key(key_path, key), diags, v))
          attrs.set(key, std::move(v));
        continue;
      }
      if (std::find(extra_allowed_keys.begin(), extra_allowed_keys.end(), key) !=
          extra_allowed_keys.end())
        continue;
      // A key another section has by this very name is that one, before a
      // near name here (optimizer.epochs is train.epochs, not eps).
      const std::string elsewhere = key_elsewhere ? key_elsewhere(key) : "";
      const auto dot = elsewhere.rfind('.');
      const bool exact_elsewhere = !elsewhere.empty() && elsewhere.substr(dot + 1) == key;
      const std::string near = exact_elsewhere ? "" : nearest(key, valid);
      meant.insert(near);
      diags.add(map.key_mark_at(i), join_key(key_path, key), "unknown key '" + key + "'",
                !near.empty() ? "did you mean '" + near + "'?"
                : !elsewhere.empty()
                    ? "did you mean '" + elsewhere + "'? (" + elsewhere.substr(dot + 1) + " goes " +
                          (dot == std::string::npos ? std::string("at the top level")
                                                    : "under " + elsewhere.substr(0, dot) + ":") +
                          ")"
                    : of_type(map, key_path, extra_allowed_keys) + "valid keys: " + join(valid));
    }
  }

  for (const auto& spec : specs) {
    if (seen.count(spec.name)) continue;
    if (spec.required) {
      if (meant.count(spec.name)) continue;
      diags.add(map.mark(), join_key(key_path, spec.name),
                "missing required key '" + spec.name + "' (" + field_type_name(spec) +
                    (spec.doc.empty() ? "" : ": " + spec.doc) + ")");
      continue;
    }
    const Node def = default_node(spec);
    if (def.is_null()) continue;
    FieldValue v;
    Diagnostics internal;
    if (parse_field(def, spec, join_key(key_path, spec.name), internal, v))
      attrs.set(spec.name, std::move(v));
    else
      throw std::logic_error("the default '" + spec.default_yaml + "' of field '" + spec.name +
                             "' does not satisfy its own spec: " + internal.format_all());
  }
  return attrs;
}

void fill_defaults(Node& map, const std::vector<FieldSpec>& specs) {
  if (map.is_null()) {
    const Mark mark = map.mark();
    map = Node::map(mark);
  }
  if (!map.is_map()) return;
  for (const auto& spec : specs) {
    if (map.find(spec.name)) continue;
    Node def = default_node(spec);
    if (def.is_null()) continue;
    map.set(spec.name, std::move(def), Mark{kDefaultFile, 0, 0});
  }
}

}  // namespace trainer::config
