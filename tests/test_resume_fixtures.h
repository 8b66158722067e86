// Helpers for the checkpoint, resume and sweep tests: a temporary directory,
// a small fast experiment (synthetic 8x8 inputs, 4 classes), and running the
// `trainer` executable as a child process whose pid the test can signal.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_command.h"
#include "temp_dir.h"

namespace trainer::testing {

// A deterministic experiment that trains in well under a second.
inline std::string tiny_experiment(int train_size = 512) {
  return "name: tiny\n"
         "seed: 3\n"
         "deterministic: true\n"
         "data:\n"
         "  train: {type: synthetic, shape: [1, 8, 8], classes: 4, size: " +
         std::to_string(train_size) +
         "}\n"
         "  eval: {type: synthetic, shape: [1, 8, 8], classes: 4, size: 128}\n"
         "  workers: 2\n"
         "model:\n"
         "  layers:\n"
         "    - {type: flatten}\n"
         "    - {type: linear, name: fc1, out_features: 32}\n"
         "    - {type: relu}\n"
         "    - {type: dropout, p: 0.2}\n"
         "    - {type: linear, name: fc2, out_features: 4}\n"
         "  loss: {type: cross_entropy}\n"
         "optimizer: {type: adam, lr: 0.01}\n"
         "schedule: {type: cosine}\n"
         "train: {epochs: 3, batch_size: 32, log_every: 5}\n"
         "checkpoint: {every_steps: 7, keep_last: 3}\n"
         "backend: {threads: 1}\n";
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The records of a run directory's metrics.jsonl, of one split ("train",
// "eval") or all of them ("").
inline std::vector<nlohmann::json> metrics_records(const std::string& run_dir,
                                                   const std::string& split = "") {
  std::vector<nlohmann::json> records;
  for (const auto& line : read_lines(run_dir + "/metrics.jsonl")) {
    auto record = nlohmann::json::parse(line);
    if (split.empty() || record["split"] == split) records.push_back(std::move(record));
  }
  return records;
}

// The eval records of a run directory's metrics.jsonl, by step.
inline std::map<std::int64_t, nlohmann::json> eval_records(const std::string& run_dir) {
  std::map<std::int64_t, nlohmann::json> records;
  for (auto& r : metrics_records(run_dir, "eval")) records[r["step"].get<std::int64_t>()] = r;
  return records;
}

inline nlohmann::json summary_of(const std::string& run_dir) {
  return nlohmann::json::parse(read_text(run_dir + "/summary.json"));
}

// The optimizer steps a run directory's summary.json reports.
inline std::int64_t steps_of(const std::string& run_dir) {
  return summary_of(run_dir)["steps"].get<std::int64_t>();
}

// A `trainer` child process; output (stdout and stderr) goes to `log_path`.
class TrainerProcess {
 public:
  TrainerProcess(const std::vector<std::string>& args, const std::string& log_path) {
    pid_ = fork();
    if (pid_ == 0) {
      // Tests stop it with SIGINT, which a trainer ignored at its start keeps
      // ignoring (as a shell script's background job): not so here, whatever
      // this test process was started with.
      ::signal(SIGINT, SIG_DFL);
      const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      std::vector<char*> argv;
      std::string binary = trainer_binary();
      argv.push_back(binary.data());
      std::vector<std::string> copy = args;
      for (auto& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(binary.c_str(), argv.data());
      _exit(127);
    }
  }
  ~TrainerProcess() {
    if (pid_ > 0 && !waited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  TrainerProcess(const TrainerProcess&) = delete;
  TrainerProcess& operator=(const TrainerProcess&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int sig) const { kill(pid_, sig); }
  // Exit code, or 128 + signal when killed.
  int wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    waited_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
  bool waited_ = false;
};

// `trainer run CONFIG --out OUT OVERRIDES...` as arguments.
inline std::vector<std::string> run_args(const std::string& config, const std::string& out,
                                         const std::vector<std::string>& overrides = {}) {
  std::vector<std::string> args = {"run", config, "--out", out};
  args.insert(args.end(), overrides.begin(), overrides.end());
  return args;
}

inline int run_to_end(const std::vector<std::string>& args, const std::string& log_path) {
  TrainerProcess p(args, log_path);
  return p.wait();
}

// Waits until `path` has at least `lines` lines (or the timeout passes).
inline bool wait_for_lines(const std::string& path, std::size_t lines,
                           std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (read_lines(path).size() >= lines) return true;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return false;
}

// Waits until `path` holds `text` (or the timeout passes).
inline bool wait_for_text(const std::string& path, const std::string& text,
                          std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (read_text(path).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

}  // namespace trainer::testing
