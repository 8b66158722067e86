// labels: mpi
// A SIGTERM to `trainer run` with 2 CPU ranks started by trainer's own
// launcher stops the job as it stops one process: the launcher sends it on to
// the ranks (mpirun, its child, is started with the signal mask trainer began
// with, not trainer's), the ranks finish a step and checkpoint, and the launcher exits
// 143, the code `trainer sweep` takes for an interrupted trial, leaving a
// directory that resumes on 2 ranks. A console that goes away does not end
// the job.
#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_resume_fixtures.h"
#include "test_signal_fixtures.h"

using namespace trainer::testing;

TEST_CASE("a SIGTERM to a 2-rank run exits 143 and leaves a directory that resumes") {
  TempDir tmp("dist-stop-signal");
  write_text(tmp / "tiny.yaml", tiny_experiment(4096));
  const std::string dir = tmp / "run";
  TrainerChild run(
      {"run", tmp / "tiny.yaml", "devices.world_size=2", "train.epochs=500", "--out", dir},
      tmp / "run.log");
  REQUIRE(wait_for_lines(dir + "/metrics.jsonl", 1, std::chrono::seconds(60)));
  const std::vector<pid_t> children = child_processes(run.pid());
  CHECK(children.size() == 1);  // mpirun, not the ranks: the launcher did not become mpirun
  if (children.size() == 1) {
    const auto blocked = status_mask("/proc/" + std::to_string(children[0]) + "/status", "SigBlk");
    REQUIRE(blocked);
    CHECK((*blocked & kStopSignals) == 0);
  }

  run.signal_it(SIGTERM);
  const int code = run.exit_code();
  INFO(read_text(tmp / "run.log"));
  CHECK(code == 143);
  CHECK(read_text(tmp / "run.log").find("note: the ranks stopped on signal 15, as asked") !=
        std::string::npos);
  const auto stopped = nlohmann::json::parse(read_text(dir + "/summary.json"));
  CHECK(stopped["status"] == "interrupted");
  CHECK(stopped["signal"] == SIGTERM);
  const std::int64_t steps = stopped["steps"].get<std::int64_t>();
  TrainerChild resumed({"run", "--resume", dir, "train.max_steps=" + std::to_string(steps + 2)},
                       tmp / "resume.log");
  INFO(read_text(tmp / "resume.log"));
  CHECK(resumed.exit_code() == 0);
  CHECK(nlohmann::json::parse(read_text(dir + "/summary.json"))["steps"] == steps + 2);
}

namespace {

// The rank (OMPI_COMM_WORLD_RANK) of a process mpirun started; -1 if unknown.
int rank_of(pid_t pid) {
  const std::string environ = read_text("/proc/" + std::to_string(pid) + "/environ");
  const std::string key = std::string("OMPI_COMM_WORLD_RANK=");
  for (std::size_t at = 0; at < environ.size(); at = environ.find('\0', at) + 1) {
    if (environ.compare(at, key.size(), key) == 0)
      return std::atoi(environ.c_str() + at + key.size());
    if (environ.find('\0', at) == std::string::npos) break;
  }
  return -1;
}

}  // namespace

// A signal to the whole process group (a container stop, systemctl stop)
// reaches mpirun too, which then exits 1 once the ranks stopped; a signal to
// one rank alone stops the others on the same signal: either way the job
// ends as a stop, with the code and the signal that was sent.
TEST_CASE("a stop that reaches mpirun too, or one rank alone, ends the job as that stop") {
  TempDir tmp("dist-stop-group");
  write_text(tmp / "tiny.yaml", tiny_experiment(4096));
  const auto started = [&](const std::string& name) {
    auto run = std::make_unique<TrainerChild>(
        std::vector<std::string>{"run", tmp / "tiny.yaml", "devices.world_size=2",
                                 "train.epochs=500", "--out", tmp / name},
        tmp / (name + ".log"));
    REQUIRE(wait_for_lines(tmp / (name + "/metrics.jsonl"), 1, std::chrono::seconds(60)));
    return run;
  };
  // The launcher's exit code, and the run's record, of a stop by `sig`.
  const auto ended_as_stop = [&](TrainerChild& run, const std::string& name, int sig) {
    const int code = run.exit_code();
    INFO(read_text(tmp / (name + ".log")));
    CHECK(code == 128 + sig);
    const auto summary = nlohmann::json::parse(read_text(tmp / (name + "/summary.json")));
    CHECK(summary["status"] == "interrupted");
    CHECK(summary["signal"] == sig);
  };
  {
    const auto run = started("group");
    const std::vector<pid_t> mpirun = child_processes(run->pid());
    REQUIRE(mpirun.size() == 1);
    const std::vector<pid_t> ranks = child_processes(mpirun[0]);
    run->signal_it(SIGTERM);
    kill(mpirun[0], SIGTERM);
    for (const pid_t rank : ranks) kill(rank, SIGTERM);
    ended_as_stop(*run, "group", SIGTERM);
  }
  {
    const auto run = started("one");
    const std::vector<pid_t> mpirun = child_processes(run->pid());
    REQUIRE(mpirun.size() == 1);
    bool sent = false;
    for (const pid_t rank : child_processes(mpirun[0]))
      if (rank_of(rank) == 1) sent = kill(rank, SIGINT) == 0;
    REQUIRE(sent);
    ended_as_stop(*run, "one", SIGINT);
  }
}

// mpirun aborts the job when a write to its own output fails: the launcher
// reads mpirun's output and copies it, so a console that goes away (`| head`)
// ends the copying, not the job.
TEST_CASE("a 2-rank run whose console goes away trains to the end and records it") {
  TempDir tmp("dist-console-gone");
  // Long enough that head is gone while the job still writes.
  write_text(tmp / "tiny.yaml", tiny_experiment(4096));
  const std::string dir = tmp / "run";
  const auto r = run_command("sh -c '" + trainer_binary() + " run " + (tmp / "tiny.yaml") +
                             " devices.world_size=2 train.max_steps=200 train.log_every=1 --out " +
                             dir + " 2>&1 | head -2'");
  CHECK(r.code == 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!std::filesystem::exists(dir + "/summary.json") &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // A "running" summary is a resume's; this run records only its end.
  REQUIRE(std::filesystem::exists(dir + "/summary.json"));
  const auto summary = nlohmann::json::parse(read_text(dir + "/summary.json"));
  CHECK(summary["status"] == "complete");
  CHECK(summary["steps"] == 200);
}
