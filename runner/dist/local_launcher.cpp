// Starting `trainer run` again as the ranks of an mpirun job, and waiting for it.
#include "runner/dist/local_launcher.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "runner/checkpoint/stop_signal.h"
#include "runner/config/diagnostics.h"
#include "runner/dist/launch_env.h"
#include "runner/dist/output_forwarder.h"
#include "runner/train/progress.h"
#include "runner/train/run_records.h"
#include "runner/train/session.h"

namespace trainer::dist {
namespace {

std::vector<std::string> own_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  std::string current;
  for (char ch : raw) {
    if (ch == '\0') {
      args.push_back(current);
      current.clear();
    } else {
      current += ch;
    }
  }
  if (args.empty())
    throw std::runtime_error("cannot read this process's command line from /proc/self/cmdline");
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) args[0] = std::string(exe, static_cast<std::size_t>(n));
  return args;
}

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string candidate = dirs.substr(start, end - start) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return {};
}

// mpirun as a child with the signal mask this process started with, in a
// process group of its own (the terminal's Ctrl-C reaches this process alone,
// which sends it on to the ranks), its output through `output`; it gets
// SIGTERM (and stops the ranks) if this process dies first.
pid_t start_mpirun(std::vector<std::string>& cmd, OutputForwarder& output) {
  std::vector<char*> argv;
  for (auto& a : cmd) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("cannot start " + cmd[0] + ": " + std::strerror(errno));
  if (pid > 0) {
    output.start();
    return pid;
  }
  output.attach_child();
  checkpoint::restore_signal_mask_before_exec();
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(143);
  execv(argv[0], argv.data());
  std::fprintf(stderr, "error: cannot start %s: %s\n", argv[0], std::strerror(errno));
  _exit(127);
}

// The processes mpirun started (the local ranks).
std::vector<pid_t> children_of(pid_t parent) {
  std::ifstream in("/proc/" + std::to_string(parent) + "/task/" + std::to_string(parent) +
                   "/children");
  std::vector<pid_t> pids;
  for (pid_t pid = 0; in >> pid;) pids.push_back(pid);
  return pids;
}

// A stop signal goes to the ranks themselves: they finish their step,
// checkpoint and exit 128 + signal, and mpirun ends with them. mpirun's own
// handling (SIGCONT, then SIGTERM 1 s later, SIGKILL 1 s after that) stops
// forwarding their output first, so a rank logging fast blocks on a full
// pipe and is killed before its checkpoint. mpirun gets it only when it has
// not started the ranks yet.
void send_to_ranks(pid_t mpirun, int sig) {
  const std::vector<pid_t> ranks = children_of(mpirun);
  if (ranks.empty()) kill(mpirun, sig);
  for (pid_t rank : ranks) kill(rank, sig);
}

// How mpirun ended: its exit code, or 128 + the signal that killed mpirun
// itself (`mpirun_killed`).
struct MpirunEnd {
  int code = 0;
  bool mpirun_killed = false;
};

// Why the job ended: mpirun itself killed, or from its exit code (128 + N
// when a rank was killed by signal N: mpirun's own lines above name the rank).
// `rank_error`: the first error line a rank reported ("[rank 1] error: ..."),
// empty when none did; `dir`: the run directory, to resume.
std::string job_failure(const MpirunEnd& end, const std::string& rank_error,
                        const std::string& dir) {
  const int code = end.code;
  const std::string unrecorded = " and the job ended before the root rank could record it";
  const std::string resume =
      "; once that is put right, trainer run --resume " + dir + " goes on from the last checkpoint";
  if (end.mpirun_killed)
    return "mpirun, which ran the job's ranks, was killed by signal " + std::to_string(code - 128) +
           " (" + strsignal(code - 128) + ")" + unrecorded + "; the ranks stopped with it" + resume;
  if (code > 128 && code < 128 + NSIG) {
    const int sig = code - 128;
    return "a rank of the job was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) +
           ")" + (sig == SIGKILL ? ": the system's out-of-memory killer, or kill -9," : "") +
           unrecorded + "; mpirun's message above names the rank" + resume;
  }
  return "a rank of the job failed (mpirun exit code " + std::to_string(code) + ")" + unrecorded +
         (rank_error.empty()
              ? "; the rank's error is in the console output, after its [rank N] prefix"
              : ": " + rank_error) +
         resume;
}

