// The sweep's process pool: launch, watch, classify, retry, report.
#include "runner/sweep/sweep_runner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string_view>
#include <thread>

#include "ops/cpu/onednn.h"
#include "runner/checkpoint/stop_signal.h"
#include "runner/config/diagnostics.h"
#include "runner/shell_word.h"
#include "runner/sweep/trial_record.h"
#include "runner/train/progress.h"
#include "runner/train/run_lock.h"

namespace trainer::sweep {
namespace fs = std::filesystem;
namespace {

struct Running {
  std::size_t index = 0;  // into the records
  std::size_t slot = 0;   // which CPU share / GPU
};

// Each attempt's output begins with this line in the trial's log.
constexpr const char* kAttemptLine = "sweep: attempt ";
// What a run refused because another process holds its directory says.
constexpr const char* kInUse = "is in use by another trainer process";

// Why a trial's process ended (`status` from waitpid) and the error it
// printed: the first "error: ..." line of its latest attempt, else (for an
// exit, not a signal, which strikes whatever the run was doing) that
// attempt's last line.
std::string failure_of(const std::string& log_path, int status) {
  std::ifstream in(log_path);
  std::string line, last, error;
  while (std::getline(in, line)) {
    if (line.rfind(kAttemptLine, 0) == 0) {  // an earlier attempt's output ends here
      last.clear();
      error.clear();
      continue;
    }
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    last = line;
    if (error.empty() && line.find("error:") != std::string::npos)
      error = line;  // the first one names the cause
  }
  std::string text = !error.empty() ? error : WIFSIGNALED(status) ? std::string() : last;
  if (text.size() > 300) text = text.substr(0, 300) + "...";
  std::string how;
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    const char* name = sigabbrev_np(signal);
    how = "killed by signal " + std::to_string(signal) +
          (name ? " (SIG" + std::string(name) + ")" : std::string()) +
          (signal == SIGKILL ? ", as the system's out-of-memory killer does" : "");
  } else {
    how = "exit " + std::to_string(WEXITSTATUS(status));
  }
  return how + (text.empty() ? "" : ": " + text);
}

// This very binary's path: /proc/self/exe's link text, less the " (deleted)"
// it ends in once a rebuild replaced the file (which names nothing to exec).
std::string own_binary() {
  std::string self = fs::read_symlink("/proc/self/exe").string();
  if (const std::string deleted = " (deleted)";
      self.size() > deleted.size() && self.ends_with(deleted))
    self.resize(self.size() - deleted.size());
  return self;
}

// Starts the trial's log for one attempt: what runs (a command to paste), so
// each attempt's output (the log keeps them all) is told apart. Returns the
// error that stops the sweep when the log cannot be written ("" when it
// can): the trial's output would have nowhere to go.
std::string begin_attempt(const std::string& log_path, const TrialRecord& record,
                          const std::vector<std::string>& args) {
  std::ofstream log(log_path, std::ios::app);
  log << kAttemptLine << record.failures + 1 << " of " << record.trial.id << ": "
      << shell_word(own_binary());
  for (const auto& a : args) log << ' ' << shell_word(a);  // a command to paste
  log << '\n';
  log.flush();
  if (log) return "";
  return "cannot write the trial's log '" + log_path + "': " + std::strerror(errno) +
         ": make that folder writable (and give it room), or give the sweep another --out";
}

// Each trial runs this very binary: exec'd through /proc/self/exe, which
// stays it when a rebuild replaces the file.
pid_t launch(const std::vector<std::string>& args, const std::string& log_path) {
  const std::string self = own_binary();
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid != 0) return pid;
  // Child: the signal mask this process started with (trainer blocks SIGINT /
  // SIGTERM in every thread but its signal watcher, and exec keeps the mask).
  checkpoint::restore_signal_mask_before_exec();
  // Its own process group (a terminal's Ctrl-C reaches only the sweep,
  // which forwards one SIGTERM), and it stops when the sweep dies.
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(143);
  const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {  // begin_attempt wrote it a moment ago: the folder changed since
    std::fprintf(stderr, "error: cannot open the trial's log '%s': %s\n", log_path.c_str(),
                 std::strerror(errno));
    _exit(1);
  }
  dup2(fd, 1);
  dup2(fd, 2);
  std::vector<std::string> copy = args;
  std::vector<char*> argv = {const_cast<char*>(self.c_str())};
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv("/proc/self/exe", argv.data());
  std::fprintf(stderr, "error: cannot start %s: %s\n", self.c_str(), std::strerror(errno));
  _exit(127);
}

