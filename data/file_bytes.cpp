// Whole-file reads of regular files: the raw bytes, inflated with zlib when
// they start with the gzip magic (concatenated members are read one after
// another; anything else after the last member is an error; a header is
// checked as soon as it is out).
#include "data/file_bytes.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include "data/file_kind.h"

namespace trainer::data {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FileHandle = std::unique_ptr<std::FILE, FileCloser>;

// inflateEnd on every way out.
class Inflater {
 public:
  Inflater() {
    // 16 + MAX_WBITS: a gzip wrapper (header and CRC-32/size trailer) only.
    if (inflateInit2(&stream_, 16 + MAX_WBITS) != Z_OK) throw std::bad_alloc();
  }
  ~Inflater() { inflateEnd(&stream_); }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;
  z_stream& stream() { return stream_; }

 private:
  z_stream stream_{};
};

bool gzip_magic(const std::vector<std::uint8_t>& bytes, std::size_t at) {
  return bytes.size() >= at + 2 && bytes[at] == 0x1F && bytes[at + 1] == 0x8B;
}

// What zlib's message means, in the words of the file's damage.
std::string gzip_damage(const char* message) {
  const std::string m = message ? message : "";
  if (m == "incorrect data check")
    return "the CRC-32 in its trailer does not match the decompressed data";
  if (m == "incorrect length check")
    return "the length in its trailer does not match the decompressed data";
  if (m.empty()) return "invalid compressed data";
  return "invalid compressed data (" + m + ")";
}

constexpr const char* kCopyAgain = "copy or download it again";

// The error for a file (or its decompressed data, `what`) that does not fit in memory.
std::string not_enough_memory_message(const std::string& path, std::size_t bytes,
                                      const std::string& what) {
  return "not enough memory to read data file '" + path + "' (" + std::to_string(bytes) + " bytes" +
         what + "): free memory (other programs, a smaller data set) or use a machine with more";
}

[[noreturn]] void not_enough_memory(const std::string& path, std::size_t bytes,
                                    const std::string& what) {
  throw std::runtime_error(not_enough_memory_message(path, bytes, what));
}

// The size a gzip stream's last trailer gives (modulo 2^32), capped at
// deflate's largest ratio so a damaged trailer cannot reserve gigabytes.
std::size_t inflated_size_hint(const std::vector<std::uint8_t>& in) {
  if (in.size() < 18) return 0;
  const std::size_t tail = in.size() - 4;
  const std::size_t hint = std::size_t{in[tail]} | (std::size_t{in[tail + 1]} << 8) |
                           (std::size_t{in[tail + 2]} << 16) | (std::size_t{in[tail + 3]} << 24);
  return std::min(hint, in.size() * 1032);
}

// Inflating one gzip file (concatenated members one after another) into
// memory, checking what its header declares as soon as the header is out.
class Gunzip {
 public:
  Gunzip(const std::string& path, const std::vector<std::uint8_t>& in, const DeclaredSize& declared)
      : path_(path), in_(in), declared_(declared) {
    // Without a header to read, the trailer's size is the best guess; with
    // one, the header's size is reserved once it is out.
    if (!declared_) reserve(inflated_size_hint(in_));
  }

  // The whole decompressed contents.
  std::vector<std::uint8_t> run() {
    z_stream& z = inflater_.stream();
    for (;;) {
      if (out_pos_ == out_.size()) grow();
      const std::size_t in_chunk = std::min<std::size_t>(in_.size() - in_pos_, UINT_MAX);
      const std::size_t out_chunk = std::min<std::size_t>(out_.size() - out_pos_, UINT_MAX);
      z.next_in = const_cast<Bytef*>(in_.data() + in_pos_);
      z.avail_in = static_cast<uInt>(in_chunk);
      z.next_out = out_.data() + out_pos_;
      z.avail_out = static_cast<uInt>(out_chunk);
      const int status = inflate(&z, Z_NO_FLUSH);
      in_pos_ += in_chunk - z.avail_in;
      out_pos_ += out_chunk - z.avail_out;
      check_declared();
      if (status == Z_STREAM_END) {
        if (in_pos_ == in_.size()) break;
        next_member();
        continue;
      }
      if (status == Z_OK) continue;
      if (status == Z_BUF_ERROR && z.avail_out == 0) continue;  // more room, then again
      fail(status);
    }
    out_.resize(out_pos_);
    out_.shrink_to_fit();
    return std::move(out_);
  }

