// NumPy .npy files: magic "\x93NUMPY", version, a header dict
// {'descr': '<f4', 'fortran_order': False, 'shape': (N, ...)}, then the data.
// Supported element types: uint8, float32, float64, int64, int32 (little-endian).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string_view>

#include "data/array_dataset.h"
#include "data/file_bytes.h"
#include "data/file_signature.h"
#include "data/finite_check.h"
#include "data/quote.h"
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

constexpr const char* kSaveAgain = "the header is damaged: save the array again (numpy.save)";

// Longer headers are no array this reader takes (a plain array's is at most a
// few kilobytes); refused before a damaged length makes it read gigabytes.
constexpr std::size_t kMaxHeaderBytes = 1 << 20;

std::size_t element_size(const std::string& descr) {
  if (descr == "u1") return 1;
  if (descr == "i4" || descr == "f4") return 4;
  return 8;
}

// What the header dict says.
struct NpyHeader {
  std::string descr;  // "u1", "f4", "f8", "i8", "i4"
  Shape shape;
};

// The header dict, read strictly: {'descr': '<f4', 'fortran_order': False,
// 'shape': (3, 2), } with each of the three keys once (in any order), then
// only spaces and a newline. Anything else is an error naming the byte offset
// in the file (`base`: the offset of the dict's first byte).
class HeaderParser {
 public:
  HeaderParser(const std::string& path, std::string_view text, std::size_t base)
      : path_(path), text_(text), base_(base) {}

