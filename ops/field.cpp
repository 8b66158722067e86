// FieldSpec names and Attrs accessors.
#include "ops/field.h"

namespace trainer {

const char* field_type_name(FieldType type) {
  switch (type) {
    case FieldType::boolean:
      return "boolean";
    case FieldType::integer:
      return "integer";
    case FieldType::number:
      return "number";
    case FieldType::string:
      return "string";
    case FieldType::enumeration:
      return "one of a fixed set of strings";
    case FieldType::int_list:
      return "integer or list of integers";
    case FieldType::number_list:
      return "list of numbers";
    case FieldType::string_list:
      return "list of strings";
  }
  return "?";
}

std::string field_type_name(const FieldSpec& spec) {
  const std::string name = field_type_name(spec.type);
  if (!spec.integers_as_text) return name;
  return spec.type == FieldType::string_list ? "list of strings or integers" : name + " or integer";
}

const FieldValue& Attrs::at(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) throw std::logic_error("attribute '" + name + "' was never set");
  return it->second;
}

std::int64_t Attrs::get_int(const std::string& name) const {
  const auto& v = at(name);
  if (auto* i = std::get_if<std::int64_t>(&v)) return *i;
  if (auto* l = std::get_if<std::vector<std::int64_t>>(&v); l && l->size() == 1) return (*l)[0];
  throw std::logic_error("attribute '" + name + "' is not an integer");
}

double Attrs::get_number(const std::string& name) const {
  const auto& v = at(name);
  if (auto* d = std::get_if<double>(&v)) return *d;
  if (auto* i = std::get_if<std::int64_t>(&v)) return static_cast<double>(*i);
  throw std::logic_error("attribute '" + name + "' is not a number");
}

std::vector<std::int64_t> Attrs::get_ints(const std::string& name, std::size_t n) const {
  const auto& v = at(name);
  if (auto* i = std::get_if<std::int64_t>(&v)) return std::vector<std::int64_t>(n, *i);
  const auto& list = std::get<std::vector<std::int64_t>>(v);
  if (list.size() == 1 && n > 1) return std::vector<std::int64_t>(n, list[0]);
  return list;
}

}  // namespace trainer
