// FieldSpec: the one description of a typed, documented, constrained setting.
// Op attributes (conv2d.stride) and configuration fields (optimizer.lr) are both
// declared as FieldSpecs; parsing, validation, defaults, JSON Schema and the
// generated reference all read them. FieldValue is a parsed value of a field.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

namespace trainer {

enum class FieldType {
  boolean,
  integer,
  number,
  string,
  enumeration,  // a string from `choices`
  int_list,     // also accepts a single integer, broadcast by the consumer
  number_list,
  string_list,
};

const char* field_type_name(FieldType type);  // "integer", "list of integers", ...

// The magnitudes a number computed in float32 may have besides 0. float32
// holds about 1e-38 to 3e38; these bounds leave room for the factors a
// schedule, an update or a loss scale multiplies a setting by. `trainer
// lr-find` bounds its rates by them too.
inline constexpr double kFloat32Smallest = 1e-30;
inline constexpr double kFloat32Largest = 1e30;

struct FieldSpec {
  std::string name;
  FieldType type = FieldType::number;
  std::string doc;
  // The default as YAML text ("0.1", "[1, 1]", "relu"); empty and !required means
  // "no value" (the field is optional and absent).
  std::string default_yaml;
  bool required = false;
  std::optional<double> min;  // for integer/number and every element of lists
  std::optional<double> max;
  bool min_exclusive = false;
  std::vector<std::string> choices;  // enumeration values, or suggested strings
  // A list's length: from min_items to max_items (none: no most).
  std::size_t min_items = 0;
  std::optional<std::size_t> max_items;
  // The field acts only when the field `applies_when` (a sibling's name, or a
  // dotted path from the top of the config) holds one of `applies_values`;
  // set to another value there, it is reported as having no effect: a
  // warning, or with `refused_otherwise` an error (a data source's settings:
  // the data would not be what the config says).
  std::string applies_when;
  std::vector<std::string> applies_values;
  bool refused_otherwise = false;
  // The field acts only while the number `applies_while_positive` (a
  // sibling's name) is above 0, as nesterov needs momentum; at 0, setting it
  // is reported as having no effect (a warning).
  std::string applies_while_positive;
  // The value reaches float32 arithmetic (a kernel, the loss scale): besides
  // 0 its magnitude must lie from kFloat32Smallest to kFloat32Largest, or
  // float32 would turn it into 0 or infinity.
  bool float32 = false;
  // Printed under an out-of-range value's error (what to write instead);
  // empty: a float32 setting explains float32's limits, others print none.
  std::string out_of_range_advice;
  // A string (or list of strings) that also takes plain integers, as their
  // decimal text: the column indices of a CSV without a header (`label: 2`).
  bool integers_as_text = false;

  // Builder-style helpers so declarations read as one line each.
  FieldSpec& def(std::string yaml) {
    default_yaml = std::move(yaml);
    return *this;
  }
  FieldSpec& req() {
    required = true;
    return *this;
  }
  FieldSpec& at_least(double v) {
    min = v;
    return *this;
  }
  FieldSpec& above(double v) {
    min = v;
    min_exclusive = true;
    return *this;
  }
  FieldSpec& at_most(double v) {
    max = v;
    return *this;
  }
  FieldSpec& one_of(std::vector<std::string> c) {
    choices = std::move(c);
    return *this;
  }
  FieldSpec& length(std::size_t n) { return items(n, n); }
  FieldSpec& items(std::size_t least, std::optional<std::size_t> most = std::nullopt) {
    min_items = least;
    max_items = most;
    return *this;
  }
  // Marks a number as computed in float32 (`float32`) and narrows its range
  // to what float32 holds: at most kFloat32Largest, and a range that starts
  // above 0 starts at kFloat32Smallest. Call it after the range.
  FieldSpec& in_float32() {
    float32 = true;
    if (!max || *max > kFloat32Largest) max = kFloat32Largest;
    if (min && *min == 0 && min_exclusive) {
      min = kFloat32Smallest;
      min_exclusive = false;
    }
    return *this;
  }
  FieldSpec& or_integers() {
    integers_as_text = true;
    return *this;
  }
  FieldSpec& advice_when_out_of_range(std::string text) {
    out_of_range_advice = std::move(text);
    return *this;
  }
  FieldSpec& only_when(std::string field, std::vector<std::string> values) {
    applies_when = std::move(field);
    applies_values = std::move(values);
    return *this;
  }
  FieldSpec& refused_unless(std::string field, std::vector<std::string> values) {
    only_when(std::move(field), std::move(values));
    refused_otherwise = true;
    return *this;
  }
  FieldSpec& only_while_positive(std::string field) {
    applies_while_positive = std::move(field);
    return *this;
  }
};

// The type of `spec` as a reader names it: field_type_name(spec.type), with
// " or integer" ("list of strings or integers") where it takes integers too.
std::string field_type_name(const FieldSpec& spec);

inline FieldSpec field(std::string name, FieldType type, std::string doc) {
  FieldSpec s;
  s.name = std::move(name);
  s.type = type;
  s.doc = std::move(doc);
  return s;
}

using FieldValue = std::variant<bool, std::int64_t, double, std::string, std::vector<std::int64_t>,
                                std::vector<double>, std::vector<std::string>>;

// Parsed attributes of one op instance, keyed by FieldSpec::name. Every declared
// attribute is present (defaults filled) once a layer has been validated.
class Attrs {
 public:
  void set(const std::string& name, FieldValue value) { values_[name] = std::move(value); }
  bool has(const std::string& name) const { return values_.count(name) != 0; }

  bool get_bool(const std::string& name) const { return std::get<bool>(at(name)); }
  std::int64_t get_int(const std::string& name) const;
  double get_number(const std::string& name) const;
  const std::string& get_string(const std::string& name) const {
    return std::get<std::string>(at(name));
  }
  // An int_list attribute; a scalar integer is broadcast to `n` entries.
  std::vector<std::int64_t> get_ints(const std::string& name, std::size_t n) const;

  const std::map<std::string, FieldValue>& values() const { return values_; }

 private:
  const FieldValue& at(const std::string& name) const;
  std::map<std::string, FieldValue> values_;
};

}  // namespace trainer
