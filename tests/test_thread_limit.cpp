// labels: cpu
// A run that may start no more threads (a container's pids limit) stops with
// an error naming the data loader's workers and what to change, exit 1, and
// a summary.json saying so; the loader stops the workers it had started
// (it used to end in std::terminate, exit 134, recording nothing). Needs a
// cgroup v1 pids controller this process may write to (as root); elsewhere
// the test says why and checks nothing.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "run_command.h"
#include "test_resume_fixtures.h"

using namespace trainer::testing;
namespace fs = std::filesystem;

namespace {

// A pids cgroup of its own, removed when done (once no process is in it).
class PidsCgroup {
 public:
  explicit PidsCgroup(int max_tasks)
      : path_("/sys/fs/cgroup/pids/trainer-test-" + std::to_string(getpid())) {
    std::error_code error;
    if (!fs::is_directory("/sys/fs/cgroup/pids", error) || !fs::create_directory(path_, error))
      return;
    std::ofstream(path_ / "pids.max") << max_tasks;
    made_ = true;
  }
  ~PidsCgroup() {
    if (made_) rmdir(path_.c_str());
  }
  bool made() const { return made_; }
  // `command` run by a shell that first moves itself into the cgroup.
  std::string inside(const std::string& command) const {
    return "sh -c 'echo $$ > " + (path_ / "cgroup.procs").string() + " && exec " + command + "'";
  }

 private:
  fs::path path_;
  bool made_ = false;
};

}  // namespace

TEST_CASE("a loader that cannot start its workers stops the run with a clear error") {
  TempDir tmp("thread-limit");
  write_text(tmp / "tiny.yaml", tiny_experiment());
  // The process and its few threads fit in 8 tasks, 64 loader workers do not.
  const PidsCgroup cgroup(8);
  if (!cgroup.made()) {
    WARN("no writable cgroup v1 pids controller here: nothing checked");
    return;
  }
  const auto r = run_command(cgroup.inside(trainer_binary() + " run " + (tmp / "tiny.yaml") +
                                           " data.workers=64 --out " + (tmp / "run")));
  INFO(r.out);
  CHECK(r.code == 1);
  CHECK(r.out.find("terminate called") == std::string::npos);
  CHECK(r.out.find("the data loader cannot start worker thread") != std::string::npos);
  CHECK(r.out.find("of 64") != std::string::npos);
  CHECK(r.out.find("set data.workers lower") != std::string::npos);
  const auto summary = nlohmann::json::parse(read_text(tmp / "run/summary.json"));
  CHECK(summary["status"] == "failed");
}
