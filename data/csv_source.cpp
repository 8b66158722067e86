// CSV files: numeric feature columns and one label column, read once into
// memory. Errors carry the file and the 1-based line number.
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "data/array_dataset.h"
#include "data/sources.h"

namespace trainer::data {
namespace {

std::vector<std::string> split_line(const std::string& line, char delimiter) {
  std::vector<std::string> cells;
  std::string cell;
  std::istringstream in(line);
  while (std::getline(in, cell, delimiter)) {
    const auto first = cell.find_first_not_of(" \t\r\"");
    const auto last = cell.find_last_not_of(" \t\r\"");
    cells.push_back(first == std::string::npos ? "" : cell.substr(first, last - first + 1));
  }
  if (!line.empty() && line.back() == delimiter) cells.emplace_back();
  return cells;
}

std::string known_columns(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& n : names) text += (text.empty() ? "" : ", ") + n;
  return text;
}

}  // namespace

std::shared_ptr<Dataset> open_csv(const CsvOptions& o) {
  std::ifstream in(o.path);
  if (!in) throw std::runtime_error("CSV file '" + o.path + "' does not exist or is unreadable");
  std::string line;
  std::int64_t line_number = 0;
  std::vector<std::string> names;
  std::size_t columns = 0;

  // The header (or the first row, to count the columns).
  std::streampos data_start = in.tellg();
  while (std::getline(in, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    names = split_line(line, o.delimiter);
    columns = names.size();
    break;
  }
  if (columns == 0) throw std::runtime_error("CSV file '" + o.path + "' is empty");
  if (!o.header) {
    names.clear();
    for (std::size_t c = 0; c < columns; ++c) names.push_back(std::to_string(c));
    in.clear();
    in.seekg(data_start);
    line_number = 0;
  }

  auto column_of = [&](const std::string& name) -> std::size_t {
    for (std::size_t c = 0; c < names.size(); ++c) {
      if (names[c] == name) return c;
    }
    throw std::runtime_error("CSV file '" + o.path + "' has no column '" + name +
                             "'; columns: " + known_columns(names));
  };
  const std::size_t label_column = o.label.empty() ? columns - 1 : column_of(o.label);
  std::vector<std::size_t> feature_columns;
  if (o.features.empty()) {
    for (std::size_t c = 0; c < columns; ++c) {
      if (c != label_column) feature_columns.push_back(c);
    }
  } else {
    for (const auto& name : o.features) feature_columns.push_back(column_of(name));
  }
  if (feature_columns.empty()) {
    throw std::runtime_error("CSV file '" + o.path + "' has no feature columns");
  }

  ArrayData data;
  std::vector<float> features;
  auto parse = [&](const std::string& cell, std::size_t column) {
    double value = 0;
    const char* end = cell.data() + cell.size();
    auto [ptr, ec] = std::from_chars(cell.data(), end, value);
    if (cell.empty() || ec != std::errc() || ptr != end) {
      throw std::runtime_error("CSV file '" + o.path + "' line " + std::to_string(line_number) +
                               ", column '" + names[column] + "': '" + cell + "' is not a number");
    }
    // Values are float32: a finite number beyond its range would silently become inf.
    if (std::isfinite(value) && std::abs(value) > std::numeric_limits<float>::max()) {
      throw std::runtime_error("CSV file '" + o.path + "' line " + std::to_string(line_number) +
                               ", column '" + names[column] + "': '" + cell +
                               "' is outside the float32 range");
    }
    return value;
  };
  while (std::getline(in, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::vector<std::string> cells = split_line(line, o.delimiter);
    if (cells.size() != columns) {
      throw std::runtime_error("CSV file '" + o.path + "' line " + std::to_string(line_number) +
                               " has " + std::to_string(cells.size()) + " fields, expected " +
                               std::to_string(columns) + " like the first row");
    }
    for (std::size_t c : feature_columns)
      features.push_back(static_cast<float>(parse(cells[c], c)));
    const double label = parse(cells[label_column], label_column);
    if (o.regression) {
      data.targets.push_back(static_cast<float>(label));
    } else {
      // Compared before the cast: NaN or a value beyond int64 has no integer to cast to.
      if (!(label >= 0 && label < 0x1p63) || label != std::floor(label) ||
          (o.classes > 0 && label >= static_cast<double>(o.classes))) {
        throw std::runtime_error("CSV file '" + o.path + "' line " + std::to_string(line_number) +
                                 ": label '" + cells[label_column] + "' is not a class in [0, " +
                                 (o.classes > 0 ? std::to_string(o.classes) : std::string("inf")) +
                                 ")");
      }
      data.labels.push_back(static_cast<std::int64_t>(label));
    }
  }
  if (features.empty()) throw std::runtime_error("CSV file '" + o.path + "' has no data rows");
  data.sample_shape = {static_cast<std::int64_t>(feature_columns.size())};
  data.samples = std::move(features);
  if (o.regression) data.target_shape = {1};
  data.num_classes = o.classes;
  data.description = "CSV file '" + o.path + "'";
  return std::make_shared<ArrayDataset>(std::move(data));
}

}  // namespace trainer::data
