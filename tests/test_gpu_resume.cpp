// labels: gpu train
// A run on a GPU stopped by train.max_steps and resumed (through the
// checkpoint: weights, Adam's moments and, in bf16, the weight copies
// rebuilt from the loaded values) ends where the run straight through ends:
// the same metrics.jsonl and the same final weights, byte for byte
// (deterministic: true). Its first layer is 70000 wide: that weight (17.9 MB)
// and its moments are saved and loaded in two 16 MiB pieces, the second
// partial, at offsets into device memory. Skipped with the reason on a
// machine without a GPU.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "gpu_skip.h"
#include "test_resume_fixtures.h"

using namespace trainer::testing;

TEST_CASE("a run resumed on a GPU ends with the metrics and weights of one run straight through") {
  for (const std::string precision : {"fp32", "bf16"}) {
    INFO("precision " << precision);
    TempDir tmp("gpu-resume-" + precision);
    write_text(tmp / "tiny.yaml", tiny_experiment());
    // A constant schedule: the learning rate must not depend on max_steps.
    std::vector<std::string> overrides = {"devices=[0]", "precision=" + precision,
                                          "schedule.type=constant",
                                          "model.layers[1].out_features=70000"};
    // Each run's output, shown when it fails.
    const auto ran = [&](const std::vector<std::string>& args, const std::string& log) {
      const int code = run_to_end(args, log);
      INFO(read_text(log));
      CHECK(code == 0);
      return code == 0;
    };
    REQUIRE(ran(run_args(tmp / "tiny.yaml", tmp / "full", overrides), tmp / "f.log"));
    overrides.push_back("train.max_steps=22");  // inside epoch 1, mid logging window
    REQUIRE(ran(run_args(tmp / "tiny.yaml", tmp / "part", overrides), tmp / "p.log"));
    REQUIRE(ran({"run", "--resume", tmp / "part", "train.max_steps=0"}, tmp / "r.log"));
    CHECK_THAT(read_text(tmp / "r.log"), Catch::Contains("on cuda"));
    CHECK(read_text(tmp / "full/metrics.jsonl") == read_text(tmp / "part/metrics.jsonl"));
    const std::string last = "/checkpoints/step-00000048/model.safetensors";
    const std::string weights = read_text(tmp / ("full" + last));
    CHECK(weights.size() > (std::size_t{17} << 20));
    CHECK(weights == read_text(tmp / ("part" + last)));
  }
}