// Whether a finished trial recorded the objective; when none did, says so
// with what they did record (the sweep has nothing to rank).
bool objective_recorded(const SweepSpec& spec, const std::vector<TrialRecord>& records) {
  const TrialRecord* finished = nullptr;
  for (const auto& r : records) {
    if (r.status != "done") continue;
    if (r.objective) return true;
    if (!finished) finished = &r;
  }
  if (!finished) return true;  // nothing finished: the failures say why
  const std::string recorded = config::join(summary_metrics(finished->run_dir));
  std::fprintf(stderr,
               "error: no finished trial recorded the objective '%s', so none is ranked; %s "
               "records %s\n    set sweep.objective.metric to one of those\n",
               spec.metric.c_str(), finished->trial.id.c_str(),
               recorded.empty() ? "none of the objective metrics" : recorded.c_str());
  return false;
}

}  // namespace

int run_sweep(const SweepJob& job) {
  const fs::path dir = job.dir;
  fs::create_directories(dir / "trials");
  fs::create_directories(dir / "logs");
  const std::string state_path = (dir / "trials.json").string();

  std::vector<TrialRecord> records;
  for (const auto& t : job.trials) records.push_back({t, (dir / "trials" / t.id).string()});
  for (const auto& warning : load_trial_state(state_path, records))
    std::fprintf(stderr, "warning: %s\n", warning.c_str());
  for (auto& r : records) {
    if (read_completed_run(job.spec, r)) {
      r.status = "done";
      r.error.clear();
    } else if (r.status == "done" || r.status == "running") {
      r.status = "interrupted";  // its run directory says it did not finish
    }
  }
  // A trial runs again after a failure while it has retries left; an
  // interrupted one (a retry among them) always goes on.
  const auto may_run = [&](const TrialRecord& r) {
    return r.status == "interrupted" || r.failures <= job.spec.max_retries;
  };
  auto report = [&] {
    save_trial_state(state_path, records);
    write_trials_csv((dir / "trials.csv").string(), records);
    write_results_table((dir / "results.md").string(), records, job.spec);
  };
  report();

  std::deque<std::size_t> queue;
  for (std::size_t i = 0; i < records.size(); ++i)
    if (records[i].status != "done" && may_run(records[i])) queue.push_back(i);

  // No more slots than trials to run: each has its share of the cores.
  const std::int64_t slots = std::clamp<std::int64_t>(
      job.parallel, 1, std::max<std::int64_t>(1, static_cast<std::int64_t>(queue.size())));
  const int cores = cpu::usable_cpus();
  const std::int64_t threads_each =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(cores) / slots);
  std::vector<bool> slot_busy(static_cast<std::size_t>(slots), false);
  std::map<pid_t, Running> running;
  std::set<std::size_t> waiting;           // trials told to wait for another process
  std::vector<std::string> config_errors;  // trials that failed on one: not retried
  checkpoint::StopSignals stop_signals;
  bool forwarded = false;
  std::printf("sweep: %zu trials, %zu to run, %lld at once; results in %s\n", records.size(),
              queue.size(), static_cast<long long>(slots), (dir / "results.md").c_str());
  std::fflush(stdout);
  // The time left: the trials to go at the pace of those this sweep ended.
  const auto started = std::chrono::steady_clock::now();
  std::int64_t ended = 0;

  // An error that ends the sweep: the trials running are stopped (they
  // checkpoint) and recorded first, as on a signal.
  std::string fatal;
  while (!queue.empty() || !running.empty()) {
    const int stop = checkpoint::stop_requested();
    while (stop == 0 && fatal.empty() && !queue.empty() &&
           static_cast<std::int64_t>(running.size()) < slots) {
      // The first queued trial whose run directory no other process holds.
      const auto free_one = std::find_if(queue.begin(), queue.end(), [&](std::size_t i) {
        const std::string holder = train::held_by_another(records[i].run_dir, "run directory");
        if (!holder.empty() && waiting.insert(i).second)
          std::printf("sweep: %s waits: %s\n", records[i].trial.id.c_str(), holder.c_str());
        return holder.empty();
      });
      if (free_one == queue.end()) break;  // each waits for its holder to end
      const std::size_t index = *free_one;
      queue.erase(free_one);
      std::size_t slot = 0;
      while (slot_busy[slot]) ++slot;
      TrialRecord& r = records[index];
      std::vector<std::string> args;
      if (fs::exists(fs::path(r.run_dir) / "config.sha256")) {
        args = {"run", "--resume", r.run_dir};
      } else {
        // What an attempt left before it wrote its config holds no run; a
        // new run needs the directory empty.
        std::error_code ec;
        fs::remove_all(r.run_dir, ec);
        const TrialLaunch& launch_as = job.launches[index];
        args = {"run", launch_as.config_path};
        if (!job.gpus.empty()) {
          if (launch_as.sweep_sets_gpu)
            args.push_back("devices.gpus=[" + std::to_string(job.gpus[slot % job.gpus.size()]) +
                           "]");
        } else if (slots > 1 && launch_as.sweep_sets_threads) {
          args.push_back("backend.threads=" + std::to_string(threads_each));
        }
        args.insert(args.end(), {"--out", r.run_dir});
      }
      const std::string log_path = (dir / "logs" / (r.trial.id + ".log")).string();
      fatal = begin_attempt(log_path, r, args);
      if (!fatal.empty()) break;  // this trial stays as it was
      const pid_t pid = launch(args, log_path);
      if (pid < 0) {
        r.status = "failed";
        ++r.failures;
        r.error = "cannot start a process";
        report();
        continue;
      }
      slot_busy[slot] = true;
      running[pid] = {index, slot};
      r.status = "running";
      std::printf("sweep: %s started (%s)\n", r.trial.id.c_str(),
                  args[1] == "--resume" ? "resumed" : "new");
      std::fflush(stdout);
      report();
    }
    if ((stop != 0 || !fatal.empty()) && !forwarded) {
      for (const auto& [pid, run] : running) kill(pid, SIGTERM);
      forwarded = true;
      queue.clear();
    }
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    auto it = running.find(pid);
    if (it == running.end()) continue;
    const Running run = it->second;
    running.erase(it);
    slot_busy[run.slot] = false;
    TrialRecord& r = records[run.index];
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    const std::string log_path = (dir / "logs" / (r.trial.id + ".log")).string();
    if (code == 0 && read_completed_run(job.spec, r)) {
      r.status = "done";
      r.error.clear();
    } else if (checkpoint::stopped_by_signal_code(code) &&
               (forwarded || run_was_interrupted(r.run_dir))) {
      // Stopped by the sweep's signal, or by one sent to the trial itself:
      // either way it checkpointed, and a repeated command resumes it.
      r.status = "interrupted";
      r.error.clear();  // an earlier attempt's, not why this one stopped
    } else if (code == 2 && failure_of(log_path, status).find(kInUse) != std::string::npos) {
      // Not the trial's failure: another process (of an earlier sweep that
      // was stopped, finishing its step) held the run directory. It waits.
      r.status = "interrupted";
      if (!forwarded && waiting.insert(run.index).second)
        std::printf("sweep: %s waits: its run directory is in use by another trainer process\n",
                    r.trial.id.c_str());
      if (!forwarded) queue.push_back(run.index);
      std::fflush(stdout);
      report();
      continue;
    } else {
      ++r.failures;
      r.error = failure_of(log_path, status);
      r.status = "failed";
      // Exit 2, a config or usage error, comes again on every try.
      if (code == 2)
        config_errors.push_back(r.trial.id);
      else if (may_run(r) && !forwarded)
        queue.push_back(run.index);
    }
    ++ended;
    const auto to_go = static_cast<std::int64_t>(queue.size() + running.size());
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::printf("sweep: %s %s%s%s%s\n", r.trial.id.c_str(), r.status.c_str(),
                r.error.empty() ? "" : ": ", r.error.c_str(),
                to_go > 0 && !forwarded
                    ? (" (" + std::to_string(to_go) + " to go, eta " +
                       train::short_duration(train::time_left(elapsed, ended, to_go)) + ")")
                          .c_str()
                    : "");
    std::fflush(stdout);
    report();
  }
  report();
  if (!fatal.empty()) {
    std::fprintf(stderr, "error: %s\n", fatal.c_str());
    return 1;
  }
  if (const int stop = checkpoint::stop_requested(); stop != 0) return 128 + stop;
  const bool ranked = objective_recorded(job.spec, records);
  if (const TrialRecord* best = best_trial(records, job.spec))
    std::printf("sweep: best %s; run directory %s\n", best_trial_text(*best, job.spec).c_str(),
                best->run_dir.c_str());
  const auto failed_on_config = [&](const TrialRecord& r) {
    return std::find(config_errors.begin(), config_errors.end(), r.trial.id) != config_errors.end();
  };
  if (!config_errors.empty()) {
    // A repeated command runs them again only with retries left.
    std::int64_t failures = 0;
    for (const auto& r : records)
      if (failed_on_config(r)) failures = std::max(failures, r.failures);
    std::fprintf(stderr,
                 "sweep: %s failed on a config error (exit 2; the error is in results.md), which "
                 "a retry repeats: not retried\n    fix it, then repeat the command%s\n",
                 config::join(config_errors).c_str(),
                 failures > job.spec.max_retries
                     ? (" with sweep.max_retries=" + std::to_string(failures)).c_str()
                     : "");
  }
  std::vector<std::string> failed_for_good;
  std::int64_t most_failures = 0;
  for (const auto& r : records) {
    if (r.status != "failed" || may_run(r) || failed_on_config(r)) continue;
    failed_for_good.push_back(r.trial.id);
    most_failures = std::max(most_failures, r.failures);
  }
  const std::string out_of_retries = config::join(failed_for_good);
  if (!out_of_retries.empty())  // what a repeated command will not run again, and how to
    std::fprintf(stderr,
                 "sweep: %s failed with no retries left (sweep.max_retries: %lld; the errors are "
                 "in results.md)\n    to try again: repeat the command with "
                 "sweep.max_retries=%lld\n",
                 out_of_retries.c_str(), static_cast<long long>(job.spec.max_retries),
                 static_cast<long long>(most_failures));
  std::vector<std::string> interrupted;
  for (const auto& r : records)
    if (r.status == "interrupted") interrupted.push_back(r.trial.id);
  if (!interrupted.empty())
    std::fprintf(stderr,
                 "sweep: %s stopped on a signal of %s own: repeat the command to resume %s\n",
                 config::join(interrupted).c_str(), interrupted.size() == 1 ? "its" : "their",
                 interrupted.size() == 1 ? "it" : "them");
  for (const auto& r : records)
    if (r.status != "done") return 1;
  return ranked ? 0 : 1;
}

}  // namespace trainer::sweep
