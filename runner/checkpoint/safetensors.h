// Safetensors, read and written by hand: an 8-byte little-endian header length,
// a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}},
// then the raw tensor bytes. Files written here load in other tools unchanged.
// Every malformed input is reported as a CheckpointError naming the file and
// the byte offset where it went wrong.
#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace trainer::checkpoint {

// A checkpoint or weights file that cannot be used: damaged (truncated,
// checksum or format wrong) unless it is one of the two kinds below.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Intact, but its tensors do not fit the model (names, shapes, dtypes): the
// config changed, not the file.
class CheckpointMismatch : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

// The system refused to read it (permissions, an I/O error): not damage.
class CheckpointUnreadable : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

// Whether `error`, from looking at a path, is the system refusing (a
// permission, an I/O error, a stale network handle): the path is unreadable,
// not missing (no such file, a folder on the way that is a file, a name too
// long to be one) and not a link loop.
bool system_refused(const std::error_code& error);

// Intact, but the run's record files (metrics.jsonl, timing.jsonl) no longer
// end a record where the checkpoint recorded their length: they were changed
// since, which no other checkpoint mends. Not damage of the checkpoint.
class RecordsChanged : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

// Intact, but a tensor holds a value that is not finite (NaN, an infinity):
// weights of a run that diverged, or a file edited. Loading it would only
// make the next loss NaN.
class CheckpointNotFinite : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

struct StoredTensor {
  std::string name;
  std::string dtype;  // "F32", "I64", ...
  std::vector<std::int64_t> shape;
  std::string bytes;  // raw little-endian data (empty in a SafetensorsFile's contents)
  // Where its data lies in the file it was read from: the first byte's offset
  // from the file's start, and the bytes it takes.
  std::uint64_t file_offset = 0, file_bytes = 0;
};

struct Safetensors {
  std::map<std::string, std::string> metadata;
  std::vector<StoredTensor> tensors;  // in header order (sorted by name)

  const StoredTensor* find(const std::string& name) const;
};

// Bytes per element of a safetensors dtype name; 0 for an unknown one.
std::size_t safetensors_dtype_size(const std::string& dtype);

// The whole file's bytes (header padded with spaces to a multiple of 8).
std::string encode_safetensors(const Safetensors& file);

// What a file's header says of one of its tensors: all a writer needs to
// know before the tensor's bytes.
struct TensorLayout {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t bytes = 0;
};

// The file's first bytes: the header's length and the header (padded), which
// the tensors' bytes follow in the order given. A file written from this and
// the tensors in turn is encode_safetensors without holding the file whole.
std::string encode_safetensors_header(const std::map<std::string, std::string>& metadata,
                                      const std::vector<TensorLayout>& tensors);

// Parses `bytes` read from `path` (the path only appears in error messages).
Safetensors decode_safetensors(std::string_view bytes, const std::string& path);

// Reads just the header's metadata, without the tensor data (the header
// checked as SafetensorsFile checks it; an I/O error is CheckpointUnreadable).
std::map<std::string, std::string> read_safetensors_metadata(const std::string& path);

Safetensors read_safetensors(const std::string& path);

// A function given a file's bytes a piece at a time, and where each piece
// starts (in the tensor, or in the range, read).
using PieceUse = std::function<void(std::string_view piece, std::uint64_t at)>;

// A file open for reading a piece at a time. It stays open: a file deleted
// meanwhile (by a run's retention) still reads. Throws as read_file_bytes
// does when the file cannot be opened.
class PieceReader {
 public:
  explicit PieceReader(const std::string& path);

  const std::string& path() const { return path_; }
  std::uint64_t size() const { return size_; }
  // Calls `use` with bytes [offset, offset + bytes) in order, at most
  // `piece_bytes` at a time. A read that fails: CheckpointUnreadable; a file
  // that ends early (changed since it was opened): CheckpointError naming
  // `what` it was reading.
  void read(std::uint64_t offset, std::uint64_t bytes, std::size_t piece_bytes,
            const std::string& what, const PieceUse& use) const;
  // Throws CheckpointUnreadable when the file at the path was written,
  // replaced or deleted since it was opened: what was read from it in
  // several passes (a checksum, then the values) may not be one file's.
  void check_unchanged() const;

 private:
  std::string path_;
  mutable std::ifstream in_;
  std::string identity_;  // inode, size and times when opened
  std::uint64_t size_ = 0;
};

// A safetensors file open for reading: its header read and checked as
// read_safetensors checks the whole file, its tensors' bytes read when asked,
// a piece at a time, so that loading holds no copy of the file.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path) : SafetensorsFile(PieceReader(path)) {}
  explicit SafetensorsFile(PieceReader file);

  const std::string& path() const { return file_.path(); }
  // Names, dtypes, shapes and places (every tensor's `bytes` empty).
  const Safetensors& contents() const { return contents_; }
  // Calls `use` with tensor `t`'s bytes in order, at most `piece_bytes` at a
  // time (whole elements), as PieceReader::read.
  void read_pieces(const StoredTensor& t, std::size_t piece_bytes, const PieceUse& use) const;
  void check_unchanged() const { file_.check_unchanged(); }

 private:
  PieceReader file_;
  Safetensors contents_;
};

// The whole file as bytes; throws CheckpointError naming the file when it is
// missing, CheckpointUnreadable (with the system's reason) when it cannot be read.
std::string read_file_bytes(const std::string& path);

}  // namespace trainer::checkpoint