// The file the root rank names its run directory in (kRunDirNoteVariable),
// removed with this. A job that failed while summary.json holds nothing
// written since it started (a rank that failed alone: mpirun ends the root
// before it records the failure) is recorded as failed here.
class RunDirNote {
 public:
  RunDirNote()
      : path_((std::filesystem::temp_directory_path() /
               ("trainer-run-dir-" + std::to_string(getpid())))
                  .string()),
        started_(std::filesystem::file_time_type::clock::now()) {
    std::filesystem::remove(path_);
    std::filesystem::remove(path_ + train::kRankErrorsSuffix);
    setenv(train::kRunDirNoteVariable, path_.c_str(), 1);
  }
  ~RunDirNote() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
    std::filesystem::remove(path_ + train::kRankErrorsSuffix, ec);
  }
  RunDirNote(const RunDirNote&) = delete;
  RunDirNote& operator=(const RunDirNote&) = delete;

  // Whether the root recorded this job as stopped by a signal: its
  // summary.json, written since the launch, says "interrupted" (mpirun,
  // signalled too, exits 1 whatever the ranks did).
  bool root_recorded_stop() const {
    const std::string dir = run_dir();
    if (dir.empty() || !written_since_launch(std::filesystem::path(dir) / "summary.json"))
      return false;
    const nlohmann::json summary = nlohmann::json::parse(
        std::ifstream(std::filesystem::path(dir) / "summary.json"), nullptr, false);
    return summary.is_object() && summary.contains("status") && summary["status"] == "interrupted";
  }

  void record_job_failure(const MpirunEnd& end) const {
    const std::string dir = run_dir();
    if (dir.empty()) return;  // the root failed before it had a run directory: it said why
    const std::filesystem::path summary = std::filesystem::path(dir) / "summary.json";
    std::error_code ec;
    if (written_since_launch(summary) && !says_running(summary)) return;  // the root recorded it
    // An earlier session's record is kept inside the new one (a damaged one
    // parses as discarded, and is not); a resumed session's "running" holds
    // the one before it.
    nlohmann::json earlier =
        nlohmann::json::parse(std::ifstream(summary), nullptr, /*allow_exceptions=*/false);
    if (earlier.is_object() && earlier.contains("status") && earlier["status"] == "running")
      earlier = earlier.value("earlier_summary", nlohmann::json());
    std::filesystem::remove(summary, ec);
    const std::string error = job_failure(end, first_rank_error(), dir);
    train::record_failure(dir, error, earlier.is_object() ? earlier : nlohmann::json());
    train::log_failure(dir, error);
    std::fprintf(stderr, "error: %s (recorded in %s)\n", error.c_str(), summary.c_str());
  }

 private:
  // Whether summary.json says a session trains (a resume's, from its start):
  // not how it ended.
  static bool says_running(const std::filesystem::path& summary) {
    const nlohmann::json record =
        nlohmann::json::parse(std::ifstream(summary), nullptr, /*allow_exceptions=*/false);
    return record.is_object() && record.contains("status") && record["status"] == "running";
  }
  // The first error line a rank reported (error_report.cpp), or "".
  std::string first_rank_error() const {
    std::ifstream in(path_ + train::kRankErrorsSuffix);
    std::string line;
    std::getline(in, line);
    return line;
  }
  // The run directory the root named (empty before it had one).
  std::string run_dir() const {
    std::ifstream in(path_);
    std::string dir;
    std::getline(in, dir);
    return dir;
  }
  bool written_since_launch(const std::filesystem::path& file) const {
    std::error_code ec;
    return std::filesystem::exists(file, ec) &&
           std::filesystem::last_write_time(file, ec) >= started_ && !ec;
  }

  std::string path_;
  std::filesystem::file_time_type started_;
};

