// CSV files: numeric feature columns and one label column (class numbers,
// class names or float targets), read once into memory. Errors carry the file
// and the 1-based line number.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <unordered_map>

#include "data/array_dataset.h"
#include "data/file_bytes.h"
#include "data/file_signature.h"
#include "data/finite_check.h"
#include "data/loader.h"  // kIgnoreLabel
#include "data/quote.h"
#include "data/sources.h"
#include "data/utf8.h"

namespace trainer::data {
namespace {

// The fields of one line. A field in double quotes may hold the delimiter,
// and "" for a quote (RFC 4180); spaces around a field are dropped. A quote
// left open at the end of the line is an error (`where`: "CSV file 'f' line 3"):
// a field that spans lines is not read.
std::vector<std::string> split_line(const std::string& line, char delimiter,
                                    const std::string& where) {
  std::vector<std::string> cells;
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  std::size_t at = 0;
  for (;;) {
    while (at < line.size() && is_space(line[at]) && line[at] != delimiter) ++at;
    std::string cell;
    if (at < line.size() && line[at] == '"') {
      const std::size_t opening = at++;
      for (;; ++at) {
        if (at == line.size())
          throw std::runtime_error(where + ": the quote at column " + std::to_string(opening + 1) +
                                   " is not closed on its line (a field that spans lines is not "
                                   "read): close it, or write a quote inside a field as \"\"");
        if (line[at] != '"') {
          cell += line[at];
        } else if (at + 1 < line.size() && line[at + 1] == '"') {
          cell += '"';
          ++at;
        } else {
          ++at;
          break;
        }
      }
      while (at < line.size() && line[at] != delimiter) {
        if (!is_space(line[at]))
          throw std::runtime_error(where + ": text after the quoted field that ends at column " +
                                   std::to_string(at) + ": put the whole field in the quotes");
        ++at;
      }
    } else {
      const std::size_t end = std::min(line.find(delimiter, at), line.size());
      cell = line.substr(at, end - at);
      while (!cell.empty() && is_space(cell.back())) cell.pop_back();
      at = end;
    }
    cells.push_back(std::move(cell));
    if (at >= line.size()) break;
    ++at;  // past the delimiter
  }
  return cells;
}

// "CSV file 'f' line 3", for errors.
std::string line_place(const std::string& path, std::int64_t line_number) {
  return "CSV file '" + path + "' line " + std::to_string(line_number);
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
// with old Mac line ends (CR alone) read as line ends. A UTF-16 or UTF-32
// file (as Excel's "Unicode text" saves) is refused by its byte order mark:
// read as bytes, every other one would be a NUL inside the names and values.
std::string csv_text(const std::string& path) {
  const std::vector<std::uint8_t> bytes = read_file_bytes(path);
  // A binary file another source reads (an NPY array, an IDX file, an image).
  if (const auto found = recognise_file(bytes); found && found->source != "csv")
    throw std::runtime_error("CSV file '" + path + "' is " + found->what +
                             ", not CSV text: " + found->advice);
  std::string text(bytes.begin(), bytes.end());
  for (const std::string_view mark :
       {std::string_view("\xFF\xFE", 2), std::string_view("\xFE\xFF", 2)})
    if (text.starts_with(mark))
      throw std::runtime_error(
          "CSV file '" + path + "' is UTF-16 or UTF-32 text (its byte order mark, bytes 0-1, is " +
          (mark[0] == '\xFF' ? "FF FE" : "FE FF") + "): save it as UTF-8 (or plain ASCII) CSV");
  if (text.starts_with("\xEF\xBB\xBF")) text.erase(0, 3);
  if (text.find('\n') == std::string::npos) std::replace(text.begin(), text.end(), '\r', '\n');
  return text;
}

// Whether every name is a number ("0.126", "-1e-3", "7"); `fractional` tells
// whether one has a fraction or an exponent.
bool all_numbers(const std::vector<std::string>& names, bool& fractional) {
  fractional = false;
  for (const std::string& name : names) {
    double value = 0;
    const auto [ptr, ec] = std::from_chars(name.data(), name.data() + name.size(), value);
    if (name.empty() || ec != std::errc() || ptr != name.data() + name.size()) return false;
    fractional |= name.find_first_of(".eE") != std::string::npos;
  }
  return true;
}

// A header of numbers only, some with a fraction or an exponent ("0.126,
// -1e-3, 7"), is a data row read as column names, which would silently drop
// that sample: refuse it. Integer names ("0,1,2,3", as pandas writes a
// frame's default columns) stay names.
void check_header_has_names(const std::string& path, const std::vector<std::string>& names,
                            std::int64_t line_number) {
  bool fractional = false;
  if (!all_numbers(names, fractional) || !fractional) return;
  throw SourceFieldError("header", line_place(path, line_number) +
                                       ", read as the header (header: true), holds only numbers (" +
                                       known_columns(names) +
                                       "): a data row? set header: false when the file has no "
                                       "header line");
}

// A name given twice selects whichever comes first: refuse it instead (one
// pass with a hash map, so a header of a million columns takes no time). A
// header of numbers ("0,0,1") is more likely a data row: that is said too.
void check_unique_names(const std::string& path, const std::vector<std::string>& names,
                        std::int64_t line_number) {
  std::unordered_map<std::string_view, std::size_t> first_of;
  for (std::size_t c = 0; c < names.size(); ++c) {
    // Columns without a name are not chosen by it (open_csv says what to do).
    if (names[c].find_first_not_of(" \t") == std::string::npos) continue;
    const auto [at, added] = first_of.emplace(names[c], c);
    if (added) continue;
    bool fractional = false;
    throw std::runtime_error(
        "CSV file '" + path + "' line " + std::to_string(line_number) +
        ": the header names column " + quote(names[c]) + " twice (columns " +
        std::to_string(at->second + 1) + " and " + std::to_string(c + 1) +
        "); rename one, so that `label` and `features` select one column" +
        (all_numbers(names, fractional)
             ? "; or, if that line is a data row, set header: false (the file has no header line)"
             : ""));
  }
}

// `cell` without the spaces, tabs and carriage return around it.
std::string_view trimmed(std::string_view cell) {
  while (!cell.empty() && (cell.front() == ' ' || cell.front() == '\t')) cell.remove_prefix(1);
  while (!cell.empty() && (cell.back() == ' ' || cell.back() == '\t' || cell.back() == '\r'))
    cell.remove_suffix(1);
  return cell;
}

// Whether `cell` reads as a number as the cells are read: spaces around it
// and a leading '+' allowed, a magnitude beyond float64's too (an error later).
bool reads_as_number(std::string_view cell) {
  cell = trimmed(cell);
  if (cell.size() > 1 && cell[0] == '+' && cell[1] != '-' && cell[1] != '+') cell.remove_prefix(1);
  double value = 0;
  const auto [ptr, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), value);
  return !cell.empty() && ptr == cell.data() + cell.size() &&
         (ec == std::errc() || ec == std::errc::result_out_of_range);
}

// Whether `cell` is one of the words pandas reads as a missing value (its
// default na_values that are not numbers: "NA", "N/A", "NULL", "None", ...):
// among class numbers, a missing label; among names, maybe a class.
bool marks_missing(std::string_view cell) {
  cell = trimmed(cell);
  for (const std::string_view word :
       {"NA", "N/A", "n/a", "#N/A", "#N/A N/A", "#NA", "<NA>", "NULL", "null", "None"})
    if (cell == word) return true;
  return false;
}

constexpr const char* kAllOneWay =
    ": write the labels all as class numbers (0, 1, ...) or all as class names";

// Class labels written as names ("cat", "dog") rather than numbers. Each name
// is numbered by its place among the sorted names once all are read, as image
// folders number their class folders (and scikit-learn's LabelEncoder its
// classes).
class LabelNames {
 public:
  // The name's number in the order first seen.
  std::int64_t id_of(const std::string& name) {
    const auto [at, added] = ids_.emplace(name, static_cast<std::int64_t>(seen_.size()));
    if (added) {
      seen_.push_back(name);
      uses_.push_back(0);
    }
    ++uses_[static_cast<std::size_t>(at->second)];
    return at->second;
  }
  // How many labels the first name seen was given.
  std::int64_t uses_of_first() const { return uses_.empty() ? 0 : uses_[0]; }
  // The names in sorted order, with `labels` renumbered from the order first
  // seen to places among them.
  std::vector<std::string> sorted(std::vector<std::int64_t>& labels) const {
    std::vector<std::size_t> order(seen_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](std::size_t a, std::size_t b) { return seen_[a] < seen_[b]; });
    std::vector<std::int64_t> place(seen_.size());
    std::vector<std::string> names;
    for (std::size_t i = 0; i < order.size(); ++i) {
      place[order[i]] = static_cast<std::int64_t>(i);
      names.push_back(seen_[order[i]]);
    }
    for (std::int64_t& label : labels) label = place[static_cast<std::size_t>(label)];
    return names;
  }

