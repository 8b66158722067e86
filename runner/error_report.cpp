// Error reports on stderr, a line per write (error_report.h).
#include "runner/error_report.h"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "runner/dist/launch_env.h"
#include "runner/train/progress.h"

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

// In a rank of a job trainer's own launcher started (it names the file the
// root writes its run directory to): the report's first line, after the
// rank's mark, appended to that file's ".errors" companion, one write. The
// launcher records the first of them when a rank's failure ends the job
// before the root could record it. Allocates nothing (an out-of-memory
// report passes here too).
void keep_for_launcher(const std::string& mark, std::string_view report) {
  const char* note = std::getenv(train::kRunDirNoteVariable);
  if (!note || mark.empty()) return;
  char path[4096];
  if (std::snprintf(path, sizeof path, "%s%s", note, train::kRankErrorsSuffix) >=
      static_cast<int>(sizeof path))
    return;
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return;
  const std::string_view line = report.substr(0, report.find('\n'));
  char newline[] = "\n";
  iovec parts[] = {{const_cast<char*>(mark.data()), mark.size()},
                   {const_cast<char*>(line.data()), line.size()},
                   {newline, 1}};
  write_whole(fd, parts, 3);
  ::close(fd);
}

}  // namespace

void print_error_report(std::string_view report) {
  std::string mark;
  try {
    mark = dist::rank_mark();
  } catch (const std::exception&) {
  }
  keep_for_launcher(mark, report);
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
