// labels: cpu
// The run directory's record files on a full disk: metrics.jsonl and the
// TensorBoard events file stop the run with the file and the reason rather
// than dropping records silently (a full disk once left a run "complete"
// with a metrics.jsonl cut short mid-record). /dev/full answers every write
// with ENOSPC. And the accuracy counted from logits.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "runner/train/metrics.h"
#include "runner/train/tfevents.h"
#include "test_resume_fixtures.h"

using Catch::Matchers::Contains;
using namespace trainer::train;

TEST_CASE("a record that cannot be written stops the run with the file and the reason") {
  REQUIRE(std::filesystem::exists("/dev/full"));
  MetricsWriter metrics("/dev/full");
  CHECK_THROWS_WITH(metrics.write({{"step", 1}}),
                    Contains("cannot write /dev/full: No space left on device") &&
                        Contains("trainer run --resume"));
  CHECK(metrics.bytes_written() == 0);
  CHECK_THROWS_WITH(EventsWriter("/dev/full", false),
                    Contains("cannot write /dev/full: No space left on device"));
}

TEST_CASE("a record file that cannot be opened says why") {
  trainer::testing::TempDir tmp("metrics-open");
  // A folder where the file belongs: the reason, and what to do.
  std::filesystem::create_directories(tmp / "timing.jsonl");
  CHECK_THROWS_WITH(MetricsWriter(tmp / "timing.jsonl"),
                    Contains("timing.jsonl: Is a directory") && Contains("make it writable"));
  std::filesystem::create_directories(tmp / "events");
  CHECK_THROWS_WITH(EventsWriter(tmp / "events", false),
                    Contains("events: Is a directory") && Contains("trainer run --resume"));
}

TEST_CASE("records that can be written are counted, line by line") {
  trainer::testing::TempDir dir("metrics-writer");
  const std::string path = dir / "metrics.jsonl";
  {
    MetricsWriter metrics(path);
    metrics.write({{"step", 1}});
    metrics.write({{"step", 2}});
    CHECK(metrics.bytes_written() == std::filesystem::file_size(path));
  }
  MetricsWriter again(path, true);
  CHECK(again.bytes_written() == std::filesystem::file_size(path));
  CHECK(trainer::testing::read_text(path) == "{\"step\":1}\n{\"step\":2}\n");
}

TEST_CASE("accuracy counts the label's rank among the logits; a NaN logit is a miss") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Six classes; labels 2, 0 (a tie with class 3: the lower index wins), 5
  // (fifth largest), 1 (NaN itself), 4 (NaN elsewhere), -100 (ignored).
  const std::vector<float> logits = {
      0,   1,   9, 2, 3, 4,  //
      7,   1,   2, 7, 3, 4,  //
      6,   5,   4, 3, 2, 1,  //
      0,   nan, 1, 2, 3, 4,  //
      nan, 0,   1, 2, 9, 3,  //
      1,   2,   3, 4, 5, 6,
  };
  const std::vector<std::int64_t> labels = {2, 0, 5, 1, 4, -100};
  const Hits h = count_hits(logits.data(), labels.data(), 6, 6);
  CHECK(h.rows == 5);
  CHECK(h.top1 == 2);
  CHECK(h.top5 == 2);  // label 5 of row 2 is the smallest of six: outside the top 5
}
