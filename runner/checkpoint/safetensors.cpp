// Safetensors encoding and strict decoding with positioned errors.
#include "runner/checkpoint/safetensors.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/file_kind.h"
#include "runner/json_shown.h"
#include "runner/json_text.h"

namespace trainer::checkpoint {
namespace {

constexpr std::uint64_t kHeaderOffset = 8;
constexpr std::uint64_t kMaxHeaderBytes = 100ull << 20;
// The most elements a tensor may hold (2^40: 4 TiB of float32).
constexpr std::uint64_t kMaxElements = 1ull << 40;

[[noreturn]] void fail(const std::string& path, std::uint64_t offset, const std::string& what) {
  throw CheckpointError(path + ": offset " + std::to_string(offset) + ": " + what);
}

std::uint64_t read_u64_le(std::string_view bytes) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  return v;
}

void append_u64_le(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint64_t header_length(std::string_view head, std::uint64_t file_size,
                            const std::string& path) {
  if (file_size < kHeaderOffset)
    fail(path, 0,
         "file is " + std::to_string(file_size) +
             " bytes, shorter than the 8-byte header length (truncated or not a safetensors file)");
  const std::uint64_t n = read_u64_le(head);
  if (n > file_size - kHeaderOffset)
    fail(path, 0,
         "header length " + std::to_string(n) + " exceeds the file's remaining " +
             std::to_string(file_size - kHeaderOffset) +
             " bytes (truncated or not a safetensors file)");
  if (n > kMaxHeaderBytes)
    fail(path, 0,
         "header length " + std::to_string(n) + " is over the " + std::to_string(kMaxHeaderBytes) +
             " bytes this reader takes (the tensors' names and offsets need far less: not a "
             "safetensors file, or a damaged one)");
  return n;
}

// A header nests three deep at most ({name: {shape: [...]}}): a deeper one is
// refused before it is parsed, at the offset it goes deeper, since a JSON
// document of a million nested arrays costs some 80 bytes a level to build.
void check_nesting(std::string_view text, const std::string& path) {
  constexpr int kMaxDepth = 3;
  int depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxDepth)
        fail(path, kHeaderOffset + i,
             "the header nests deeper than a safetensors header does (an object of tensors, "
             "each an object whose shape and data_offsets are lists of numbers): damaged, or "
             "not a safetensors file");
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
}

nlohmann::json parse_header(std::string_view text, const std::string& path) {
  check_nesting(text, path);
  nlohmann::json header;
  // A name given twice would leave one of its entries unread.
  std::set<std::string> names;
  std::string repeated;
  const nlohmann::json::parser_callback_t note_names =
      [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        if (event == nlohmann::json::parse_event_t::key && depth == 1 &&
            !names.insert(parsed.get<std::string>()).second && repeated.empty())
          repeated = parsed.get<std::string>();
        return true;
      };
  try {
    header = nlohmann::json::parse(text.begin(), text.end(), note_names);
  } catch (const nlohmann::json::parse_error& e) {
    // The parser's reason, without its "[json.exception...] parse error at
    // line 1, column N: " prefix (the offset says where).
    std::string reason = e.what();
    if (const std::size_t at = reason.find(": "); at != std::string::npos)
      reason = reason.substr(at + 2);
    // Nor the bytes it last read, which may be the ones that are not UTF-8.
    if (const std::size_t read = reason.find("; last read: '"); read != std::string::npos) {
      const std::size_t end = reason.find("'; ", read + 14);
      reason.erase(read, end == std::string::npos ? std::string::npos : end + 1 - read);
    }
    fail(path, kHeaderOffset + (e.byte > 0 ? e.byte - 1 : 0),
         "header is not valid JSON (" + reason + ")");
  } catch (const nlohmann::json::exception& e) {  // a number beyond a double's range
    const std::string what = e.what();
    fail(path, kHeaderOffset,
         "header holds what no JSON reader here can: " + what.substr(what.find("] ") + 2));
  }
  if (!header.is_object()) fail(path, kHeaderOffset, "header is not a JSON object");
  if (!repeated.empty()) fail(path, kHeaderOffset, "header names '" + repeated + "' twice");
  return header;
}

struct DataRange {
  std::uint64_t begin, end;
  std::string name;
};

// The tensors' data covers the data section exactly, each byte once (as the
// format requires: no overlaps, no gaps, nothing after the last tensor).
void check_data_ranges(std::vector<DataRange> ranges, std::uint64_t data_start,
                       std::uint64_t data_size, const std::string& path) {
  std::sort(ranges.begin(), ranges.end(),
            [](const DataRange& a, const DataRange& b) { return a.begin < b.begin; });
  std::uint64_t covered = 0;
  std::string previous;
  for (const auto& r : ranges) {
    if (r.begin < covered)
      fail(path, data_start + r.begin,
           "tensor '" + r.name + "': its data overlaps tensor '" + previous + "'s");
    if (r.begin > covered)
      fail(path, data_start + covered,
           std::to_string(r.begin - covered) + " bytes of data belong to no tensor (before '" +
               r.name + "')");
    covered = r.end;
    previous = r.name;
  }
  if (covered < data_size)
    fail(path, data_start + covered,
         std::to_string(data_size - covered) +
             " bytes after the last tensor's data (damaged, or not a safetensors file)");
}

std::map<std::string, std::string> metadata_of(const nlohmann::json& header,
                                               const std::string& path) {
  std::map<std::string, std::string> out;
  auto it = header.find("__metadata__");
  if (it == header.end()) return out;
  if (!it->is_object()) fail(path, kHeaderOffset, "__metadata__ is not a map of strings");
  for (auto& [k, v] : it->items()) {
    if (!v.is_string()) fail(path, kHeaderOffset, "__metadata__." + k + " is not a string");
    out[k] = v.get<std::string>();
  }
  return out;
}

// The number of elements of `shape` (a tensor's header entry, `where` naming
// it), each dimension and the product checked against kMaxElements before it
// is formed, so that no product wraps around to a small count.
std::uint64_t element_count(const nlohmann::json& shape, const std::string& where,
                            const std::string& path) {
  std::uint64_t count = 1;
  for (const auto& d : shape) {
    if (!d.is_number_unsigned() || d.get<std::uint64_t>() > kMaxElements)
      fail(path, kHeaderOffset,
           where + "shape has a bad dimension " + shown_json(d) + " (at most " +
               std::to_string(kMaxElements) + ")");
    const std::uint64_t dim = d.get<std::uint64_t>();
    if (dim != 0 && count > kMaxElements / dim)
      fail(path, kHeaderOffset,
           where + "shape " +
               (std::all_of(shape.begin(), shape.end(),
                            [](const nlohmann::json& e) { return e.is_number(); })
                    ? shape.dump()
                    : shown_json(shape)) +
               " holds more than " + std::to_string(kMaxElements) +
               " elements (implausibly large: damaged, or not a safetensors file)");
    count *= dim;
  }
  return count;
}

// Fails for a tensor whose data_offsets [begin, end] reach past the data
// section of `data_size` = file_size - data_start bytes, saying where without
// sums that could wrap around.
[[noreturn]] void fail_past_data(std::uint64_t begin, std::uint64_t end, std::uint64_t data_start,
                                 std::uint64_t file_size, const std::string& where,
                                 const std::string& path) {
  const std::uint64_t data_size = file_size - data_start;
  const std::string offsets =
      "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "]";
  if (end <= std::numeric_limits<std::uint64_t>::max() - data_start && begin <= data_size)
    fail(path, data_start + begin,
         where + "data ends at file offset " + std::to_string(data_start + end) +
             " but the file has " + std::to_string(file_size) + " bytes (truncated)");
  fail(path, kHeaderOffset,
       where + offsets + " lie past the data section's " + std::to_string(data_size) +
           " bytes (the file has " + std::to_string(file_size) +
           "): damaged, or not a safetensors file");
}

}  // namespace

