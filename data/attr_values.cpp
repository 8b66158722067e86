// Attrs readers with fallbacks, tolerant of integer-vs-number and scalar-vs-list.
#include "data/attr_values.h"

#include <stdexcept>
#include <variant>

namespace trainer::data {
namespace {

const FieldValue* find(const Attrs& attrs, const std::string& name) {
  auto it = attrs.values().find(name);
  return it == attrs.values().end() ? nullptr : &it->second;
}

[[noreturn]] void wrong_type(const std::string& name, const char* expected) {
  throw std::runtime_error("setting '" + name + "' must be " + expected);
}

}  // namespace

bool bool_or(const Attrs& attrs, const std::string& name, bool fallback) {
  const FieldValue* v = find(attrs, name);
  if (!v) return fallback;
  if (auto* b = std::get_if<bool>(v)) return *b;
  wrong_type(name, "a boolean");
}

std::int64_t int_or(const Attrs& attrs, const std::string& name, std::int64_t fallback) {
  const FieldValue* v = find(attrs, name);
  if (!v) return fallback;
  if (auto* i = std::get_if<std::int64_t>(v)) return *i;
  if (auto* l = std::get_if<std::vector<std::int64_t>>(v); l && l->size() == 1) return (*l)[0];
  wrong_type(name, "an integer");
}

double number_or(const Attrs& attrs, const std::string& name, double fallback) {
  const FieldValue* v = find(attrs, name);
  if (!v) return fallback;
  if (auto* d = std::get_if<double>(v)) return *d;
  if (auto* i = std::get_if<std::int64_t>(v)) return static_cast<double>(*i);
  wrong_type(name, "a number");
}

std::string string_or(const Attrs& attrs, const std::string& name, const std::string& fallback) {
  const FieldValue* v = find(attrs, name);
  if (!v) return fallback;
  if (auto* s = std::get_if<std::string>(v)) return *s;
  wrong_type(name, "a string");
}

std::vector<double> numbers_or(const Attrs& attrs, const std::string& name,
                               std::vector<double> fallback) {
  const FieldValue* v = find(attrs, name);
  if (!v) return fallback;
  if (auto* d = std::get_if<double>(v)) return {*d};
  if (auto* i = std::get_if<std::int64_t>(v)) return {static_cast<double>(*i)};
  if (auto* l = std::get_if<std::vector<double>>(v)) return *l;
  if (auto* l = std::get_if<std::vector<std::int64_t>>(v)) return {l->begin(), l->end()};
  wrong_type(name, "a number or a list of numbers");
}

std::vector<std::int64_t> ints_or(const Attrs& attrs, const std::string& name,
                                  std::vector<std::int64_t> fallback) {
  const FieldValue* v = find(attrs, name);
  if (!v) return fallback;
  if (auto* i = std::get_if<std::int64_t>(v)) return {*i};
  if (auto* l = std::get_if<std::vector<std::int64_t>>(v)) return *l;
  wrong_type(name, "an integer or a list of integers");
}

std::vector<std::string> strings_or(const Attrs& attrs, const std::string& name,
                                    std::vector<std::string> fallback) {
  const FieldValue* v = find(attrs, name);
  if (!v) return fallback;
  if (auto* s = std::get_if<std::string>(v)) return {*s};
  if (auto* l = std::get_if<std::vector<std::string>>(v)) return *l;
  wrong_type(name, "a string or a list of strings");
}

std::string required_string(const Attrs& attrs, const std::string& name, const std::string& what) {
  const FieldValue* v = find(attrs, name);
  if (!v) throw std::runtime_error(what + ": setting '" + name + "' is required");
  return string_or(attrs, name, "");
}

}  // namespace trainer::data
