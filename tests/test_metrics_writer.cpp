// labels: cpu
// The run directory's record files on a full disk: metrics.jsonl and the
// TensorBoard events file stop the run with the file and the reason rather
// than dropping records silently (a full disk once left a run "complete"
// with a metrics.jsonl cut short mid-record). /dev/full answers every write
// with ENOSPC.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

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