 private:
  // Room for `bytes` decompressed bytes, or the error saying there is not.
  void reserve(std::size_t bytes) {
    try {
      out_.reserve(bytes);
    } catch (const std::bad_alloc&) {
      not_enough_memory(path_, bytes, " for its decompressed data" + declared_text());
    }
  }

  // More room for output: double it, but never past one byte more than the
  // header declares (that byte is enough to tell the data goes on).
  void grow() {
    std::size_t size = std::max<std::size_t>({out_.size() * 2, out_.capacity(), 1 << 16});
    if (size_ && *size_ < SIZE_MAX) size = std::min(size, *size_ + 1);
    size = std::max(size, out_pos_ + 1);
    try {
      out_.resize(size);
    } catch (const std::bad_alloc&) {
      not_enough_memory(path_, size,
                        " for its decompressed data, at compressed byte offset " +
                            std::to_string(in_pos_) + declared_text());
    }
  }

  // "; its header declares 47040016 bytes", when it has been read.
  std::string declared_text() const {
    if (!size_) return "";
    if (*size_ == SIZE_MAX) return "; its header declares more bytes than can be counted";
    return "; its header declares " + std::to_string(*size_) + " bytes";
  }

  // Asks the format for the declared size until the header is out; then the
  // data must not go past it.
  void check_declared() {
    if (declared_ && !size_) {
      size_ = declared_(std::span<const std::uint8_t>(out_.data(), out_pos_));
      // More than deflate's largest ratio (1032:1) can make of the whole
      // file: it is cut short (or the header damaged), known before
      // gigabytes are inflated to find its end. Otherwise reserved at once.
      if (size_ && *size_ / 1032 >= in_.size())
        throw std::runtime_error(
            "data file '" + path_ + "' is cut short: its header declares " +
            (*size_ == SIZE_MAX ? std::string("more bytes than can be counted")
                                : std::to_string(*size_) + " bytes") +
            ", but " + std::to_string(in_.size()) +
            " gzip-compressed bytes decompress to at most 1032 times as many (deflate's largest "
            "ratio): the file was truncated, or its header is damaged; " +
            kCopyAgain);
      if (size_ && *size_ + 1 > out_.capacity()) reserve(*size_ + 1);
    }
    if (!size_ || out_pos_ <= *size_) return;
    throw std::runtime_error(
        "data file '" + path_ + "' decompresses to more than the " + std::to_string(*size_) +
        " bytes its header declares: the data goes on after decompressed byte offset " +
        std::to_string(*size_) + " (compressed byte offset " + std::to_string(in_pos_) +
        "): a wrong extent in the header, or a damaged file; " + kCopyAgain);
  }

  // After the end of a member: another member, or an error for other bytes.
  void next_member() {
    if (!gzip_magic(in_, in_pos_)) {
      throw std::runtime_error(
          "data file '" + path_ + "' has " + std::to_string(in_.size() - in_pos_) +
          " bytes after the end of its gzip stream, from byte offset " + std::to_string(in_pos_) +
          " (" + std::to_string(out_pos_) +
          " bytes decompressed): the file is damaged or had bytes appended; " + kCopyAgain);
    }
    member_start_ = in_pos_;
    inflateReset(&inflater_.stream());
  }

