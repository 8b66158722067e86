// CSV files: numeric feature columns and one label column, read once into
// memory. Errors carry the file and the 1-based line number.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <unordered_map>

#include "data/array_dataset.h"
#include "data/file_bytes.h"
#include "data/finite_check.h"
#include "data/loader.h"  // kIgnoreLabel
#include "data/quote.h"
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

// The column names for an error: each shortened, at most the first 20 (then
// how many there are).
std::string known_columns(const std::vector<std::string>& names) {
  constexpr std::size_t kShown = 20;
  std::string text;
  for (std::size_t c = 0; c < names.size() && c < kShown; ++c)
    text += (text.empty() ? "" : ", ") + excerpt(names[c]);
  if (names.size() > kShown) text += ", ... (" + std::to_string(names.size()) + " columns)";
  return text;
}

// When the first line, split at `delimiter`, is one column that holds another
// common separator (';', tab, '|'): " (one column, split at ','; if the file
// is separated by ';', set delimiter: ';')".
std::string delimiter_hint(const std::string& first_line, std::size_t columns, char delimiter) {
  if (columns != 1) return "";
  for (const char separator : {';', '\t', '|'}) {
    if (separator == delimiter || first_line.find(separator) == std::string::npos) continue;
    const std::string shown = separator == '\t' ? "\"\\t\"" : "'" + std::string(1, separator) + "'";
    return " (one column, split at '" + escaped(std::string(1, delimiter)) +
           "'; if the file is separated by " + shown + ", set delimiter: " + shown + ")";
  }
  return "";
}

// The file's text (gzip-compressed or not), without a UTF-8 byte order mark,
// with old Mac line ends (CR alone) read as line ends.
std::string csv_text(const std::string& path) {
  const std::vector<std::uint8_t> bytes = read_file_bytes(path);
  std::string text(bytes.begin(), bytes.end());
  if (text.starts_with("\xEF\xBB\xBF")) text.erase(0, 3);
  if (text.find('\n') == std::string::npos) std::replace(text.begin(), text.end(), '\r', '\n');
  return text;
}

// A name given twice selects whichever comes first: refuse it instead (one
// pass with a hash map, so a header of a million columns takes no time).
void check_unique_names(const std::string& path, const std::vector<std::string>& names,
                        std::int64_t line_number) {
  std::unordered_map<std::string_view, std::size_t> first_of;
  for (std::size_t c = 0; c < names.size(); ++c) {
    const auto [at, added] = first_of.emplace(names[c], c);
    if (added) continue;
    throw std::runtime_error("CSV file '" + path + "' line " + std::to_string(line_number) +
                             ": the header names column " + quote(names[c]) + " twice (columns " +
                             std::to_string(at->second + 1) + " and " + std::to_string(c + 1) +
                             "); rename one, so that `label` and `features` select one column");
  }
}

}  // namespace

