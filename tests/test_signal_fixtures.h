// Helpers for the tests of signals: `trainer` as a child process started with
// a known signal state, and the signal masks of a process's threads from /proc.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace trainer::testing {

constexpr std::uint64_t signal_bit(int sig) {
  return std::uint64_t{1} << (sig - 1);
}
// The signals a run takes as a stop (SIGHUP: when not ignored at its start).
constexpr std::uint64_t kStopSignals =
    signal_bit(SIGINT) | signal_bit(SIGTERM) | signal_bit(SIGHUP);

// How TrainerChild starts the trainer, beyond the defaults.
struct ChildStart {
  int ignored_signal = 0;  // ignored from the start: SIGINT (`cmd &`), SIGHUP (`nohup`)
  rlim_t file_size_limit = RLIM_INFINITY;  // `ulimit -f`, in bytes
};

// `trainer ARGS...` with output to `log_path`, started with no signal blocked
// and SIGINT / SIGTERM / SIGHUP at their defaults (but `start.ignored_signal`),
// whatever the test runner had.
class TrainerChild {
 public:
  TrainerChild(const std::vector<std::string>& args, const std::string& log_path,
               ChildStart start = {}) {
    std::vector<std::string> copy = args;
    std::string binary = TRAINER_BINARY;
    std::vector<char*> argv = {binary.data()};
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ != 0) return;
    const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    for (const int sig : {SIGINT, SIGTERM, SIGHUP, SIGXFSZ})
      signal(sig, sig == start.ignored_signal ? SIG_IGN : SIG_DFL);
    const rlimit file_size{start.file_size_limit, start.file_size_limit};
    setrlimit(RLIMIT_FSIZE, &file_size);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  ~TrainerChild() {
    if (pid_ > 0 && !ended_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  TrainerChild(const TrainerChild&) = delete;
  TrainerChild& operator=(const TrainerChild&) = delete;

  pid_t pid() const { return pid_; }
  void signal_it(int sig) const { kill(pid_, sig); }
  // The wait status, or nothing while it still runs after `timeout`.
  std::optional<int> wait_status(std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    do {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        ended_ = true;
        return status;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } while (std::chrono::steady_clock::now() < end);
    return std::nullopt;
  }
  // Exit code, or 128 + signal when killed; -1 when still running after 60 s.
  int exit_code() {
    const auto status = wait_status(std::chrono::seconds(60));
    if (!status) return -1;
    return WIFEXITED(*status) ? WEXITSTATUS(*status) : 128 + WTERMSIG(*status);
  }

 private:
  pid_t pid_ = -1;
  bool ended_ = false;
};

inline std::vector<std::string> signal_lines(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A signal mask field ("SigBlk", "SigCgt", ...) of a /proc status file; nothing if it is gone.
inline std::optional<std::uint64_t> status_mask(const std::filesystem::path& status_path,
                                                const std::string& field) {
  for (const auto& line : signal_lines(status_path))
    if (line.rfind(field + ":", 0) == 0)
      return std::stoull(line.substr(field.size() + 1), nullptr, 16);
  return std::nullopt;
}

struct ThreadMask {
  pid_t tid = 0;
  std::string name;
  std::uint64_t blocked = 0;
};

// The blocked signals of each thread of `pid`.
inline std::vector<ThreadMask> thread_masks(pid_t pid) {
  std::vector<ThreadMask> threads;
  std::error_code ec;
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    const auto blocked = status_mask(task.path() / "status", "SigBlk");
    const auto comm = signal_lines(task.path() / "comm");
    if (blocked && !comm.empty())
      threads.push_back({std::stoi(task.path().filename().string()), comm.front(), *blocked});
  }
  return threads;
}

// The threads that can take SIGINT, SIGTERM or SIGHUP.
inline std::vector<std::string> threads_open_to_stop_signals(
    const std::vector<ThreadMask>& threads) {
  std::vector<std::string> open;
  for (const auto& t : threads)
    if ((t.blocked & kStopSignals) != kStopSignals) open.push_back(t.name);
  return open;
}

// The children of process `pid` (of its main thread).
inline std::vector<pid_t> child_processes(pid_t pid) {
  const std::string pids = std::to_string(pid);
  std::ifstream in("/proc/" + pids + "/task/" + pids + "/children");
  std::vector<pid_t> children;
  for (pid_t child = 0; in >> child;) children.push_back(child);
  return children;
}

}  // namespace trainer::testing