  NpyHeader parse() {
    skip_spaces();
    expect('{', "a header dict starting with '{'");
    std::size_t seen[3] = {kUnseen, kUnseen, kUnseen};  // descr, fortran_order, shape
    for (;;) {
      skip_spaces();
      if (peek() == '}') break;
      const std::size_t key_at = pos_;
      const std::string key = string_literal("a key in quotes ('descr', 'fortran_order', 'shape')");
      const int k = key == "descr" ? 0 : key == "fortran_order" ? 1 : key == "shape" ? 2 : -1;
      if (k < 0)
        fail_at(key_at, "unknown key " + quote(key) +
                            " (a .npy header has 'descr', 'fortran_order' and 'shape')");
      if (seen[k] != kUnseen)
        fail_at(key_at, "'" + key + "' is given twice (first at byte offset " +
                            std::to_string(base_ + seen[k]) + ")");
      seen[k] = key_at;
      skip_spaces();
      expect(':', "':' after '" + key + "'");
      skip_spaces();
      if (k == 0) header_.descr = descr();
      if (k == 1) fortran_order();
      if (k == 2) header_.shape = shape();
      skip_spaces();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != '}') fail("',' or '}' after the value of '" + key + "'");
    }
    ++pos_;
    skip_spaces();
    if (pos_ < text_.size()) fail("only spaces and a newline after the header dict's '}'");
    const char* keys[3] = {"descr", "fortran_order", "shape"};
    for (int k = 0; k < 3; ++k)
      if (seen[k] == kUnseen)
        bad_header(path_, "header has no '" + std::string(keys[k]) + "' entry: " + quote(text_) +
                              "; " + kSaveAgain);
    // Column-major data has the C layout when at most one extent exceeds 1
    // (numpy writes a 1-D array of a Fortran-ordered frame so).
    if (fortran_ && std::count_if(header_.shape.begin(), header_.shape.end(),
                                  [](std::int64_t extent) { return extent > 1; }) > 1) {
      bad_header(path_, "fortran_order True is not supported for shape " +
                            to_string(header_.shape) +
                            " (column-major data); save a C-ordered array "
                            "(numpy.ascontiguousarray)");
    }
    return header_;
  }

 private:
  static constexpr std::size_t kUnseen = SIZE_MAX;

  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  void skip_spaces() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  // The byte at `at`, for errors: "'4'", "the end of the header".
  std::string found_at(std::size_t at) const {
    if (at >= text_.size()) return "the end of the header";
    return quote(text_.substr(at, 1));
  }

  // The error `what` at byte `at` of the dict, shown with the text around it
  // (up to 40 bytes before, 20 after; the padding after the dict left out).
  [[noreturn]] void fail_at(std::size_t at, const std::string& what) const {
    const std::string_view shown = text_.substr(0, text_.find_last_not_of(" \t\r\n") + 1);
    const std::size_t near = std::min(at, shown.size());
    const std::size_t from = near > 40 ? near - 40 : 0;
    bad_header(path_, "malformed header at byte offset " + std::to_string(base_ + at) + ": " +
                          what + ", in " + (from > 0 ? "'..." : "'") +
                          escaped(shown.substr(from, near - from + 20)) +
                          (near + 20 < shown.size() ? "...'" : "'") + "; " + kSaveAgain);
  }

  // An error at the current byte: "expected X, found Y".
  [[noreturn]] void fail(const std::string& expected) const {
    fail_at(pos_, "expected " + expected + ", found " + found_at(pos_));
  }

  void expect(char c, const std::string& what) {
    if (peek() != c) fail(what);
    ++pos_;
  }

  // A string in single or double quotes (no escapes: none of the values has one).
  std::string string_literal(const std::string& what) {
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail(what);
    const std::size_t close = text_.find(quote, pos_ + 1);
    if (close == std::string_view::npos) fail_at(pos_, "a string without its closing quote");
    const std::string value(text_.substr(pos_ + 1, close - pos_ - 1));
    pos_ = close + 1;
    return value;
  }

  // A bare word (True, False): letters, digits and '_'.
  std::string word() {
    const std::size_t from = pos_;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_'))
      ++pos_;
    return std::string(text_.substr(from, pos_ - from));
  }

  // 'descr': a byte order (<, >, |, =) and one of the element types read here.
  std::string descr() {
    const std::size_t at = pos_;
    if (peek() == '[') {
      bad_header(path_, "header at byte offset " + std::to_string(base_ + at) +
                            ": 'descr' is a list: structured arrays are not supported; save a "
                            "plain array of one dtype");
    }
    const std::string text = string_literal("'descr' as a string like '<f4'");
    const char order = text.empty() ? '\0' : text[0];
    if (text.size() < 2 || std::string_view("<>|=").find(order) == std::string_view::npos)
      fail_at(at, "'descr' is " + quote(text) +
                      ": it does not start with a byte order (one of < > | =)");
    std::string type = text.substr(1);
    const bool known = type == "u1" || type == "f4" || type == "f8" || type == "i8" || type == "i4";
    if (!known || (order == '>' && type != "u1")) {
      bad_header(path_, "header at byte offset " + std::to_string(base_ + at) + ": dtype " +
                            quote(text) +
                            " is not supported (use uint8, float32, float64, int32 or int64, "
                            "little-endian)");
    }
    return type;
  }

  // 'fortran_order': False, or True (column-major: refused once the shape
  // is known, unless its layout is the C one).
  void fortran_order() {
    const std::size_t at = pos_;
    const std::string value = word();
    if (value.empty()) fail("True or False for 'fortran_order'");
    fortran_ = value == "True";
    if (value != "False" && value != "True") {
      bad_header(path_, "header at byte offset " + std::to_string(base_ + at) +
                            ": 'fortran_order' is " + quote(value) +
                            ", not a boolean (True or False): " + kSaveAgain);
    }
  }

  // 'shape': a tuple of extents, "()", "(3,)", "(3, 2)", "(3, 2,)".
  Shape shape() {
    Shape dims;
    expect('(', "'shape' as a tuple like (3, 2)");
    for (;;) {
      skip_spaces();
      if (peek() == ')') break;
      dims.push_back(extent());
      skip_spaces();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != ')') fail("',' or ')' after an extent of 'shape'");
    }
    ++pos_;
    return dims;
  }

  // One extent: a non-negative integer (Python 2's numpy wrote a trailing L).
  std::int64_t extent() {
    const std::size_t at = pos_;
    if (peek() == '-') fail_at(at, "a negative extent in 'shape'");
    if (!std::isdigit(static_cast<unsigned char>(peek()))) fail("an extent (a number) in 'shape'");
    std::int64_t value = 0;
    while (std::isdigit(static_cast<unsigned char>(peek()))) {
      const int digit = peek() - '0';
      if (value > (std::numeric_limits<std::int64_t>::max() - digit) / 10)
        fail_at(at, "an extent in 'shape' beyond 2^63 - 1");
      value = value * 10 + digit;
      ++pos_;
    }
    if (peek() == 'L') ++pos_;
    return value;
  }

  const std::string& path_;
  std::string_view text_;
  std::size_t base_;
  std::size_t pos_ = 0;
  NpyHeader header_;
  bool fortran_ = false;  // 'fortran_order': True
};

// Where the header dict is in the file: its first byte and its length.
struct HeaderPlace {
  std::size_t start = 0, length = 0;
};

