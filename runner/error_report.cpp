// Error reports on stderr, a line per write (error_report.h).
#include "runner/error_report.h"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <exception>
#include <string>

#include "runner/dist/launch_env.h"

namespace trainer {
namespace {

// Writes every byte of `parts` to `fd`: one writev, then the rest of a
// partial write (a pipe's reader slower than the line), retried on EINTR.
void write_whole(int fd, iovec* parts, int count) {
  while (count > 0) {
    const ssize_t written = ::writev(fd, parts, count);
    if (written < 0) {
      if (errno == EINTR) continue;
      return;  // nowhere left to say it
    }
    auto left = static_cast<std::size_t>(written);
    while (count > 0 && left >= parts->iov_len) {
      left -= parts->iov_len;
      ++parts;
      --count;
    }
    if (count > 0) {
      parts->iov_base = static_cast<char*>(parts->iov_base) + left;
      parts->iov_len -= left;
    }
  }
}

}  // namespace

void print_error_report(std::string_view report) {
  std::string mark;
  try {
    mark = dist::rank_mark();
  } catch (const std::exception&) {
  }
  std::fflush(stderr);  // what stdio holds goes first
  char newline[] = "\n";
  while (!report.empty()) {
    const std::size_t end = report.find('\n');
    const std::string_view line = report.substr(0, end);
    iovec parts[] = {
        {mark.data(), mark.size()}, {const_cast<char*>(line.data()), line.size()}, {newline, 1}};
    write_whole(STDERR_FILENO, parts, 3);
    if (end == std::string_view::npos) break;
    report.remove_prefix(end + 1);
  }
}

}  // namespace trainer