// How mpirun ended, while a SIGINT / SIGTERM sent to this process goes on to
// the ranks (to mpirun while it has none).
MpirunEnd wait_for_mpirun(pid_t mpirun) {
  const checkpoint::ForwardStopSignals forward([mpirun](int sig) { send_to_ranks(mpirun, sig); });
  int status = 0;
  while (waitpid(mpirun, &status, 0) < 0)
    if (errno != EINTR)
      throw std::runtime_error(std::string("waiting for mpirun: ") + std::strerror(errno));
  MpirunEnd end;
  end.mpirun_killed = WIFSIGNALED(status);
  end.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return end;
}

}  // namespace

int requested_ranks(const config::Config& c) {
  if (!c.devices.on_cpu()) return static_cast<int>(c.devices.gpus.size());
  return static_cast<int>(std::max<std::int64_t>(1, c.devices.world_size));
}

std::vector<std::string> mpirun_command(int ranks, const std::vector<std::string>& argv,
                                        bool as_root) {
  std::vector<std::string> cmd = {"mpirun", "-np", std::to_string(ranks)};
  if (as_root) cmd.push_back("--allow-run-as-root");
  // Whether the launcher's stdout is a terminal (the ranks' is mpirun's pty),
  // and where the root says which run directory it trains in.
  cmd.insert(cmd.end(), {"-x", train::kStdoutTerminalVariable, "-x", train::kRunDirNoteVariable});
  // Ranks may outnumber cores (CI); threads are split between ranks, not pinned.
  // mpirun runs in a process group of its own, so it must not read the terminal.
  for (const char* flag : {"--oversubscribe", "--bind-to", "none", "--stdin", "none"})
    cmd.emplace_back(flag);
  cmd.insert(cmd.end(), argv.begin(), argv.end());
  return cmd;
}

std::optional<int> launch_local_ranks(const config::Config& config) {
  const int ranks = requested_ranks(config);
  if (ranks <= 1 || detect_launch_env()) return std::nullopt;
  config::Diagnostics diags;
  train::plan_batches(config,
                      diags);  // report a batch that does not divide once, not once per rank
  diags.throw_if_any();
  const std::string mpirun = find_on_path("mpirun");
  if (mpirun.empty())
    throw std::runtime_error(
        "the config asks for " + std::to_string(ranks) +
        " data-parallel ranks, which trainer starts with mpirun, but mpirun is not on PATH: "
        "install OpenMPI (openmpi-bin), or start the ranks yourself with mpirun or srun");
  setenv(train::kStdoutTerminalVariable, isatty(STDOUT_FILENO) == 1 ? "1" : "0", 1);
  std::vector<std::string> cmd = mpirun_command(ranks, own_command_line(), geteuid() == 0);
  cmd[0] = mpirun;
  std::fprintf(stderr, "starting %d ranks:", ranks);
  for (const auto& a : cmd) std::fprintf(stderr, " %s", a.c_str());
  std::fprintf(stderr, "\n");
  std::fflush(stdout);
  std::fflush(stderr);
  const RunDirNote note;
  OutputForwarder output;
  const MpirunEnd end = wait_for_mpirun(start_mpirun(cmd, output));
  output.finish(std::chrono::seconds(2));
  const int stop = checkpoint::stop_requested();
  // Ended by the stop sent on to the ranks (or to mpirun before they ran),
  // or by one that reached mpirun too (a signal to the process group, as a
  // container stop sends it), which then exits 1 once the ranks stopped.
  const bool ended_by_stop =
      stop != 0 && (end.code == 128 + stop || (end.code != 0 && note.root_recorded_stop()));
  if (end.code != 0 && !ended_by_stop) note.record_job_failure(end);
  // mpirun reports the ranks' 128 + N as a failure of the job.
  if (ended_by_stop && !end.mpirun_killed)
    std::fprintf(stderr,
                 "note: the ranks stopped on signal %d, as asked: mpirun's report above of a "
                 "non-zero exit code is that stop, not a failure\n",
                 stop);
  return ended_by_stop ? 128 + stop : end.code;
}

}  // namespace trainer::dist
