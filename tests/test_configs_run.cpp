// labels: cpu train
// Every shipped experiment in configs/ validates, plans, and trains a few steps
// end to end (the short version of each; the long runs are in the README).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cpu_bf16.h"
#include "run_command.h"

using trainer::testing::run_trainer;
namespace fs = std::filesystem;

TEST_CASE("every shipped config validates, plans and trains a few steps") {
  int configs = 0;
  for (const auto& entry : fs::directory_iterator("configs")) {
    if (entry.path().extension() != ".yaml") continue;
    ++configs;
    const std::string config = entry.path().string();
    INFO(config);
    CHECK(run_trainer("validate " + config).code == 0);

    const auto plan = run_trainer("plan " + config);
    CHECK(plan.code == 0);
    CHECK(plan.out.find("activations (peak)") != std::string::npos);

    const fs::path dir =
        fs::temp_directory_path() / ("trainer_test_" + entry.path().stem().string());
    fs::remove_all(dir);
    const auto r = run_trainer("run " + config +
                                   " train.max_steps=4 train.log_every=2 train.eval_batches=2"
                                   " data.workers=1 --out " +
                                   dir.string(),
                               true);
    INFO(r.out);
    REQUIRE(r.code == 0);
    std::ifstream summary_file(dir / "summary.json");
    const auto summary = nlohmann::json::parse(summary_file);
    CHECK(summary["steps"] == 4);
    CHECK(summary["final_eval"]["samples"] == 2 * 128);
    // Four steps from a random start: the loss is finite and the run wrote its records.
    CHECK(std::isfinite(summary["final_eval"]["loss"].get<double>()));
    for (const char* file :
         {"config.yaml", "config.sha256", "manifest.json", "metrics.jsonl", "train.log"})
      CHECK(fs::exists(dir / file));
    // The manifest says how the steps ran (the CPU runs kernels as they are called).
    std::ifstream manifest_file(dir / "manifest.json");
    const auto manifest = nlohmann::json::parse(manifest_file);
    CHECK(manifest["step_execution"] ==
          "eager: the cpu backend runs its kernels as they are called");
    CHECK(summary["step_execution"] == manifest["step_execution"]);
    // Which build ran it: the commit `trainer version` prints.
    const auto version = run_trainer("version");
    const auto commit = manifest["trainer_commit"].get<std::string>();
    CHECK(commit.size() >= 7);
    CHECK(version.out.find("commit: " + commit + "\n") != std::string::npos);
    fs::remove_all(dir);
  }
  CHECK(configs >= 3);
}

TEST_CASE("the GPU benchmark's config is valid and plans on the CPU") {
  // Its fields and model (validate also checks the GPU it lists, which this machine may lack).
  CHECK(run_trainer("validate bench/gpu/large_mlp.yaml devices=cpu", true).code == 0);
  // Planned in its own precision, bf16, where the CPU computes it.
  const auto r = run_trainer(std::string("plan bench/gpu/large_mlp.yaml devices=cpu") +
                                 (cpu_computes_bf16() ? "" : " precision=fp32"),
                             true);
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK(r.out.find("268468224 trainable") != std::string::npos);  // 4 x (8192^2 + 8192)
}

TEST_CASE("plan marks a layer the loss does not depend on and leaves its FLOPs out") {
  // The FLOPs line of `plan` with these layers.
  const auto flops_line = [](const std::string& layers) {
    const auto r =
        run_trainer("plan configs/fashion_mnist_mlp.yaml 'model.layers=" + layers + "'", true);
    INFO(r.out);
    CHECK(r.code == 0);
    const auto at = r.out.find("FLOPs per micro-batch");
    REQUIRE(at != std::string::npos);
    return std::pair{r.out.substr(at, r.out.find('\n', at) - at), r.out};
  };
  const auto [with_dead, out] = flops_line(
      "[{type: flatten, name: flat}, {type: linear, name: dead, out_features: 1000}, "
      "{type: linear, out_features: 10, inputs: flat}]");
  const auto [without, unused] =
      flops_line("[{type: flatten, name: flat}, {type: linear, out_features: 10}]");
  CHECK(with_dead == without);
  const auto dead = out.find("\ndead ");
  REQUIRE(dead != std::string::npos);
  const std::string line = out.substr(dead + 1, out.find('\n', dead + 1) - dead - 1);
  CHECK(line.find("linear (unused)") != std::string::npos);
  CHECK(line.find("not run") != std::string::npos);
  // Its weights are allocated and saved but never updated: not counted as trainable.
  CHECK_THAT(out, Catch::Contains("parameters: 7850 trainable (792850 with state; 785000 in "
                                  "unused layers, never updated)\n"));
  CHECK_THAT(unused, Catch::Contains("parameters: 7850 trainable (7850 with state)\n"));
}

TEST_CASE("a missing data file is a configuration error naming the file") {
  const auto r =
      run_trainer("run configs/fashion_mnist_mlp.yaml data.train.images=/nonexistent/x.gz --out " +
                      (fs::temp_directory_path() / "trainer_test_missing").string(),
                  true);
  CHECK(r.code == 2);
  CHECK(r.out.find("/nonexistent/x.gz") != std::string::npos);
  CHECK(r.out.find("data.train") != std::string::npos);
}

TEST_CASE("GPUs this machine cannot use are refused at the devices key, before any run starts") {
  const auto probe = run_trainer("validate configs/fashion_mnist_mlp.yaml devices=[0]", true);
  if (probe.code == 0) {
    WARN("GPU 0 is usable here: nothing to refuse");
    return;
  }
  for (const std::string command : {"validate", "plan", "time", "run"}) {
    INFO(command);
    const fs::path out = fs::temp_directory_path() / "trainer_test_no_gpu";
    fs::remove_all(out);
    const auto r = run_trainer(command + " configs/fashion_mnist_mlp.yaml devices=[0,1]" +
                                   (command == "run" ? " --out " + out.string() : ""),
                               true);
    INFO(r.out);
    CHECK(r.code == 2);
    if (probe.out.find("this build of trainer has no CUDA backend") != std::string::npos) {
      CHECK(r.out.find("<command line>:1:9: error: devices: this build of trainer has no CUDA "
                       "backend, so GPUs cannot be used") == 0);
    } else {  // CUDA built in, each GPU refused with the reason
      CHECK(r.out.find("<command line>:1:9: error: devices: cannot use GPU 0: ") == 0);
      CHECK(r.out.find("error: devices: cannot use GPU 1: ") != std::string::npos);
    }
    CHECK(r.out.find("starting 2 ranks") == std::string::npos);  // no ranks launched for nothing
    CHECK_FALSE(fs::exists(out));
  }
}
