// labels: mpi
// The ranks of a job compare what they train before they train: an mpirun
// job whose ranks were given different configs (another seed, another
// learning rate, another layer width) stops on every rank with exit code 2
// and an error naming the ranks' config hashes, the sections that differ
// and the models' sizes, before any gradient is reduced and before the run
// directory is made; settings a rank may choose for itself (its threads)
// still train.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "run_command.h"

namespace fs = std::filesystem;

namespace {

const fs::path kRoot = fs::temp_directory_path() / "trainer_test_dist_agreement";

fs::path write_config(const std::string& name, const std::string& changes) {
  fs::create_directories(kRoot);
  const fs::path path = kRoot / (name + ".yaml");
  std::ofstream(path) << R"(name: agreement
seed: 3
data:
  train: {type: synthetic, shape: [1, 8, 8], classes: 4, size: 512, seed: 1}
  eval: {type: synthetic, shape: [1, 8, 8], classes: 4, size: 128, seed: 2}
  workers: 1
model:
  layers:
    - {type: flatten}
    - {type: linear, name: fc1, out_features: 32}
    - {type: relu}
    - {type: linear, name: fc2, out_features: 4}
  loss: {type: cross_entropy}
optimizer: {type: sgd, lr: 0.2, momentum: 0.9}
train: {batch_size: 128, max_steps: 2, log_every: 1}
backend: {threads: 1}
)" << changes;
  return path;
}

// Rank 0 runs `config` with `overrides0`, rank 1 with `overrides1`, into `out`.
trainer::testing::CommandResult run_two_ranks(const fs::path& config, const std::string& overrides0,
                                              const std::string& overrides1, const fs::path& out) {
  fs::remove_all(out);
  auto rank = [&](const std::string& overrides) {
    return std::string(" -np 1 ") + TRAINER_BINARY + " run " + config.string() + " " + overrides +
           " --out " + out.string();
  };
  return trainer::testing::run_command(
      "mpirun" + std::string(geteuid() == 0 ? " --allow-run-as-root" : "") +
      " --oversubscribe --bind-to none" + rank(overrides0) + " :" + rank(overrides1));
}

}  // namespace

TEST_CASE("ranks given different configs stop before training, naming what differs") {
  const fs::path config = write_config("base", "");
  const fs::path out = kRoot / "run";

  SECTION("another seed") {
    const auto r = run_two_ranks(config, "", "seed=4", out);
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK_THAT(r.out,
               Catch::Matches(R"([\s\S]*the ranks run different configs \(rank 0: [0-9a-f]{12}, )"
                              R"(rank 1: [0-9a-f]{12}\): they differ in seed;[\s\S]*)"));
    CHECK_THAT(r.out, Catch::Contains("Start every rank with the same config and overrides"));
    CHECK_THAT(r.out, !Catch::Contains("build different models"));
    CHECK_FALSE(fs::exists(out));  // nothing trained, no run directory
  }
  SECTION("another learning rate") {
    const auto r = run_two_ranks(config, "", "optimizer.lr=0.1", out);
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Catch::Contains("they differ in optimizer;"));
    CHECK_FALSE(fs::exists(out));
  }
  SECTION("another layer width: no crash inside MPI") {
    // fc1 32 -> 33 wide: 64*33+33 + 33*4+4 = 2281 values instead of 2212.
    const auto r = run_two_ranks(config, "", "model.layers[1].out_features=33", out);
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Catch::Contains("they differ in model;"));
    CHECK_THAT(r.out,
               Catch::Contains("build different models (rank 0: 4 parameter tensors with "
                               "2212 values, rank 1: 4 parameter tensors with 2281 values)"));
    CHECK_FALSE(fs::exists(out));
  }
  SECTION("a rank's own threads and loader workers: the job trains") {
    const auto r = run_two_ranks(config, "", "backend.threads=2 data.workers=2", out);
    INFO(r.out);
    CHECK(r.code == 0);
    CHECK(fs::exists(out / "summary.json"));
  }
}
