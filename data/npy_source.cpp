// NumPy .npy files: magic "\x93NUMPY", version, a header dict
// {'descr': '<f4', 'fortran_order': False, 'shape': (N, ...)}, then the data.
// Supported element types: uint8, float32, float64, int64, int32 (little-endian).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "data/array_dataset.h"
#include "data/file_bytes.h"
#include "data/finite_check.h"
#include "data/sources.h"

namespace trainer::data {
namespace {

struct NpyArray {
  std::string path;
  std::string descr;  // "u1", "f4", "f8", "i8", "i4"
  Shape shape;
  std::vector<std::uint8_t> bytes;
  std::size_t offset = 0;  // where the data starts

  std::int64_t count() const { return numel(shape); }
  template <typename T>
  T at(std::int64_t i) const {
    T v;
    std::memcpy(&v, bytes.data() + offset + static_cast<std::size_t>(i) * sizeof(T), sizeof(T));
    return v;
  }
  double value(std::int64_t i) const {
    if (descr == "f4") return at<float>(i);
    if (descr == "f8") return at<double>(i);
    return static_cast<double>(integer(i));
  }
  // Integer types only (class labels: no round trip through double).
  std::int64_t integer(std::int64_t i) const {
    if (descr == "u1") return bytes[offset + static_cast<std::size_t>(i)];
    if (descr == "i4") return at<std::int32_t>(i);
    return at<std::int64_t>(i);
  }
};

[[noreturn]] void bad_header(const std::string& path, const std::string& what) {
  throw std::runtime_error("NPY file '" + path + "': " + what);
}

// The text after `'key':` in the header dict, trimmed of spaces.
std::string header_value(const std::string& path, const std::string& header,
                         const std::string& key) {
  const std::size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) bad_header(path, "header has no '" + key + "' entry: " + header);
  std::size_t v = header.find(':', k);
  if (v == std::string::npos) bad_header(path, "malformed header: " + header);
  ++v;
  while (v < header.size() && header[v] == ' ') ++v;
  return header.substr(v);
}

std::size_t element_size(const std::string& descr) {
  if (descr == "u1") return 1;
  if (descr == "i4" || descr == "f4") return 4;
  return 8;
}

NpyArray read_npy(const std::string& path) {
  NpyArray a;
  a.path = path;
  a.bytes = read_file_bytes(path);
  const auto& b = a.bytes;
  if (b.size() < 10 || std::memcmp(b.data(), "\x93NUMPY", 6) != 0) {
    bad_header(path, "not a .npy file (the magic \\x93NUMPY is missing at byte 0)");
  }
  const int major = b[6];
  std::size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = b[8] | (std::size_t{b[9]} << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) bad_header(path, "truncated at byte offset " + std::to_string(b.size()));
    header_len =
        b[8] | (std::size_t{b[9]} << 8) | (std::size_t{b[10]} << 16) | (std::size_t{b[11]} << 24);
    header_start = 12;
  } else {
    bad_header(path, "unsupported format version " + std::to_string(major));
  }
  if (b.size() < header_start + header_len) {
    bad_header(path, "truncated at byte offset " + std::to_string(b.size()) +
                         " inside the header of " + std::to_string(header_len) + " bytes");
  }
  const std::string header(b.begin() + static_cast<std::ptrdiff_t>(header_start),
                           b.begin() + static_cast<std::ptrdiff_t>(header_start + header_len));
  a.offset = header_start + header_len;

  const std::string descr = header_value(path, header, "descr");
  if (descr.size() < 5 || descr[0] != '\'') bad_header(path, "malformed 'descr' in " + header);
  const char order = descr[1];
  a.descr = descr.substr(2, descr.find('\'', 1) - 2);
  const bool known =
      a.descr == "u1" || a.descr == "f4" || a.descr == "f8" || a.descr == "i8" || a.descr == "i4";
  if (!known || (order == '>' && a.descr != "u1")) {
    bad_header(path, "dtype '" + descr.substr(1, descr.find('\'', 1) - 1) +
                         "' is not supported (use uint8, float32, float64, int32 or int64, "
                         "little-endian)");
  }
  const std::string fortran_text = header_value(path, header, "fortran_order");
  const std::string fortran = fortran_text.substr(0, fortran_text.find_first_of(",} "));
  if (fortran == "True") {
    bad_header(path,
               "fortran_order True is not supported; save a C-ordered array "
               "(numpy.ascontiguousarray)");
  }
  if (fortran != "False") {
    bad_header(path,
               "'fortran_order' is '" + fortran +
                   "', not a boolean (True or False): the header is damaged; save the array again");
  }
  const std::string shape = header_value(path, header, "shape");
  if (shape.empty() || shape[0] != '(') bad_header(path, "malformed 'shape' in " + header);
  const std::size_t close = shape.find(')');
  std::string dims = shape.substr(1, close - 1);
  std::size_t pos = 0;
  while (pos < dims.size()) {
    while (pos < dims.size() && (dims[pos] == ' ' || dims[pos] == ',')) ++pos;
    if (pos >= dims.size()) break;
    std::size_t used = 0;
    try {
      a.shape.push_back(std::stoll(dims.substr(pos), &used));
    } catch (const std::exception&) {
      bad_header(path, "malformed 'shape' in " + header);
    }
    if (a.shape.back() < 0) bad_header(path, "negative extent in 'shape' of " + header);
    pos += used;
  }
  if (a.shape.empty()) bad_header(path, "a scalar array; expected [N, ...]");
  const std::size_t size = element_size(a.descr);
  if (!element_count_within(a.shape, (b.size() - a.offset) / size)) {
    bad_header(path, "truncated at byte offset " + std::to_string(b.size()) + ": shape " +
                         to_string(a.shape) + " of " + a.descr + " needs " +
                         bytes_needed(a.shape, size, a.offset));
  }
  // The data is the last thing in the file: more bytes mean a wrong 'shape' or
  // a damaged file (like IDX, which has no padding either).
  const std::size_t end = a.offset + static_cast<std::size_t>(a.count()) * size;
  if (b.size() > end) {
    throw std::runtime_error("NPY file '" + path + "' has " + std::to_string(b.size() - end) +
                             " bytes after the data, from byte offset " + std::to_string(end) +
                             ": shape " + to_string(a.shape) + " of " + a.descr +
                             " needs exactly " + std::to_string(end - a.offset) +
                             " bytes of data after the " + std::to_string(a.offset) +
                             "-byte header (a wrong 'shape' in the header?)");
  }
  return a;
}