// The header dict's place, read from the magic, version and length at the
// start of `b`; nullopt when `b` ends before them or inside the dict, unless
// `complete` (`b` is the whole file: that is an error).
std::optional<HeaderPlace> header_place(const std::string& path, std::span<const std::uint8_t> b,
                                        bool complete) {
  const std::size_t magic = std::min<std::size_t>(b.size(), 6);
  const bool magic_matches = magic == 0 || std::memcmp(b.data(), "\x93NUMPY", magic) == 0;
  if (magic_matches && magic > 0 && complete && b.size() < 10)
    bad_header(path, "truncated at byte offset " + std::to_string(b.size()) +
                         ": the magic, version and header length take 10 bytes");
  if (!magic_matches || (complete && b.size() < 10)) {
    // numpy.savez writes a zip of .npy files: "PK" first.
    if (b.size() >= 2 && b[0] == 'P' && b[1] == 'K')
      bad_header(path,
                 "a zip archive (numpy.savez's .npz?), not a .npy file: save each array with "
                 "numpy.save (np.save('x.npy', data['x'])) and name those files");
    bad_header(path, "not a .npy file (the magic \\x93NUMPY is missing at byte 0)" +
                         other_format_note(b, "npy"));
  }
  if (b.size() < 10) return std::nullopt;
  HeaderPlace p;
  const int major = b[6];
  if (major == 1) {
    p.length = b[8] | (std::size_t{b[9]} << 8);
    p.start = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) {
      if (!complete) return std::nullopt;
      bad_header(path, "truncated at byte offset " + std::to_string(b.size()));
    }
    p.length =
        b[8] | (std::size_t{b[9]} << 8) | (std::size_t{b[10]} << 16) | (std::size_t{b[11]} << 24);
    p.start = 12;
  } else {
    bad_header(path, "unsupported format version " + std::to_string(major));
  }
  if (p.length > kMaxHeaderBytes) {
    bad_header(path, "the header length at byte offset 8 is " + std::to_string(p.length) +
                         " bytes, more than any plain array's header (at most " +
                         std::to_string(kMaxHeaderBytes) + "); " + kSaveAgain);
  }
  if (b.size() < p.start + p.length) {
    if (!complete) return std::nullopt;
    bad_header(path, "truncated at byte offset " + std::to_string(b.size()) +
                         " inside the header of " + std::to_string(p.length) + " bytes");
  }
  return p;
}

// The header dict at `place` in `b`, parsed.
NpyHeader npy_header(const std::string& path, std::span<const std::uint8_t> b,
                     const HeaderPlace& place) {
  const std::string_view text(reinterpret_cast<const char*>(b.data()) + place.start, place.length);
  NpyHeader h = HeaderParser(path, text, place.start).parse();
  if (h.shape.empty()) bad_header(path, "a scalar array; expected [N, ...]");
  return h;
}

// The file size the header at the start of `b` declares (SIZE_MAX when more
// than can be counted), or nullopt when `b` ends inside it.
std::optional<std::size_t> npy_declared_size(const std::string& path,
                                             std::span<const std::uint8_t> b) {
  const std::optional<HeaderPlace> place = header_place(path, b, false);
  if (!place) return std::nullopt;
  const NpyHeader h = npy_header(path, b, *place);
  const std::size_t offset = place->start + place->length;
  const std::size_t size = element_size(h.descr);
  const std::optional<std::size_t> count =
      element_count_within(h.shape, (SIZE_MAX - offset) / size);
  return count ? offset + *count * size : SIZE_MAX;
}

// Sets `a`'s header fields from the header at the start of `b` (the whole
// file when `complete`, else its first bytes), and checks them against the
// file's `file_size` bytes (decompressed).
void read_header(NpyArray& a, std::span<const std::uint8_t> b, bool complete,
                 std::size_t file_size) {
  const std::string& path = a.path;
  const std::optional<HeaderPlace> place = header_place(path, b, complete);
  if (!place) bad_header(path, "truncated at byte offset " + std::to_string(b.size()));
  NpyHeader h = npy_header(path, b, *place);
  a.offset = place->start + place->length;
  a.descr = h.descr;
  a.shape = std::move(h.shape);
  const std::size_t size = element_size(a.descr);
  if (!element_count_within(a.shape, (file_size - a.offset) / size)) {
    bad_header(path, "truncated at byte offset " + std::to_string(file_size) + ": shape " +
                         to_string(a.shape) + " of " + a.descr + " needs " +
                         bytes_needed(a.shape, size, a.offset));
  }
  // The data is the last thing in the file: more bytes mean a wrong 'shape' or
  // a damaged file (like IDX, which has no padding either).
  const std::size_t end = a.offset + static_cast<std::size_t>(a.count()) * size;
  if (file_size > end) {
    throw std::runtime_error("NPY file '" + path + "' has " + std::to_string(file_size - end) +
                             " bytes after the data, from byte offset " + std::to_string(end) +
                             ": shape " + to_string(a.shape) + " of " + a.descr +
                             " needs exactly " + std::to_string(end - a.offset) +
                             " bytes of data after the " + std::to_string(a.offset) +
                             "-byte header (a wrong 'shape' in the header?)");
  }
}

