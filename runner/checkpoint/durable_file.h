// Crash-safe file writes: write to a temporary name, fsync, rename over the
// final name, fsync the directory. A reader sees the old file or the new one,
// never a torn one.
#pragma once

#include <string>
#include <string_view>

namespace trainer::checkpoint {

// An open POSIX file descriptor (close-on-exec), closed with the object;
// false when the open failed (errno says why).
class FileDescriptor {
 public:
  FileDescriptor(const std::string& path, int flags, unsigned mode = 0644);
  ~FileDescriptor();
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_;
};

// A file written in pieces as they are made, then fsynced by finish(). The
// descriptor closes with the object; a file not finished is left as written.
class SyncedFileWriter {
 public:
  explicit SyncedFileWriter(const std::string& path);

  void append(std::string_view bytes);
  void finish();

 private:
  std::string path_;
  FileDescriptor file_;
};

// Writes `bytes` to `path` and fsyncs the file (no rename).
void write_file_synced(const std::string& path, std::string_view bytes);

// Flushes a directory's entries (after a create, rename or delete inside it).
void fsync_directory(const std::string& path);

// `path` replaced atomically by `bytes`.
void write_file_atomically(const std::string& path, std::string_view bytes);

// `link` made (or replaced, atomically) a symbolic link to `target`.
void replace_symlink(const std::string& link, const std::string& target);

}  // namespace trainer::checkpoint
