// The run directory lock: flock on <dir>/.lock.
#include "runner/train/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <utility>

#include "runner/train/run_dir.h"
#include "runner/usage_error.h"

namespace trainer::train {
namespace {

// The pid a lock file holds (written by its holder), or "".
std::string holder_pid(int fd) {
  char holder[32] = {};
  const ssize_t n = ::pread(fd, holder, sizeof holder - 1, 0);
  std::string pid = n > 0 ? std::string(holder, static_cast<std::size_t>(n)) : "";
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid;
}

std::string in_use_message(const std::string& dir, const std::string& what,
                           const std::string& pid) {
  return what + " " + dir + " is in use by another trainer process" +
         (pid.empty() ? std::string() : " (pid " + pid + ")") +
         ": two processes in one directory would mix their records; wait for it to end (or "
         "stop it), or use another directory";
}

}  // namespace

std::string held_by_another(const std::string& dir, const std::string& what) {
  const std::string path = (std::filesystem::path(dir) / kLockFileName).string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string message;
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK)
    message = in_use_message(dir, what, holder_pid(fd));
  ::close(fd);  // releases what this probe took
  return message;
}

RunDirLock::RunDirLock(const std::string& dir, const std::string& what) {
  const std::string path = (std::filesystem::path(dir) / kLockFileName).string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int error = errno;
    const bool unwritable = error == EROFS || error == EACCES || error == EPERM;
    throw std::runtime_error(
        "cannot lock " + what + " " + dir + ": cannot open " + path + ": " + std::strerror(error) +
        (error == EISDIR ? "; it is the run's lock file, not a folder: move that folder away"
         : unwritable && what == "run directory"
             ? "; " + unwritable_run_dir_advice(dir, error == EROFS)
         : unwritable ? "; give this user write access (chmod -R u+w " + dir + ")"
                      : ""));
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    if (error == ENOLCK || error == ENOSYS || error == EOPNOTSUPP || error == EINVAL) {
      // A file system without locks (some network and FUSE mounts): the run
      // goes on unprotected rather than not at all.
      std::fprintf(stderr,
                   "warning: cannot lock %s %s (%s): the file system does not support locks; "
                   "make sure no other trainer process uses it\n",
                   what.c_str(), dir.c_str(), std::strerror(error));
      return;
    }
    const std::string pid = holder_pid(fd_);
    ::close(fd_);
    fd_ = -1;
    if (error != EWOULDBLOCK)
      throw std::runtime_error("cannot lock " + what + " " + dir + ": " + std::strerror(error));
    throw UsageError(in_use_message(dir, what, pid));
  }
  locked_ = true;
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, pid.data(), pid.size(), 0);
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

RunDirLock::RunDirLock(RunDirLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), locked_(std::exchange(other.locked_, false)) {}

RunDirLock& RunDirLock::operator=(RunDirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    locked_ = std::exchange(other.locked_, false);
  }
  return *this;
}

}  // namespace trainer::train
