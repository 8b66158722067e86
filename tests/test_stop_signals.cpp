// labels: cpu
// SIGINT / SIGTERM / SIGHUP never run a handler on a thread that executes
// kernels (oneDNN 2.x JIT kernels point rsp into the heap: a signal frame
// there corrupts it): while a run trains, every thread but the one signal
// watcher blocks them and no handler is installed, and SIGTERM still
// finishes the step, checkpoints and exits 143 with a run directory that
// resumes; SIGHUP (a closed terminal) likewise, with 129, unless the run
// started with it ignored (`nohup`), and SIGINT unless it started with that
// ignored (a shell script's background job). Outside training they act as the
// process's disposition says: `trainer time` dies of each as if unblocked,
// and an inherited ignored SIGINT stays ignored. A console that goes away
// (`| head -1`) does not end a run: it trains to the end and records it; nor
// does a file size limit (`ulimit -f`): one a checkpoint would meet stops the
// run before its first step, and one a record meets is an error
// the run records, and the run resumes. At a terminal the stop is answered
// at once.
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_command.h"
#include "test_resume_fixtures.h"
#include "test_signal_fixtures.h"

using namespace trainer::testing;
namespace fs = std::filesystem;

TEST_CASE("while a run trains, only the signal watcher thread takes the stop signals") {
  TempDir tmp("stop-signal-threads");
  write_text(tmp / "tiny.yaml", tiny_experiment(4096));
  TrainerChild run({"run", tmp / "tiny.yaml", "--out", tmp / "run", "train.epochs=500",
                    "backend.threads=2", "data.workers=2"},
                   tmp / "run.log");
  REQUIRE(wait_for_lines(tmp / "run/metrics.jsonl", 1, std::chrono::seconds(60)));
  const std::vector<ThreadMask> threads = thread_masks(run.pid());
  INFO(read_text(tmp / "run.log"));
  REQUIRE(threads.size() >= 3);  // the main thread, a kernel worker, the watcher
  CHECK(threads_open_to_stop_signals(threads) == std::vector<std::string>{"stop-signals"});
  // The main thread blocks those three and no other (SIGPIPE, SIGXFSZ are ignored).
  for (const auto& t : threads)
    if (t.tid == run.pid()) CHECK(t.blocked == kStopSignals);
  // No handler for them: none can run on a thread inside a kernel.
  const auto caught = status_mask("/proc/" + std::to_string(run.pid()) + "/status", "SigCgt");
  REQUIRE(caught);
  CHECK((*caught & kStopSignals) == 0);

  run.signal_it(SIGTERM);
  REQUIRE(run.exit_code() == 143);
  const nlohmann::json stopped = summary_of(tmp / "run");
  CHECK(stopped["status"] == "interrupted");
  CHECK(stopped["signal"] == SIGTERM);
  const std::int64_t steps = stopped["steps"].get<std::int64_t>();
  TrainerChild resumed(
      {"run", "--resume", tmp / "run", "train.max_steps=" + std::to_string(steps + 2)},
      tmp / "resume.log");
  INFO(read_text(tmp / "resume.log"));
  CHECK(resumed.exit_code() == 0);
  CHECK(summary_of(tmp / "run")["steps"] == steps + 2);
}

TEST_CASE("a stop delivered twice at once (a process group's kill, forwarded) still checkpoints") {
  TempDir tmp("stop-signal-twice");
  write_text(tmp / "tiny.yaml", tiny_experiment(4096));
  // Weights large enough (34 MB, three times that with Adam's state) that
  // the stop's checkpoint takes longer than the 50 ms between the signals.
  TrainerChild run({"run", tmp / "tiny.yaml", "--out", tmp / "run", "train.epochs=500",
                    "data.train.shape=[1,64,64]", "data.eval.shape=[1,64,64]",
                    "model.layers[1].out_features=2048"},
                   tmp / "run.log");
  REQUIRE(wait_for_lines(tmp / "run/metrics.jsonl", 1, std::chrono::seconds(60)));
  // As `kill -TERM -PGID` of `timeout trainer run ...`: the trainer's own
  // signal and the one `timeout` sends on, moments apart.
  run.signal_it(SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  run.signal_it(SIGTERM);
  REQUIRE(run.exit_code() == 143);
  INFO(read_text(tmp / "run.log"));
  const nlohmann::json stopped = summary_of(tmp / "run");
  CHECK(stopped["status"] == "interrupted");
  CHECK(fs::exists(tmp / "run/checkpoints/last/model.safetensors"));
}

namespace {

// What the terminal `master` shows within `timeout` (until the child closes it).
std::string read_terminal(int master, std::chrono::milliseconds timeout) {
  std::string text;
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    pollfd fd{master, POLLIN, 0};
    if (poll(&fd, 1, 50) <= 0) continue;
    char buffer[4096];
    const ssize_t got = read(master, buffer, sizeof buffer);
    if (got <= 0) break;  // the child closed its side
    text.append(buffer, static_cast<std::size_t>(got));
  }
  return text;
}

}  // namespace

