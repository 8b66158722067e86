// fsync-and-rename file writes over POSIX descriptors.
#include "runner/checkpoint/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace trainer::checkpoint {
namespace {

std::runtime_error os_error(const std::string& what, const std::string& path) {
  return std::runtime_error("cannot " + what + " " + path + ": " + std::strerror(errno));
}

// The folder holding `path`, to fsync after an entry in it changed.
std::string parent_directory(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
}

}  // namespace

FileDescriptor::FileDescriptor(const std::string& path, int flags, unsigned mode)
    : fd_(::open(path.c_str(), flags | O_CLOEXEC, static_cast<mode_t>(mode))) {}

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

SyncedFileWriter::SyncedFileWriter(const std::string& path)
    : path_(path), file_(path, O_WRONLY | O_CREAT | O_TRUNC) {
  if (!file_) throw os_error("create", path);
}

void SyncedFileWriter::append(std::string_view bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(file_.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw os_error("write", path_);
    }
    done += static_cast<std::size_t>(n);
  }
}

void SyncedFileWriter::finish() {
  if (::fsync(file_.get()) != 0) throw os_error("fsync", path_);
}

void write_file_synced(const std::string& path, std::string_view bytes) {
  SyncedFileWriter file(path);
  file.append(bytes);
  file.finish();
}

void fsync_directory(const std::string& path) {
  FileDescriptor fd(path, O_RDONLY | O_DIRECTORY);
  if (!fd) throw os_error("open directory", path);
  if (::fsync(fd.get()) != 0) throw os_error("fsync directory", path);
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp";
  try {
    write_file_synced(tmp, bytes);
  } catch (...) {
    ::unlink(tmp.c_str());  // a full disk: the partial copy would only hold space
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw os_error("rename into place", path);
  fsync_directory(parent_directory(path));
}

void replace_symlink(const std::string& link, const std::string& target) {
  const std::string tmp = link + ".tmp";
  ::unlink(tmp.c_str());
  if (::symlink(target.c_str(), tmp.c_str()) != 0) throw os_error("create link", tmp);
  if (std::rename(tmp.c_str(), link.c_str()) != 0) throw os_error("rename link into place", link);
  fsync_directory(parent_directory(link));
}

}  // namespace trainer::checkpoint