NpyArray read_npy(const std::string& path) {
  NpyArray a;
  a.path = path;
  a.bytes = read_file_bytes(path, [&path](std::span<const std::uint8_t> prefix) {
    return npy_declared_size(path, prefix);
  });
  read_header(a, a.bytes, true, a.bytes.size());
  return a;
}

// An uncompressed NPY file of uint8 or float32 samples, held open with its
// header read and checked but its data not (`bytes` stays empty): open_npy
// reads the data straight into the array the dataset keeps, one copy in
// memory where reading the whole file first held two at the peak. nullopt
// for other files, which read_npy reads whole.
struct NpyHeaderRead {
  NpyArray array;
  OpenDataFile file;
};
std::optional<NpyHeaderRead> read_npy_header(const std::string& path) {
  OpenDataFile file(path);
  if (file.gzip() || file.size() > SIZE_MAX) return std::nullopt;
  const std::vector<std::uint8_t> prefix = file.prefix(kMaxHeaderBytes + 16);
  if (const auto declared = npy_declared_size(path, prefix); declared && *declared != SIZE_MAX)
    check_declared_size(path, file.size(), *declared);  // as read_file_bytes checks it
  NpyArray a;
  a.path = path;
  const auto file_size = static_cast<std::size_t>(file.size());
  read_header(a, prefix, prefix.size() == file_size, file_size);
  if (a.descr != "u1" && a.descr != "f4") return std::nullopt;
  return NpyHeaderRead{std::move(a), std::move(file)};
}

// Every value of `values` (converted from `a`) is finite: NaN, infinity, or a
// float64 beyond float32 (infinite once converted), is an error naming the
// element, its sample and its byte offset. `what`: "samples" or "targets".
void check_finite(const NpyArray& a, const std::vector<float>& values, const std::string& what) {
  const std::optional<std::size_t> bad = first_non_finite(values.data(), values.size());
  if (!bad) return;
  const auto i = static_cast<std::int64_t>(*bad);
  // Without the file's bytes (float32 read straight into `values`), the value is as stored.
  const double original = a.bytes.empty() ? values[*bad] : a.value(i);
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
  std::optional<NpyHeaderRead> x_header = read_npy_header(x_path);
  NpyArray x = x_header ? std::move(x_header->array) : read_npy(x_path);
  NpyArray y = read_npy(y_path);
  if (x.shape[0] != y.shape[0]) {
    throw std::runtime_error("NPY files '" + x_path + "' and '" + y_path + "' hold " +
                             std::to_string(x.shape[0]) + " and " + std::to_string(y.shape[0]) +
                             " samples; the counts must match");
  }
  ArrayData data;
  data.sample_shape.assign(x.shape.begin() + 1, x.shape.end());
  if (data.sample_shape.empty()) data.sample_shape = {1};
  const auto count = static_cast<std::size_t>(x.count());
  // The samples as the dataset keeps them, from the file directly (x_header)
  // or from its bytes read whole.
  const auto fill = [&](void* out, std::size_t bytes) {
    if (x_header)
      x_header->file.read_at(x.offset, out, bytes);
    else
      std::memcpy(out, x.bytes.data() + x.offset, bytes);
  };
  if (x.descr == "u1") {
    std::vector<std::uint8_t> values;
    try {
      values.resize(count);
    } catch (const std::bad_alloc&) {
      throw not_enough_memory_for(x_path, count);
    }
    fill(values.data(), count);
    data.samples = std::move(values);
  } else {
    std::vector<float> values;
    try {
      values.resize(count);
    } catch (const std::bad_alloc&) {
      throw not_enough_memory_for(x_path, count * sizeof(float));
    }
    if (x.descr == "f4") {
      fill(values.data(), count * sizeof(float));
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