TEST_CASE("at a terminal a stop is answered at once, while a long evaluation goes on") {
  TempDir tmp("stop-signal-terminal");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  const int master = posix_openpt(O_RDWR | O_NOCTTY);
  REQUIRE(master >= 0);
  REQUIRE(grantpt(master) == 0);
  REQUIRE(unlockpt(master) == 0);
  const std::string terminal = ptsname(master);
  const std::string binary = TRAINER_BINARY, config = tmp / "tiny.yaml", out = tmp / "run";
  // Made before the fork: the child of a threaded process calls only what
  // is safe there.
  std::vector<std::string> environment = {"TRAINER_INJECT_EVAL_DELAY=5"};
  for (char** e = environ; *e; ++e)
    if (std::string(*e).rfind("TRAINER_INJECT_EVAL_DELAY=", 0) != 0) environment.push_back(*e);
  std::vector<char*> envp;
  for (auto& e : environment) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = {binary, "run", config, "--out", out};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {  // the run, its output on the terminal, each evaluation batch 5 s long
    setsid();
    const int fd = open(terminal.c_str(), O_RDWR);
    dup2(fd, 1);
    dup2(fd, 2);
    signal(SIGINT, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  std::string shown;
  const auto evaluating = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (shown.find("TRAINER_INJECT_EVAL_DELAY") == std::string::npos &&
         std::chrono::steady_clock::now() < evaluating)
    shown += read_terminal(master, std::chrono::milliseconds(100));
  REQUIRE(shown.find("TRAINER_INJECT_EVAL_DELAY") != std::string::npos);
  kill(pid, SIGINT);
  // Answered within 4 s, though the evaluation batch takes five.
  const std::string answer = read_terminal(master, std::chrono::seconds(4));
  INFO(shown + answer);
  CHECK(answer.find("stopping at the next safe point (Ctrl-C again, a second or more later, quits "
                    "at once)") != std::string::npos);
  int status = 0;
  const std::string rest = read_terminal(master, std::chrono::seconds(30));
  REQUIRE(waitpid(pid, &status, 0) == pid);
  close(master);
  INFO(rest);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 130);
}

TEST_CASE("outside training the stop signals do what the process's disposition says") {
  TempDir tmp("stop-signal-outside");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  const std::vector<std::string> timing = {"time", tmp / "tiny.yaml", "--steps", "1000000",
                                           "model.layers[1].out_features=512"};
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    TrainerChild timed(timing, tmp / "time.log");
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // compiled, timing steps
    timed.signal_it(sig);
    const auto status = timed.wait_status(std::chrono::seconds(10));
    INFO("signal " << sig << ": " << read_text(tmp / "time.log"));
    REQUIRE(status);
    CHECK(WIFSIGNALED(*status));
    CHECK(WTERMSIG(*status) == sig);
  }
  // Started with SIGINT ignored (`trainer time ... &` in a script): ignored still.
  TrainerChild timed(timing, tmp / "time.log", {.ignored_signal = SIGINT});
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  timed.signal_it(SIGINT);
  CHECK_FALSE(timed.wait_status(std::chrono::milliseconds(500)));
  timed.signal_it(SIGTERM);
  const auto status = timed.wait_status(std::chrono::seconds(10));
  REQUIRE(status);
  CHECK(WTERMSIG(*status) == SIGTERM);
}