const StoredTensor* Safetensors::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

std::size_t safetensors_dtype_size(const std::string& dtype) {
  static const std::map<std::string, std::size_t> sizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
      {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"U16", 2},  {"U32", 4}, {"U64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

std::string encode_safetensors(const Safetensors& file) {
  std::vector<TensorLayout> layout;
  for (const auto& t : file.tensors) layout.push_back({t.name, t.dtype, t.shape, t.bytes.size()});
  std::string out = encode_safetensors_header(file.metadata, layout);
  for (const auto& t : file.tensors) out += t.bytes;
  return out;
}

std::string encode_safetensors_header(const std::map<std::string, std::string>& metadata,
                                      const std::vector<TensorLayout>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes}}};
    offset += t.bytes;
  }
  std::string text = json_text(header);
  while ((kHeaderOffset + text.size()) % 8 != 0) text.push_back(' ');
  std::string out;
  out.reserve(kHeaderOffset + text.size());
  append_u64_le(out, text.size());
  out += text;
  return out;
}

namespace {

// Decodes a file of `file_size` bytes from its first bytes `head` (at least
// the length and the header) and checks every tensor's place in the data;
// copies the tensors' bytes when `head` holds the whole file (`with_data`).
Safetensors decode(std::string_view head, std::uint64_t file_size, bool with_data,
                   const std::string& path) {
  const std::uint64_t n = header_length(head, file_size, path);
  const nlohmann::json header = parse_header(head.substr(kHeaderOffset, n), path);
  const std::uint64_t data_start = kHeaderOffset + n;
  const std::uint64_t data_size = file_size - data_start;
  Safetensors file;
  std::vector<DataRange> ranges;
  file.metadata = metadata_of(header, path);
  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string where = "tensor '" + name + "': ";
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets"))
      fail(path, kHeaderOffset, where + "expected {dtype, shape, data_offsets}");
    StoredTensor t;
    t.name = name;
    if (!entry["dtype"].is_string()) fail(path, kHeaderOffset, where + "dtype is not a string");
    t.dtype = entry["dtype"].get<std::string>();
    const std::size_t element = safetensors_dtype_size(t.dtype);
    if (element == 0) fail(path, kHeaderOffset, where + "unknown dtype '" + t.dtype + "'");
    const auto& shape = entry["shape"];
    const auto& offsets = entry["data_offsets"];
    if (!shape.is_array()) fail(path, kHeaderOffset, where + "shape is not a list");
    const std::uint64_t count = element_count(shape, where, path);
    for (const auto& d : shape) t.shape.push_back(d.get<std::int64_t>());
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned())
      fail(path, kHeaderOffset, where + "data_offsets is not [begin, end]");
    const std::uint64_t begin = offsets[0].get<std::uint64_t>(),
                        end = offsets[1].get<std::uint64_t>();
    if (begin > end) fail(path, kHeaderOffset, where + "data_offsets begin after they end");
    if (end > data_size) fail_past_data(begin, end, data_start, file_size, where, path);
    if (end - begin != count * element)
      fail(path, data_start + begin,
           where + "holds " + std::to_string(end - begin) + " bytes, its shape and dtype need " +
               std::to_string(count * element));
    if (with_data) t.bytes.assign(head.substr(data_start + begin, end - begin));
    t.file_offset = data_start + begin;
    t.file_bytes = end - begin;
    ranges.push_back({begin, end, name});
    file.tensors.push_back(std::move(t));
  }
  check_data_ranges(std::move(ranges), data_start, data_size, path);
  return file;
}

}  // namespace

