// `trainer time` times the configured training loader on its own against
// the step, and predicts the input-bound warning a run would give: before a
// run, not an hour into it.
// labels: cpu
#include <catch2/catch.hpp>

#include <regex>
#include <string>

#include "run_command.h"
#include "test_data_fixtures.h"
#include "test_image_fixtures.h"

using namespace trainer::data::testing;
using Catch::Contains;
using trainer::testing::run_trainer;

namespace {

const std::string kGood = std::string(TRAINER_TEST_DATA_DIR) + "/configs/good/";

// The loader's line: its rate, and that rate over the step's.
struct LoaderLine {
  double samples_per_s = 0, ratio = 0;
};

LoaderLine loader_line(const std::string& out) {
  std::smatch m;
  const std::regex line(
      R"(data loader: (\d+) samples/s on its own \(data\.workers: \d+, \d+ batch(es)? built at )"
      R"(once; \d+ batches in [\d.]+ s\), ([\d.]+)x the (\d+) samples/s the step consumes)");
  if (!std::regex_search(out, m, line)) return {};
  return {std::stod(m[1]), std::stod(m[3])};
}

}  // namespace

TEST_CASE("trainer time: a loader far faster than the step is no warning") {
  // Synthetic 8x8 samples, against a two-layer MLP 2048 wide (some 18
  // times slower than the loader on its own).
  const auto r =
      run_trainer("time " + kGood + "mlp.yaml model.layers[1].out_features=2048 --steps 3", true);
  INFO(r.out);
  REQUIRE(r.code == 0);
  const LoaderLine loader = loader_line(r.out);
  CHECK(loader.samples_per_s > 0);
  CHECK(loader.ratio > 2);
  CHECK_THAT(r.out, !Contains("input-bound"));
}

TEST_CASE("trainer time: a loader slower than the step predicts the run's input-bound warning") {
  // PNG decoding and resizing against a linear layer on 3x3 images.
  TempDir dir;
  write_image_folder(dir.file("train"), 40);
  const std::string config = dir.file("folder.yaml");
  write_text(config, linear_on_image_folder(dir.file("train"),
                                            "train: {batch_size: 8}\nbackend: {threads: 1}\n"));
  for (const char* workers : {"0", "1"}) {
    INFO("data.workers=" << workers);
    const auto r =
        run_trainer("time " + config + " --steps 3 data.workers=" + std::string(workers), true);
    INFO(r.out);
    REQUIRE(r.code == 0);
    const LoaderLine loader = loader_line(r.out);
    CHECK(loader.samples_per_s > 0);
    CHECK(loader.ratio < 0.5);
    CHECK_THAT(r.out, Contains("\ninput-bound: a run's step would wait for data about "));
  }
}