std::shared_ptr<Dataset> open_csv(const CsvOptions& o) {
  if (o.regression && o.classes != 0) {
    throw SourceFieldError("classes", "classes: " + std::to_string(o.classes) +
                                          " has no effect with regression: true (regression "
                                          "targets are not classes): remove classes, or set "
                                          "regression: false for class labels");
  }
  std::istringstream in(csv_text(o.path));
  std::string line;
  std::int64_t line_number = 0;
  std::vector<std::string> names;
  std::size_t columns = 0;
  std::string first_line;
  std::int64_t first_line_number = 0;  // of the first line that is not blank

  // The header (or the first row, to count the columns).
  std::streampos data_start = in.tellg();
  while (std::getline(in, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    names = split_line(line, o.delimiter);
    columns = names.size();
    first_line = line;
    first_line_number = line_number;
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
  check_unique_names(o.path, names, line_number);

  // `field`: the setting that names the column ("label", "features").
  auto column_of = [&](const std::string& name, const std::string& field) -> std::size_t {
    for (std::size_t c = 0; c < names.size(); ++c) {
      if (names[c] == name) return c;
    }
    const bool index = !name.empty() && name.find_first_not_of("0123456789") == std::string::npos;
    throw SourceFieldError(
        field,
        "CSV file '" + o.path + "' has no column " + quote(name) +
            "; columns: " + known_columns(names) +
            (o.header && index ? " (with a header, columns go by name; header: false numbers "
                                 "them from 0)"
                               : "") +
            delimiter_hint(first_line, columns, o.delimiter));
  };
  const std::size_t label_column = o.label.empty() ? columns - 1 : column_of(o.label, "label");
  std::vector<std::size_t> feature_columns;
  if (o.features.empty()) {
    for (std::size_t c = 0; c < columns; ++c) {
      if (c != label_column) feature_columns.push_back(c);
    }
  } else {
    for (const auto& name : o.features) {
      const std::size_t c = column_of(name, "features");
      if (c == label_column) {
        throw SourceFieldError(
            "features",
            "CSV file '" + o.path + "': `features` lists " + quote(name) + ", the label column" +
                (o.label.empty() ? " (the last column, as `label` is not set)" : " (`label`)") +
                "; the model would see the answer among its inputs: remove it from `features`");
      }
      if (std::find(feature_columns.begin(), feature_columns.end(), c) != feature_columns.end()) {
        throw SourceFieldError("features", "CSV file '" + o.path + "': `features` lists " +
                                               quote(name) + " twice; list each column once");
      }
      feature_columns.push_back(c);
    }
  }
  if (feature_columns.empty()) {
    throw std::runtime_error("CSV file '" + o.path + "' has no feature columns" +
                             delimiter_hint(first_line, columns, o.delimiter));
  }

  ArrayData data;
  std::vector<float> features;
  std::vector<std::int64_t> lines;  // of each class label, for errors
  // A cell's value; `finite`: NaN and infinity are errors (features and
  // regression targets; a class label has its own check).
  auto parse = [&](const std::string& cell, std::size_t column, bool finite) {
    double value = 0;
    const char* end = cell.data() + cell.size();
    auto [ptr, ec] = std::from_chars(cell.data(), end, value);
    const auto where = [&] {
      return "CSV file '" + o.path + "' line " + std::to_string(line_number) + ", column " +
             quote(names[column]) + ": " + quote(cell);
    };
    if (ec == std::errc::result_out_of_range && ptr == end) {  // 1e999: beyond even float64
      throw std::runtime_error(where() + " is outside the float32 range");
    }
    if (cell.empty() || ec != std::errc() || ptr != end) {
      // The first line read as data: a header, most likely.
      const bool first = line_number == first_line_number && !o.header && !cell.empty();
      throw std::runtime_error(
          where() + " is not a number" +
          (first ? "; if the first line names the columns, set header: true"
           : cell.empty() && column + 1 == names.size()
               ? "; the line ends with a delimiter: remove the trailing one, or give the column "
                 "a value"
               : ""));
    }
    if (finite && !std::isfinite(value)) {
      throw std::runtime_error(where() + " is not a finite number (" + non_finite_name(value) +
                               "); fill in or drop the missing or overflowing values");
    }
    // Values are float32: a finite number beyond its range would silently become inf.
    if (std::isfinite(value) && std::abs(value) > std::numeric_limits<float>::max()) {
      throw std::runtime_error(where() + " is outside the float32 range");
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
      features.push_back(static_cast<float>(parse(cells[c], c, true)));
    const double label = parse(cells[label_column], label_column, o.regression);
    if (o.regression) {
      data.targets.push_back(static_cast<float>(label));
    } else {
      // Compared before the cast: NaN or a value beyond int64 has no integer to cast to.
      // kIgnoreLabel (-100) is a sample the loss leaves out, in no class.
      const bool ignored = label == static_cast<double>(kIgnoreLabel);
      if (!ignored && (!(label >= 0 && label < 0x1p63) || label != std::floor(label) ||
                       (o.classes > 0 && label >= static_cast<double>(o.classes)))) {
        throw std::runtime_error(
            "CSV file '" + o.path + "' line " + std::to_string(line_number) + ": label " +
            quote(cells[label_column]) + " is not a class in [0, " +
            (o.classes > 0 ? std::to_string(o.classes) : std::string("inf")) + ")" +
            (label < 0
                 ? " (nor " + std::to_string(kIgnoreLabel) + ", the label of an ignored sample)"
                 : std::string()));
      }
      data.labels.push_back(static_cast<std::int64_t>(label));
      lines.push_back(line_number);
    }
  }
  if (features.empty()) throw std::runtime_error("CSV file '" + o.path + "' has no data rows");
  data.sample_shape = {static_cast<std::int64_t>(feature_columns.size())};
  data.samples = std::move(features);
  if (o.regression) data.target_shape = {1};
  data.num_classes = o.classes;
  data.description = "CSV file '" + o.path + "'";
  data.label_origin = [path = o.path, lines = std::move(lines)](std::int64_t sample) {
    return "line " + std::to_string(lines[static_cast<std::size_t>(sample)]) + " of CSV file '" +
           path + "'";
  };
  return std::make_shared<ArrayDataset>(std::move(data));
}

}  // namespace trainer::data