 private:
  std::unordered_map<std::string, std::int64_t> ids_;
  std::vector<std::string> seen_;
  std::vector<std::int64_t> uses_;
};

// Sets `data`'s classes from labels written as names: their sorted names,
// and the labels renumbered to places among them. `classes`, when given, must
// count them. Without a header, a first line whose features are their column
// numbers (0, 1, 2: the names pandas gives a frame's columns) and whose label
// no other line has is the header, not a class of one sample.
void name_classes(const CsvOptions& o, const LabelNames& label_names,
                  const std::string& first_label, bool first_row_numbers_columns, ArrayData& data) {
  if (!o.header && first_row_numbers_columns && label_names.uses_of_first() == 1 &&
      data.labels.size() > 1)
    throw std::runtime_error("CSV file '" + o.path + "': " + first_label +
                             " is a class name no other line has, and its features are their "
                             "column numbers (as pandas names a frame's columns): if the first "
                             "line names the columns, set header: true");
  data.class_names = label_names.sorted(data.labels);
  data.class_names_key = "label";
  const auto count = static_cast<std::int64_t>(data.class_names.size());
  if (o.classes > 0 && o.classes != count) {
    std::string names;
    for (std::size_t i = 0; i < data.class_names.size() && i < 20; ++i)
      names += (i ? ", " : "") + quote(data.class_names[i]);
    if (data.class_names.size() > 20) names += ", ...";
    throw SourceFieldError("classes", "CSV file '" + o.path + "' names " + std::to_string(count) +
                                          " classes in its labels (" + names + "), not " +
                                          std::to_string(o.classes) +
                                          ": named labels set the count themselves; remove "
                                          "classes");
  }
  data.num_classes = count;
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
    names = split_line(line, o.delimiter, line_place(o.path, line_number));
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
  if (o.header) check_header_has_names(o.path, names, line_number);
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
            delimiter_hint(first_line, columns, o.delimiter),
        // A name near one of the header's, not a column number (nothing is
        // near a number but another number).
        name, o.header && !index ? names : std::vector<std::string>{});
  };
  const std::size_t label_column = o.label.empty() ? columns - 1 : column_of(o.label, "label");
  std::vector<std::size_t> feature_columns;
  if (o.features.empty()) {
    for (std::size_t c = 0; c < columns; ++c) {
      if (c == label_column) continue;
      // A column without a name is most likely pandas' index (DataFrame.to_csv
      // writes it so): the row numbers, which would tell the model the order
      // the samples were written in.
      if (o.header && names[c].find_first_not_of(" \t") == std::string::npos)
        throw SourceFieldError(
            "features",
            line_place(o.path, line_number) + ": column " + std::to_string(c + 1) +
                " has no name in the header" +
                (c == 0 ? ", as pandas' DataFrame.to_csv writes its index (the row numbers): "
                          "among the features it would give the model the order the rows were "
                          "written in; write the file with to_csv(index=False), or list the "
                          "columns to use in `features`"
                        : " (a delimiter too many at the end of the line?): name it, or list "
                          "the columns to use in `features`") +
                (std::count_if(names.begin(), names.end(),
                               [](const std::string& n) {
                                 return n.find_first_not_of(" \t") == std::string::npos;
                               }) == 1
                     ? " ('' names it there, to keep it as a run before this check did)"
                     : ""));
      feature_columns.push_back(c);
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
  bool labels_named = false;        // class names rather than numbers
  LabelNames label_names;
  std::string first_label;                 // "line 2's label 'cat'", for errors
  bool first_row_numbers_columns = false;  // its features read 0, 1, 2, ...
  bool first_label_missing = false;        // pandas' word for a missing value
  // A cell's value; `finite`: NaN and infinity are errors (features and
  // regression targets; a class label has its own check).
  auto parse = [&](const std::string& cell, std::size_t column, bool finite) {
    double value = 0;
    // Spaces inside a quoted field (" 1 ") and a leading '+' (which
    // from_chars does not take), as Python and pandas read them.
    std::string_view text = trimmed(cell);
    const bool plus = text.size() > 1 && text[0] == '+' && text[1] != '-' && text[1] != '+';
    const char* begin = text.data() + (plus ? 1 : 0);
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(begin, end, value);
    const auto where = [&] {
      return "CSV file '" + o.path + "' line " + std::to_string(line_number) + ", column " +
             quote(names[column]) + ": " + quote(cell);
    };
    if (ec == std::errc::result_out_of_range && ptr == end) {
      // 1e-400 is too small for float64, and reads as 0 (as in Python);
      // 1e999 is too large even for float64.
      const double magnitude = std::strtod(begin, nullptr);
      if (!(std::abs(magnitude) < 1))
        throw std::runtime_error(where() + " is outside the float32 range");
      value = std::copysign(0.0, magnitude);
      ec = std::errc();
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
    // Values are float32: a finite number that rounds beyond its range would
    // silently become inf (3.4028235e38, float32's largest as printed, rounds
    // to it and is kept, as numpy keeps it).
    if (std::isfinite(value) && std::isinf(static_cast<float>(value))) {
      throw std::runtime_error(where() + " is outside the float32 range");
    }
    return value;
  };
  while (std::getline(in, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::vector<std::string> cells =
        split_line(line, o.delimiter, line_place(o.path, line_number));
    if (cells.size() != columns) {
      throw std::runtime_error("CSV file '" + o.path + "' line " + std::to_string(line_number) +
                               " has " + std::to_string(cells.size()) + " fields, expected " +
                               std::to_string(columns) + " like the first row");
    }
    for (std::size_t c : feature_columns)
      features.push_back(static_cast<float>(parse(cells[c], c, true)));
    const std::string& label_cell = cells[label_column];
    if (o.regression) {
      data.targets.push_back(static_cast<float>(parse(label_cell, label_column, true)));
      continue;
    }
    const std::string at = "CSV file '" + o.path + "' line " + std::to_string(line_number) +
                           ": label " + quote(label_cell);
    // The first row decides whether the labels are class numbers or names.
    if (lines.empty()) {
      labels_named = !label_cell.empty() && !reads_as_number(label_cell);
      first_label = "line " + std::to_string(line_number) + "'s label " + quote(label_cell);
      first_label_missing = marks_missing(label_cell);
      first_row_numbers_columns =
          std::all_of(feature_columns.begin(), feature_columns.end(),
                      [&](std::size_t c) { return cells[c] == std::to_string(c); });
    }
    if (labels_named) {
      if (label_cell.empty())
        throw std::runtime_error("CSV file '" + o.path + "' line " + std::to_string(line_number) +
                                 ": the label is empty: give every sample its class name");
      if (reads_as_number(label_cell))
        throw std::runtime_error(at + " is a number, but " + first_label +
                                 (first_label_missing
                                      ? " marks a missing value (as pandas reads it): give that "
                                        "sample its class, or drop the row"
                                      : " is a name" + std::string(kAllOneWay)));
      // Bytes that are not UTF-8 as \xNN: the name the manifest and the
      // evaluation's matching see, so the one that tells classes apart.
      data.labels.push_back(label_names.id_of(with_invalid_utf8_escaped(label_cell)));
      lines.push_back(line_number);
      continue;
    }
    // Among class numbers, pandas' words for a missing value ("NA", "None")
    // are that; among names they may be classes ("None" of a finding).
    if (marks_missing(label_cell))
      throw std::runtime_error(at +
                               " marks a missing value (as pandas reads it): give the "
                               "sample its class, or drop the row");
    if (!label_cell.empty() && !reads_as_number(label_cell))
      throw std::runtime_error(at + " is a name, but " + first_label + " is a number" + kAllOneWay);
    const double label = parse(label_cell, label_column, false);
    // Compared before the cast: NaN or a value beyond int64 has no integer to cast to.
    // kIgnoreLabel (-100) is a sample the loss leaves out, in no class.
    const bool ignored = label == static_cast<double>(kIgnoreLabel);
    if (!ignored && label >= 0 && label != std::floor(label))
      throw std::runtime_error(at +
                               " is not a whole number, so no class (for float targets set "
                               "regression: true on the source)");
    if (!ignored && label >= 0x1p53)  // past where doubles hold every integer
      throw std::runtime_error(at + " is too large to be a class (below 2^53)");
    if (!ignored && (!(label >= 0) || (o.classes > 0 && label >= static_cast<double>(o.classes))))
      throw std::runtime_error(
          at + " is not a class in [0, " +
          (o.classes > 0 ? std::to_string(o.classes) : std::string("inf")) + ")" +
          (label < 0 ? " (nor " + std::to_string(kIgnoreLabel) + ", the label of an ignored sample)"
                     : std::string()));
    data.labels.push_back(static_cast<std::int64_t>(label));
    lines.push_back(line_number);
  }
  if (features.empty()) throw std::runtime_error("CSV file '" + o.path + "' has no data rows");
  if (labels_named) name_classes(o, label_names, first_label, first_row_numbers_columns, data);
  data.sample_shape = {static_cast<std::int64_t>(feature_columns.size())};
  if (o.header)
    for (const std::size_t c : feature_columns) data.feature_names.push_back(names[c]);
  data.samples = std::move(features);
  if (o.regression) data.target_shape = {1};
  if (!labels_named) data.num_classes = o.classes;
  data.description = "CSV file '" + o.path + "'";
  data.label_origin = [path = o.path, lines = std::move(lines)](std::int64_t sample) {
    return "line " + std::to_string(lines[static_cast<std::size_t>(sample)]) + " of CSV file '" +
           path + "'";
  };
  return std::make_shared<ArrayDataset>(std::move(data));
}

}  // namespace trainer::data
