// labels: cpu train
// The memory plan counts the evaluation loader's ring: evaluate() allocates it
// at every evaluation while the training loader's ring is alive, so the plan,
// train.memory_limit_mib and micro_batch_size: auto must see it.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "data/loader.h"
#include "run_command.h"
#include "runner/config/load.h"
#include "runner/train/devices.h"
#include "runner/train/memory_report.h"
#include "runner/train/session.h"
#include "runner/train/trainer.h"

namespace fs = std::filesystem;
using namespace trainer;
using trainer::testing::run_trainer;

namespace {

const fs::path kRoot = fs::temp_directory_path() / "trainer_test_memory_eval_loader";

std::string config_text(bool with_eval) {
  return std::string(R"(name: eval_ring
data:
  train: {type: synthetic, shape: [3, 32, 32], classes: 10, size: 256, seed: 1}
)") +
         (with_eval
              ? "  eval: {type: synthetic, shape: [3, 32, 32], classes: 10, size: 128, seed: 2}\n"
              : "") +
         R"(  workers: 1
model:
  layers:
    - {type: global_avgpool}
    - {type: linear, out_features: 10}
  loss: {type: cross_entropy}
optimizer: {type: sgd, lr: 0.01}
train: {batch_size: 64, max_steps: 2, log_every: 1, eval_every: 2, memory_headroom: 0}
backend: {threads: 1}
)";
}

fs::path write_config(bool with_eval) {
  fs::create_directories(kRoot);
  const fs::path path = kRoot / (with_eval ? "with_eval.yaml" : "without_eval.yaml");
  std::ofstream(path) << config_text(with_eval);
  return path;
}

// The bytes a loader with `options` allocates for its ring.
double ring_bytes_allocated(const train::Session& s, data::LoaderOptions options) {
  double allocated = 0;
  options.allocate = [&allocated](std::size_t bytes) {
    allocated += static_cast<double>(bytes);
    return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  };
  options.free = [](void* p) { std::free(p); };
  data::Loader loader(s.eval_data, s.eval_pipeline, options);
  return allocated;
}

// A figure of `trainer plan`'s memory table ("  total   12.34 MiB").
double plan_line(const std::string& out, const std::string& label) {
  const auto at = out.find("  " + label + " ");
  REQUIRE(at != std::string::npos);
  return std::stod(out.substr(at + 2 + label.size()));
}

}  // namespace

TEST_CASE("the estimate grows by the evaluation loader's ring, as evaluate() allocates it") {
  for (const std::string override_ : {"train.batch_size=64", "train.micro_batch_size=16"}) {
    INFO("override: " << override_);
    const config::Config with = config::load_config(write_config(true).string(), {override_});
    const config::Config without = config::load_config(write_config(false).string(), {override_});
    Backend& backend = train::select_backend(with);
    const train::Session s = train::prepare_session(with);
    const train::MemoryEstimate e_with = train::estimate_memory(s, backend);
    const train::MemoryEstimate e_without =
        train::estimate_memory(train::prepare_session(without), backend);
    CHECK(e_without.eval_loader == 0);
    CHECK(e_with.eval_loader > 0);
    CHECK(e_with.total() - e_without.total() == Approx(e_with.eval_loader).epsilon(1e-12));
    // Exactly what the loader evaluate() builds allocates, at the micro-batch it uses.
    CHECK(e_with.eval_loader == ring_bytes_allocated(s, train::eval_loader_options(s, backend)));
  }
}

TEST_CASE(
    "a memory limit between the totals without and with evaluation refuses only the run "
    "with an evaluation source") {
  const fs::path with = write_config(true), without = write_config(false);
  const auto plan_with = run_trainer("plan " + with.string());
  const auto plan_without = run_trainer("plan " + without.string());
  REQUIRE(plan_with.code == 0);
  REQUIRE(plan_without.code == 0);
  INFO(plan_with.out);
  // The evaluation's ring is a line of its own, and in the total.
  CHECK(plan_without.out.find("eval loader buffers") == std::string::npos);
  const double eval_ring = plan_line(plan_with.out, "eval loader buffers");
  // The 2 batches the 128 evaluation samples make (fewer than data.prefetch's
  // 4), of 64 samples of 12 KiB.
  CHECK(plan_with.out.find("(2 batches in flight at each evaluation)") != std::string::npos);
  CHECK(eval_ring == Approx(1.5).margin(0.01));
  const double total_with = plan_line(plan_with.out, "total"),
               total_without = plan_line(plan_without.out, "total");
  CHECK(total_with - total_without == Approx(eval_ring).margin(0.011));
  // No headroom (memory_headroom: 0): the limit is what fits.
  const int limit = static_cast<int>(std::ceil(total_without));
  REQUIRE(limit < total_with);
  const std::string limit_override = " train.memory_limit_mib=" + std::to_string(limit);
  const fs::path dir = kRoot / "run";
  fs::remove_all(dir);
  const auto refused =
      run_trainer("run " + with.string() + " --out " + dir.string() + limit_override, true);
  INFO(refused.out);
  CHECK(refused.code == 2);
  CHECK(refused.out.find("train.memory_limit_mib: the memory plan needs") != std::string::npos);
  CHECK_FALSE(fs::exists(dir));
  const auto ran =
      run_trainer("run " + without.string() + " --out " + dir.string() + limit_override, true);
  INFO(ran.out);
  CHECK(ran.code == 0);
}