  // The error for an inflate `status` that is neither progress nor the end.
  [[noreturn]] void fail(int status) {
    if (status == Z_MEM_ERROR) not_enough_memory(path_, out_pos_, " decompressed so far");
    if (status == Z_BUF_ERROR) {  // all input used, the stream unfinished
      throw std::runtime_error(
          "data file '" + path_ + "' is a truncated gzip stream: the data ends at byte offset " +
          std::to_string(in_.size()) + " before the end of the stream, after " +
          std::to_string(out_pos_) + " decompressed bytes: the file was cut short; " + kCopyAgain);
    }
    throw std::runtime_error("data file '" + path_ +
                             "' is a corrupt gzip stream: " + gzip_damage(inflater_.stream().msg) +
                             ", detected at compressed byte offset " + std::to_string(in_pos_) +
                             " (the stream starts at byte offset " + std::to_string(member_start_) +
                             ") after " + std::to_string(out_pos_) +
                             " decompressed bytes: the file is damaged; " + kCopyAgain);
  }

  const std::string& path_;
  const std::vector<std::uint8_t>& in_;
  const DeclaredSize& declared_;
  std::optional<std::size_t> size_;  // what the header declares, once read
  Inflater inflater_;
  std::vector<std::uint8_t> out_;
  std::size_t in_pos_ = 0, out_pos_ = 0, member_start_ = 0;
};

// A data file must be a regular file: a device (/dev/zero) has no end, a FIFO
// blocks until something writes to it, and neither can be read twice.
void check_regular_file(const std::string& path) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (ec == std::errc::too_many_symbolic_link_levels) {
    throw std::runtime_error("data file '" + path + "': " + ec.message() +
                             ": a symbolic link on that path leads back to itself; point it at "
                             "the file");
  }
  if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory) {
    throw std::runtime_error("cannot reach data file '" + path + "': " + ec.message() +
                             ": make it and the folders above it readable by the user running "
                             "the trainer");
  }
  if (!std::filesystem::exists(status)) {
    if (std::filesystem::is_symlink(std::filesystem::symlink_status(path, ec)))
      throw std::runtime_error("data file '" + path + "' is a broken symbolic link to '" +
                               std::filesystem::read_symlink(path, ec).string() +
                               "': restore the file it points to, or give the file's own path");
    throw std::runtime_error("data file '" + path + "' does not exist");
  }
  if (std::filesystem::is_directory(status)) {
    throw std::runtime_error("data file '" + path + "' is a directory, expected a file");
  }
  if (!std::filesystem::is_regular_file(status)) {
    throw std::runtime_error("data file '" + path + "' is not a regular file (" +
                             file_kind(status) +
                             "): write the data to a file and give that file's path");
  }
}

// The raw bytes of the regular file `path`.
std::vector<std::uint8_t> raw_bytes(const std::string& path) {
  FileHandle file(std::fopen(path.c_str(), "rb"));
  if (!file) {
    throw std::runtime_error("cannot open data file '" + path + "': " + std::strerror(errno));
  }
  // One read of the size the file has, then on to its end (a file that grew).
  std::error_code ec;
  const auto size_hint = std::filesystem::file_size(path, ec);
  std::vector<std::uint8_t> bytes;
  try {
    bytes.resize(ec ? 0 : static_cast<std::size_t>(size_hint));
    bytes.resize(std::fread(bytes.data(), 1, bytes.size(), file.get()));
    std::uint8_t more[1 << 13];
    for (std::size_t got; (got = std::fread(more, 1, sizeof more, file.get())) > 0;)
      bytes.insert(bytes.end(), more, more + got);
  } catch (const std::bad_alloc&) {
    not_enough_memory(path, ec ? bytes.size() : static_cast<std::size_t>(size_hint), "");
  }
  if (std::ferror(file.get())) {
    throw std::runtime_error("cannot read data file '" + path + "' after " +
                             std::to_string(bytes.size()) + " bytes: " + std::strerror(errno));
  }
  return bytes;
}