Safetensors decode_safetensors(std::string_view bytes, const std::string& path) {
  return decode(bytes, bytes.size(), true, path);
}

bool system_refused(const std::error_code& error) {
  return error && error != std::errc::no_such_file_or_directory &&
         error != std::errc::not_a_directory && error != std::errc::filename_too_long &&
         error != std::errc::too_many_symbolic_link_levels;
}

namespace {

// Refuses what is not a plain file before it is opened: a FIFO would block
// the open, a device might never end. A path the system will not let this
// process look at (a folder without read or search permission, an I/O error)
// is unreadable, not damaged.
void require_regular_file(const std::string& path) {
  std::error_code looked;
  const auto status = std::filesystem::status(path, looked);
  if (!std::filesystem::exists(status) && system_refused(looked))
    throw CheckpointUnreadable(path + ": cannot be looked at: " + looked.message());
  if (const std::string what = data::not_a_regular_file(path); !what.empty())
    throw CheckpointError(path + ": is " + what + ", not a file");
}

// An input stream of `path`, open, or the error read_file_bytes gives.
std::ifstream open_for_reading(const std::string& path) {
  require_regular_file(path);
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    if (error == ENOENT || error == 0) throw CheckpointError(path + ": missing");
    throw CheckpointUnreadable(path + ": cannot open for reading: " + std::strerror(error));
  }
  return in;
}

// A checkpoint file larger than the machine's memory cannot be loaded into
// a model that fits it: a sparse or damaged file, refused before it is read
// (reading or hashing one could take hours).
void refuse_larger_than_memory(const std::string& path, std::uint64_t size) {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0 &&
      size > static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page))
    throw CheckpointError(path + ": " + std::to_string(size) +
                          " bytes, more than this machine's memory: damaged, or not a checkpoint "
                          "file");
}