TEST_CASE("a run whose console goes away trains to the end and records it") {
  TempDir tmp("stop-signal-pipe");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  // `head` exits after the first line: every later write of the run's
  // progress meets a closed pipe (it used to die of SIGPIPE, exit 141, with
  // no summary.json and no checkpoint).
  const auto r = run_command("sh -c '" + trainer_binary() + " run " + (tmp / "tiny.yaml") +
                             " --out " + (tmp / "run") + " | head -1'");
  CHECK(r.code == 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!fs::exists(tmp / "run/summary.json") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  REQUIRE(fs::exists(tmp / "run/summary.json"));
  CHECK(summary_of(tmp / "run")["status"] == "complete");
  CHECK(steps_of(tmp / "run") == 48);
}

TEST_CASE(
    "a closed terminal (SIGHUP) stops a run with a checkpoint; under nohup it is ignored, "
    "and so is a SIGINT ignored at the start") {
  TempDir tmp("stop-signal-hangup");
  write_text(tmp / "tiny.yaml", tiny_experiment(4096));
  TrainerChild run({"run", tmp / "tiny.yaml", "--out", tmp / "run", "train.epochs=500"},
                   tmp / "run.log");
  REQUIRE(wait_for_lines(tmp / "run/metrics.jsonl", 1, std::chrono::seconds(60)));
  run.signal_it(SIGHUP);
  REQUIRE(run.exit_code() == 128 + SIGHUP);
  INFO(read_text(tmp / "run.log"));
  const nlohmann::json stopped = summary_of(tmp / "run");
  CHECK(stopped["status"] == "interrupted");
  CHECK(stopped["signal"] == SIGHUP);
  CHECK(fs::exists(tmp / "run/checkpoints/last/model.safetensors"));

  // Started with `sig` ignored, a run keeps ignoring it while it trains:
  // SIGHUP under `nohup`, and SIGINT in a shell script's background job (a
  // Ctrl-C meant for the script does not stop the run).
  const auto keeps_ignoring = [&](int sig, const std::string& name) {
    INFO(name);
    TrainerChild ignoring({"run", tmp / "tiny.yaml", "--out", tmp / name, "train.epochs=500"},
                          tmp / (name + ".log"), {.ignored_signal = sig});
    REQUIRE(wait_for_lines(tmp / (name + "/metrics.jsonl"), 1, std::chrono::seconds(60)));
    ignoring.signal_it(sig);
    CHECK_FALSE(ignoring.wait_status(std::chrono::milliseconds(1500)));
    ignoring.signal_it(SIGTERM);
    CHECK(ignoring.exit_code() == 143);
  };
  keeps_ignoring(SIGHUP, "nohup");
  keeps_ignoring(SIGINT, "background");
}

TEST_CASE("a file size limit a checkpoint would meet stops the run before its first step") {
  TempDir tmp("stop-signal-file-size");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  // fc1 of 64 x 4096 floats: a 1 MiB weight, 2 MiB more of Adam's moments,
  // against a limit of 512 KiB. It used to train, then die of SIGXFSZ at the
  // first checkpoint, unrecorded; then (the signal ignored) fail there.
  const std::vector<std::string> args = {"run", tmp / "tiny.yaml", "--out", tmp / "run",
                                         "model.layers[1].out_features=4096"};
  TrainerChild limited(args, tmp / "run.log", {.file_size_limit = 512 * 1024});
  const int code = limited.exit_code();
  const std::string log = read_text(tmp / "run.log");
  INFO(log);
  CHECK(code == 1);
  CHECK_THAT(log, Catch::Contains("a checkpoint of this model writes a file of ") &&
                      Catch::Contains(", over this process's file size limit of 0.5 MiB (ulimit "
                                      "-f): the run would train and then fail"));
  CHECK_FALSE(fs::exists(tmp / "run/metrics.jsonl"));  // no step trained
  // With the limit raised, the run goes on in its directory.
  TrainerChild resumed({"run", "--resume", tmp / "run"}, tmp / "resume.log");
  INFO(read_text(tmp / "resume.log"));
  CHECK(resumed.exit_code() == 0);
  CHECK(summary_of(tmp / "run")["status"] == "complete");
}

TEST_CASE("an evaluation whose record a file size limit cuts is made once again on resume") {
  TempDir tmp("stop-signal-file-size-eval");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  // No periodic checkpoints; the events file meets the 24 KiB limit at an
  // evaluation's record, after metrics.jsonl took it. The resume used to
  // find that record counted and write it a second time.
  const std::vector<std::string> settings = {"train.epochs=60", "checkpoint.every_steps=0",
                                             "checkpoint.every_epochs=0",
                                             "model.layers[1].out_features=2"};
  std::vector<std::string> limited_args = {"run", tmp / "tiny.yaml", "--out", tmp / "run"};
  limited_args.insert(limited_args.end(), settings.begin(), settings.end());
  TrainerChild limited(limited_args, tmp / "run.log", {.file_size_limit = 24 * 1024});
  REQUIRE(limited.exit_code() == 1);
  INFO(read_text(tmp / "run.log"));
  REQUIRE(read_text(tmp / "run.log").find("File too large") != std::string::npos);
  TrainerChild resumed({"run", "--resume", tmp / "run"}, tmp / "resume.log");
  REQUIRE(resumed.exit_code() == 0);
  std::vector<std::string> straight_args = {"run", tmp / "tiny.yaml", "--out", tmp / "straight"};
  straight_args.insert(straight_args.end(), settings.begin(), settings.end());
  TrainerChild straight(straight_args, tmp / "straight.log");
  REQUIRE(straight.exit_code() == 0);
  CHECK(read_text(tmp / "run/metrics.jsonl") == read_text(tmp / "straight/metrics.jsonl"));
}

TEST_CASE("a stop that comes while a checkpoint is written stops there, with no step more") {
  TempDir tmp("stop-signal-during-checkpoint");
  write_text(tmp / "tiny.yaml", tiny_experiment(4096));
  // Every checkpoint (every 7 steps) waits 2 s before it is written, as on
  // slow storage: the stop comes while one is being written. It used to
  // train one step more and write a second checkpoint for it.
  setenv("TRAINER_INJECT_CHECKPOINT_DELAY", "2", 1);
  TrainerChild run({"run", tmp / "tiny.yaml", "--out", tmp / "run", "train.epochs=500"},
                   tmp / "run.log");
  unsetenv("TRAINER_INJECT_CHECKPOINT_DELAY");
  REQUIRE(
      wait_for_text(tmp / "run.log", "TRAINER_INJECT_CHECKPOINT_DELAY", std::chrono::seconds(60)));
  run.signal_it(SIGTERM);
  REQUIRE(run.exit_code() == 143);
  INFO(read_text(tmp / "run.log"));
  const nlohmann::json stopped = summary_of(tmp / "run");
  CHECK(stopped["status"] == "interrupted");
  CHECK(stopped["steps"] == 7);
  std::vector<std::string> checkpoints;
  for (const auto& entry : fs::directory_iterator(tmp / "run/checkpoints"))
    if (entry.path().filename() != "last") checkpoints.push_back(entry.path().filename());
  CHECK(checkpoints == std::vector<std::string>{"step-00000007"});
}

TEST_CASE("a stop while a resume saves its replayed evaluation stops there too") {
  TempDir tmp("stop-signal-during-replay");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  const std::vector<std::string> keep_best = {"train.eval_every=5", "checkpoint.keep_best=1",
                                              "checkpoint.metric=eval.loss", "checkpoint.mode=min",
                                              "checkpoint.every_steps=0"};
  // Stopped during the evaluation at step 5: saved before it, for the resume to make.
  setenv("TRAINER_INJECT_EVAL_DELAY", "1", 1);
  std::vector<std::string> args = {"run", tmp / "tiny.yaml", "--out", tmp / "run"};
  args.insert(args.end(), keep_best.begin(), keep_best.end());
  TrainerChild run(args, tmp / "run.log");
  unsetenv("TRAINER_INJECT_EVAL_DELAY");
  REQUIRE(wait_for_text(tmp / "run.log", "TRAINER_INJECT_EVAL_DELAY", std::chrono::seconds(60)));
  run.signal_it(SIGTERM);
  REQUIRE(run.exit_code() == 143);
  REQUIRE(summary_of(tmp / "run")["steps"] == 5);
  // The resume makes that evaluation and saves step 5 again with its metric;
  // a stop during that save used to train step 6 and save it too.
  setenv("TRAINER_INJECT_CHECKPOINT_DELAY", "2", 1);
  TrainerChild resumed({"run", "--resume", tmp / "run"}, tmp / "resume.log");
  unsetenv("TRAINER_INJECT_CHECKPOINT_DELAY");
  REQUIRE(wait_for_text(tmp / "resume.log", "TRAINER_INJECT_CHECKPOINT_DELAY",
                        std::chrono::seconds(60)));
  resumed.signal_it(SIGTERM);
  REQUIRE(resumed.exit_code() == 143);
  INFO(read_text(tmp / "resume.log"));
  CHECK(summary_of(tmp / "run")["steps"] == 5);
  CHECK_FALSE(fs::exists(tmp / "run/checkpoints/step-00000006"));
}