// Runs the format's header check on the first bytes of an uncompressed file,
// so that a file of another kind, or one longer than its header declares, is
// refused at its header, not after reading gigabytes of it into memory. A
// gzip stream's header is checked as it inflates.
void check_header_first(const std::string& path, const DeclaredSize& declared) {
  FileHandle file(std::fopen(path.c_str(), "rb"));
  if (!file) return;  // raw_bytes says why
  std::vector<std::uint8_t> prefix(std::size_t{1} << 16);
  prefix.resize(std::fread(prefix.data(), 1, prefix.size(), file.get()));
  if (gzip_magic(prefix, 0)) return;
  // Throws the format's error for a header it refuses.
  const std::optional<std::size_t> size = declared(prefix);
  struct stat status {};
  if (!size || *size == SIZE_MAX || fstat(fileno(file.get()), &status) != 0) return;
  check_declared_size(path, static_cast<std::uint64_t>(status.st_size), *size);
}

}  // namespace

void check_declared_size(const std::string& path, std::uint64_t file_size, std::size_t declared) {
  if (file_size <= declared) return;  // the format names what a short file lacks
  throw std::runtime_error("data file '" + path + "' is " + std::to_string(file_size) +
                           " bytes, more than the " + std::to_string(declared) +
                           " bytes its header declares: " + std::to_string(file_size - declared) +
                           " bytes after the data, from byte offset " + std::to_string(declared) +
                           ": a wrong extent in the header, or bytes appended to the file; " +
                           kCopyAgain);
}

std::vector<std::uint8_t> read_file_bytes(const std::string& path, const DeclaredSize& declared) {
  check_regular_file(path);
  if (declared) check_header_first(path, declared);
  std::vector<std::uint8_t> bytes = raw_bytes(path);
  if (!gzip_magic(bytes, 0)) return bytes;
  try {
    return Gunzip(path, bytes, declared).run();
  } catch (const std::bad_alloc&) {  // zlib's state, or a format's header check
    not_enough_memory(path, bytes.size(), ", gzip-compressed");
  }
}

std::vector<std::uint8_t> read_raw_file_bytes(const std::string& path) {
  check_regular_file(path);
  return raw_bytes(path);
}

OpenDataFile::OpenDataFile(const std::string& path) : path_(path) {
  check_regular_file(path);
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0)
    throw std::runtime_error("cannot open data file '" + path + "': " + std::strerror(errno));
  struct stat status {};
  if (fstat(fd_, &status) != 0) {
    const int error = errno;
    ::close(fd_);
    throw std::runtime_error("cannot read data file '" + path + "': " + std::strerror(error));
  }
  size_ = static_cast<std::uint64_t>(status.st_size);
}

OpenDataFile::~OpenDataFile() {
  if (fd_ >= 0) ::close(fd_);
}

OpenDataFile::OpenDataFile(OpenDataFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_), size_(other.size_) {
  other.fd_ = -1;
}

std::vector<std::uint8_t> OpenDataFile::prefix(std::size_t size) const {
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(std::min<std::uint64_t>(size, size_)));
  std::size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::pread(fd_, bytes.data() + got, bytes.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw std::runtime_error("cannot read data file '" + path_ + "': " + std::strerror(errno));
    if (n == 0) break;  // shorter than it was: the format names what it lacks
    got += static_cast<std::size_t>(n);
  }
  bytes.resize(got);
  return bytes;
}

bool OpenDataFile::gzip() const {
  const std::vector<std::uint8_t> magic = prefix(2);
  return gzip_magic(magic, 0);
}

void OpenDataFile::read_at(std::uint64_t offset, void* out, std::size_t size) const {
  auto* to = static_cast<std::uint8_t*>(out);
  std::size_t got = 0;
  while (got < size) {
    const ssize_t n = ::pread(fd_, to + got, size - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw std::runtime_error("cannot read data file '" + path_ + "': " + std::strerror(errno));
    if (n == 0)
      throw std::runtime_error("cannot read data file '" + path_ + "': it ended at byte offset " +
                               std::to_string(offset + got) + ", before the " +
                               std::to_string(size) + " bytes of data from byte offset " +
                               std::to_string(offset) + " (cut short while it was read?)");
    got += static_cast<std::size_t>(n);
  }
}

std::runtime_error not_enough_memory_for(const std::string& path, std::size_t bytes) {
  return std::runtime_error(not_enough_memory_message(path, bytes, ""));
}

}  // namespace trainer::data
