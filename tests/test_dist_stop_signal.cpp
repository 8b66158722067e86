// labels: mpi
// A SIGTERM to `trainer run` with 2 CPU ranks started by trainer's own
// launcher stops the job as it stops one process: the launcher sends it on to
// the ranks (mpirun, its child, is started with the signal mask trainer began
// with, not trainer's), the ranks finish a step and checkpoint, and the launcher exits
// 143, the code `trainer sweep` takes for an interrupted trial, leaving a
// directory that resumes on 2 ranks.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>

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
