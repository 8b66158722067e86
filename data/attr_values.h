// Reading source and transform settings from Attrs with a fallback, so the
// data pipeline works both on Attrs the config layer filled (defaults present)
// and on Attrs built by hand in code and tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/field.h"

namespace trainer::data {

bool bool_or(const Attrs& attrs, const std::string& name, bool fallback);
std::int64_t int_or(const Attrs& attrs, const std::string& name, std::int64_t fallback);
double number_or(const Attrs& attrs, const std::string& name, double fallback);
std::string string_or(const Attrs& attrs, const std::string& name, const std::string& fallback);
// Lists also accept a single scalar (one entry).
std::vector<double> numbers_or(const Attrs& attrs, const std::string& name,
                               std::vector<double> fallback);
std::vector<std::int64_t> ints_or(const Attrs& attrs, const std::string& name,
                                  std::vector<std::int64_t> fallback);
std::vector<std::string> strings_or(const Attrs& attrs, const std::string& name,
                                    std::vector<std::string> fallback);
// A required string (paths); throws std::runtime_error naming `what` when absent.
std::string required_string(const Attrs& attrs, const std::string& name, const std::string& what);

}  // namespace trainer::data
