// OutputForwarder (output_forwarder.h): copies a child's output to ours,
// and keeps reading it when ours is gone.
#include "runner/dist/output_forwarder.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace trainer::dist {
namespace {

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Writes all of `bytes` to `fd`; false once a write fails (the reader is gone).
bool write_all(int fd, const char* bytes, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, bytes, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

constexpr std::chrono::seconds kMostPastDeadline(60);

}  // namespace

OutputForwarder::OutputForwarder() {
  if (::pipe2(out_, O_CLOEXEC) != 0 || ::pipe2(err_, O_CLOEXEC) != 0) {
    const std::string why = std::strerror(errno);
    for (int* fd : {&out_[0], &out_[1], &err_[0], &err_[1]}) close_fd(*fd);
    throw std::runtime_error("cannot make the pipes for mpirun's output: " + why);
  }
}

OutputForwarder::~OutputForwarder() {
  if (thread_.joinable()) finish(std::chrono::milliseconds(0));
  for (int* fd : {&out_[0], &out_[1], &err_[0], &err_[1]}) close_fd(*fd);
}

void OutputForwarder::attach_child() const {
  // dup2 leaves the copies open across exec; the originals close there.
  ::dup2(out_[1], STDOUT_FILENO);
  ::dup2(err_[1], STDERR_FILENO);
}

void OutputForwarder::start() {
  close_fd(out_[1]);
  close_fd(err_[1]);
  thread_ = std::thread([this] { copy(); });
}

void OutputForwarder::finish(std::chrono::milliseconds grace) {
  deadline_ = (std::chrono::steady_clock::now() + grace).time_since_epoch().count();
  if (thread_.joinable()) thread_.join();
}

void OutputForwarder::copy() {
  pollfd sources[2] = {{out_[0], POLLIN, 0}, {err_[0], POLLIN, 0}};
  const int targets[2] = {STDOUT_FILENO, STDERR_FILENO};
  bool open[2] = {true, true};      // the child's end still open
  bool writable[2] = {true, true};  // ours still taken
  char buffer[64 * 1024];
  while (open[0] || open[1]) {
    for (int i = 0; i < 2; ++i) sources[i].fd = open[i] ? (i == 0 ? out_[0] : err_[0]) : -1;
    const int ready = ::poll(sources, 2, 100);
    if (ready < 0 && errno != EINTR) return;
    // Nothing to read past the deadline: a process the child left behind
    // holds its end open, and is not waited for. What was written is read
    // first, however slowly ours takes it, up to a minute past the deadline
    // (one left behind that writes on and on is not followed for ever).
    const auto deadline = deadline_.load();
    const auto now = std::chrono::steady_clock::now().time_since_epoch();
    if (deadline != 0 && now.count() >= deadline &&
        (ready == 0 || now - std::chrono::steady_clock::duration(deadline) > kMostPastDeadline))
      return;
    for (int i = 0; i < 2; ++i) {
      if (!open[i] || sources[i].revents == 0) continue;
      const ssize_t n = ::read(sources[i].fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        open[i] = false;
        continue;
      }
      // Once ours is gone the output is read and dropped: the child goes on.
      if (writable[i]) writable[i] = write_all(targets[i], buffer, static_cast<std::size_t>(n));
    }
  }
}

}  // namespace trainer::dist
