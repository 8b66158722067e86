// labels: cpu
// The time left of a run: its arithmetic, how the log line writes it, and that
// a run's log lines carry it up to, not on, the last step.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>

#include "runner/train/progress.h"
#include "tests/run_command.h"
#include "tests/test_data_fixtures.h"

using trainer::train::short_duration;
using trainer::train::time_left;

TEST_CASE("a duration is written in its two largest units") {
  CHECK(short_duration(0) == "0s");
  CHECK(short_duration(-3) == "0s");
  CHECK(short_duration(59.4) == "59s");
  CHECK(short_duration(59.6) == "1m00s");
  CHECK(short_duration(187) == "3m07s");
  CHECK(short_duration(7500) == "2h05m");
  CHECK(short_duration(273600) == "3d04h");
}

TEST_CASE("the time left goes at the pace of the steps done") {
  CHECK(time_left(10.0, 100, 900) == Approx(90.0));
  CHECK(time_left(10.0, 100, 0) == 0.0);
  CHECK(time_left(10.0, 0, 900) < 0);  // nothing done yet: unknown
}

TEST_CASE("a run's log lines say the time left until the last step") {
  trainer::data::testing::TempDir tmp;
  const auto r = trainer::testing::run_trainer(
      "run configs/fashion_mnist_mlp.yaml train.max_steps=20 train.log_every=5 --out " +
          tmp.file("run"),
      true);
  INFO(r.out);
  REQUIRE(r.code == 0);
  std::istringstream lines(r.out);
  std::string line;
  int with_eta = 0, last_seen = 0;
  while (std::getline(lines, line)) {
    if (line.find("step 5/20:") != std::string::npos ||
        line.find("step 15/20:") != std::string::npos)
      with_eta += line.find(" eta ") != std::string::npos;
    if (line.find("step 20/20:") != std::string::npos) {
      ++last_seen;
      CHECK(line.find(" eta ") == std::string::npos);
    }
  }
  CHECK(with_eta == 2);
  CHECK(last_seen == 1);
}
