// labels: cpu
// OutputForwarder, which copies mpirun's output to the launcher's: a console
// that reads slowly still gets every byte, however long after the child ended
// (a deadline once cut the copying short, losing the end of a job's output);
// a process the child left behind, holding its output open, is not waited
// for past the grace.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>

#include "runner/dist/output_forwarder.h"

using trainer::dist::OutputForwarder;

namespace {

// This process's stdout made a pipe for the test's length, read by a thread
// 4 KiB at a time with `pause` before each read; what it read, once stdout
// is back.
class SlowConsole {
 public:
  explicit SlowConsole(std::chrono::milliseconds pause) {
    // Close-on-exec, so that the children hold no end of it but their stdout.
    int ends[2];
    REQUIRE(::pipe2(ends, O_CLOEXEC) == 0);
    saved_ = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 0);
    ::dup2(ends[1], STDOUT_FILENO);
    ::close(ends[1]);
    reader_ = std::thread([this, pause, in = ends[0]] {
      char buffer[4096];
      for (ssize_t n = 1; n > 0;) {
        std::this_thread::sleep_for(pause);
        n = ::read(in, buffer, sizeof buffer);
        if (n > 0) read_.append(buffer, static_cast<std::size_t>(n));
      }
      ::close(in);
    });
  }
  // Puts stdout back (the pipe's last writer goes) and returns what was read.
  std::string close() {
    ::dup2(saved_, STDOUT_FILENO);
    ::close(saved_);
    reader_.join();
    return read_;
  }

 private:
  int saved_ = -1;
  std::thread reader_;
  std::string read_;
};

// Runs `script` with sh as the forwarder's child, and returns once the
// forwarder has finished with `grace`.
void run_forwarded(const std::string& script, std::chrono::milliseconds grace) {
  OutputForwarder output;
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    output.attach_child();
    ::execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  output.start();
  int status = 0;
  ::waitpid(pid, &status, 0);
  output.finish(grace);
}

}  // namespace

TEST_CASE("a slow console gets all of a child's output, past the grace") {
  // 256 KiB read at 200 KiB/s: when the child ends, what the pipes between
  // still hold takes the console far longer than the grace of 100 ms.
  SlowConsole console(std::chrono::milliseconds(20));
  run_forwarded("head -c 262144 /dev/zero", std::chrono::milliseconds(100));
  CHECK(console.close().size() == 262144);
}

TEST_CASE("a process the child left holding its output is not waited for past the grace") {
  SlowConsole console(std::chrono::milliseconds(1));
  const auto start = std::chrono::steady_clock::now();
  run_forwarded("sleep 3 2>/dev/null & echo written", std::chrono::milliseconds(200));
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(console.close() == "written\n");
  CHECK(took < 2.0);
}