// Every value of `values` (converted from `a`) is finite: NaN, infinity, or a
// float64 beyond float32 (infinite once converted), is an error naming the
// element, its sample and its byte offset. `what`: "samples" or "targets".
void check_finite(const NpyArray& a, const std::vector<float>& values, const std::string& what) {
  const std::optional<std::size_t> bad = first_non_finite(values.data(), values.size());
  if (!bad) return;
  const auto i = static_cast<std::int64_t>(*bad);
  const double original = a.value(i);
  char number[32];
  std::snprintf(number, sizeof number, "%g", original);
  const std::string value = std::isfinite(original)
                                ? std::string(number) + ", outside the float32 range"
                                : non_finite_name(original);
  const std::int64_t per_sample = a.count() / a.shape[0];
  throw std::runtime_error(
      "NPY file '" + a.path + "': element " + std::to_string(i) + " (sample " +
      std::to_string(i / per_sample) + ", byte offset " +
      std::to_string(a.offset + *bad * element_size(a.descr)) + ") is " + value + "; the " + what +
      " must be finite numbers: replace or drop the missing or overflowing values before saving");
}

}  // namespace

std::shared_ptr<Dataset> open_npy(const std::string& x_path, const std::string& y_path,
                                  std::int64_t classes) {
  NpyArray x = read_npy(x_path);
  NpyArray y = read_npy(y_path);
  if (x.shape[0] != y.shape[0]) {
    throw std::runtime_error("NPY files '" + x_path + "' and '" + y_path + "' hold " +
                             std::to_string(x.shape[0]) + " and " + std::to_string(y.shape[0]) +
                             " samples; the counts must match");
  }
  ArrayData data;
  data.sample_shape.assign(x.shape.begin() + 1, x.shape.end());
  if (data.sample_shape.empty()) data.sample_shape = {1};
  if (x.descr == "u1") {
    const auto first = x.bytes.begin() + static_cast<std::ptrdiff_t>(x.offset);
    data.samples = std::vector<std::uint8_t>(first, first + x.count());
  } else {
    std::vector<float> values(static_cast<std::size_t>(x.count()));
    if (x.descr == "f4") {
      std::memcpy(values.data(), x.bytes.data() + x.offset, values.size() * sizeof(float));
    } else {
      for (std::int64_t i = 0; i < x.count(); ++i) {
        values[static_cast<std::size_t>(i)] = static_cast<float>(x.value(i));
      }
    }
    check_finite(x, values, "samples");
    data.samples = std::move(values);
  }
  const bool regression = y.descr == "f4" || y.descr == "f8";
  if (regression) {
    data.target_shape.assign(y.shape.begin() + 1, y.shape.end());
    if (data.target_shape.empty()) data.target_shape = {1};
    data.targets.resize(static_cast<std::size_t>(y.count()));
    for (std::int64_t i = 0; i < y.count(); ++i) {
      data.targets[static_cast<std::size_t>(i)] = static_cast<float>(y.value(i));
    }
    check_finite(y, data.targets, "targets");
  } else {
    if (y.shape.size() != 1) {
      throw std::runtime_error("NPY labels '" + y_path + "' have shape " + to_string(y.shape) +
                               ", expected [N] integer classes (or float targets)");
    }
    data.labels.resize(static_cast<std::size_t>(y.count()));
    for (std::int64_t i = 0; i < y.count(); ++i) {
      data.labels[static_cast<std::size_t>(i)] = y.integer(i);
    }
    data.label_origin = [y_path, offset = y.offset, size = element_size(y.descr)](std::int64_t i) {
      return "element " + std::to_string(i) + " of NPY file '" + y_path + "' (byte offset " +
             std::to_string(offset + static_cast<std::size_t>(i) * size) + ")";
    };
  }
  data.num_classes = classes;
  data.description = "NPY samples '" + x_path + "' with " + (regression ? "targets" : "labels") +
                     " '" + y_path + "'";
  return std::make_shared<ArrayDataset>(std::move(data));
}

}  // namespace trainer::data