// What tells a file's contents changed: its inode, size, and the times it
// was modified and its status changed, as stat gives them now.
std::string identity_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "gone";
  return std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
         std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + ":" +
         std::to_string(st.st_ctim.tv_sec) + "." + std::to_string(st.st_ctim.tv_nsec);
}

}  // namespace

std::string read_file_bytes(const std::string& path) {
  std::ifstream in = open_for_reading(path);
  in.seekg(0, std::ios::end);
  const auto size = static_cast<std::uint64_t>(in.tellg());
  in.seekg(0);
  // Read whole: a file larger than the machine's memory (a sparse or
  // damaged one) is refused before the attempt fills it.
  refuse_larger_than_memory(path, size);
  std::string bytes;
  try {
    bytes.resize(size);
  } catch (const std::exception&) {  // bad_alloc, or length_error past max_size()
    throw CheckpointError(path + ": " + std::to_string(size) +
                          " bytes, more than this process can hold in memory");
  }
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  if (in.bad() || static_cast<std::uint64_t>(in.gcount()) != size) {
    const int error = errno;
    throw CheckpointUnreadable(path + ": read error after " + std::to_string(in.gcount()) + " of " +
                               std::to_string(size) + " bytes" +
                               (error != 0 ? ": " + std::string(std::strerror(error)) : ""));
  }
  return bytes;
}

std::map<std::string, std::string> read_safetensors_metadata(const std::string& path) {
  return SafetensorsFile(path).contents().metadata;
}

Safetensors read_safetensors(const std::string& path) {
  return decode_safetensors(read_file_bytes(path), path);
}

PieceReader::PieceReader(const std::string& path)
    : path_(path), in_(open_for_reading(path)), identity_(identity_of(path)) {
  in_.seekg(0, std::ios::end);
  size_ = static_cast<std::uint64_t>(in_.tellg());
  refuse_larger_than_memory(path, size_);
}

void PieceReader::check_unchanged() const {
  if (identity_of(path_) != identity_)
    throw CheckpointUnreadable(path_ +
                               ": the file changed while it was read (written, replaced or "
                               "deleted meanwhile): read it again once nothing writes it");
}

void PieceReader::read(std::uint64_t offset, std::uint64_t bytes, std::size_t piece_bytes,
                       const std::string& what, const PieceUse& use) const {
  in_.clear();
  in_.seekg(static_cast<std::streamoff>(offset));
  std::string piece(static_cast<std::size_t>(
                        std::min<std::uint64_t>(bytes, std::max<std::size_t>(1, piece_bytes))),
                    '\0');
  for (std::uint64_t at = 0; at < bytes; at += piece.size()) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(piece.size(), bytes - at));
    errno = 0;
    in_.read(piece.data(), static_cast<std::streamsize>(n));
    if (in_.bad()) {
      const int error = errno;
      throw CheckpointUnreadable(path_ + ": read error at offset " + std::to_string(offset + at) +
                                 (error != 0 ? ": " + std::string(std::strerror(error)) : ""));
    }
    if (static_cast<std::size_t>(in_.gcount()) != n)
      fail(path_, offset + at + static_cast<std::uint64_t>(in_.gcount()),
           what + ": the file ends early (it changed since it was opened)");
    use(std::string_view(piece.data(), n), at);
  }
}

SafetensorsFile::SafetensorsFile(PieceReader file) : file_(std::move(file)) {
  const std::string& path = file_.path();
  std::string head;
  const auto append = [&](std::string_view piece, std::uint64_t) { head += piece; };
  file_.read(0, std::min<std::uint64_t>(kHeaderOffset, file_.size()), kHeaderOffset,
             "the header length", append);
  const std::uint64_t n = header_length(head, file_.size(), path);
  file_.read(kHeaderOffset, n, static_cast<std::size_t>(n), "the header", append);
  contents_ = decode(head, file_.size(), false, path);
}

void SafetensorsFile::read_pieces(const StoredTensor& t, std::size_t piece_bytes,
                                  const PieceUse& use) const {
  const std::size_t element = std::max<std::size_t>(1, safetensors_dtype_size(t.dtype));
  file_.read(t.file_offset, t.file_bytes, std::max(element, piece_bytes - piece_bytes % element),
             "tensor '" + t.name + "'", use);
}

}  // namespace trainer::checkpoint
