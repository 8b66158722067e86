// labels: cpu train
// Mixed precision end to end through `trainer run`: an injected fp16 overflow
// skips exactly that step, halves the loss scale and holds the learning-rate
// schedule; a loss scale beyond 2^64 is refused before the run; overflows that persist at the
// minimum scale stop the run with a diagnosis; real overflows are decided alike inside the recorded
// step and after it; bf16 and fp16 train the shipped MLP to within half a point of float32.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "cpu_bf16.h"
#include "run_command.h"

namespace fs = std::filesystem;
using trainer::testing::run_command;
using trainer::testing::run_trainer;

namespace {

const fs::path kRoot = fs::temp_directory_path() / "trainer_test_precision";

// A small MLP on synthetic data with a warmup schedule, so lr changes every step.
fs::path write_config(const std::string& name) {
  fs::create_directories(kRoot);
  const fs::path path = kRoot / (name + ".yaml");
  std::ofstream(path) << "name: " << name << R"(
seed: 4
data:
  train: {type: synthetic, shape: [1, 8, 8], classes: 4, size: 1024, seed: 1}
  workers: 1
model:
  layers:
    - {type: flatten}
    - {type: linear, name: fc1, out_features: 32}
    - {type: relu}
    - {type: linear, name: fc2, out_features: 4}
  loss: {type: cross_entropy}
optimizer: {type: sgd, lr: 0.1, momentum: 0.9}
schedule: {type: cosine, warmup_steps: 20}
precision: fp16
train: {batch_size: 32, max_steps: 10, log_every: 1}
backend: {threads: 1}
)";
  return path;
}

std::map<int, nlohmann::json> train_records(const fs::path& dir) {
  std::ifstream in(dir / "metrics.jsonl");
  std::map<int, nlohmann::json> records;
  std::string line;
  while (std::getline(in, line)) {
    const auto r = nlohmann::json::parse(line);
    if (r["split"] == "train") records[r["step"].get<int>()] = r;
  }
  return records;
}

std::string run_with_env(const std::string& env, const std::string& args) {
  return env + " " + std::string(TRAINER_BINARY) + " " + args;
}

}  // namespace

TEST_CASE("an injected fp16 overflow skips that step, halves the scale, holds the schedule") {
  const fs::path config = write_config("overflow");
  const fs::path clean = kRoot / "clean", injected = kRoot / "injected";
  fs::remove_all(clean);
  fs::remove_all(injected);
  REQUIRE(run_trainer("run " + config.string() + " --out " + clean.string()).code == 0);
  const auto r = run_command(run_with_env(
      "TRAINER_INJECT_OVERFLOW=5", "run " + config.string() + " --out " + injected.string()));
  INFO(r.out);
  REQUIRE(r.code == 0);
  // Marked as a warning on the terminal and in train.log, as the command line marks its own.
  CHECK(r.out.find("\nwarning: step 5: gradients overflow at loss scale 65536: step skipped, "
                   "scale now 32768\n") != std::string::npos);
  std::ifstream log(injected / "train.log");
  const std::string logged((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  CHECK(logged.find("] warning: step 5: gradients overflow") != std::string::npos);
  CHECK(logged.find("] training 10 steps") != std::string::npos);  // info lines unmarked

  const auto a = train_records(clean), b = train_records(injected);
  REQUIRE(a.size() == 10);
  REQUIRE(b.size() == 10);
  for (int step = 1; step <= 10; ++step) {
    INFO("step " << step);
    CHECK(a.at(step)["skipped_steps"] == 0);
    CHECK(a.at(step)["loss_scale"] == 65536.0);
    CHECK(b.at(step)["skipped_steps"] == (step < 5 ? 0 : 1));
    CHECK(b.at(step)["loss_scale"] == (step < 5 ? 65536.0 : 32768.0));
    // Up to step 4 both runs are the same; from step 6 on the injected run
    // applies the learning rate the clean run applied one step earlier.
    if (step < 5) {
      CHECK(b.at(step)["loss"] == a.at(step)["loss"]);
      CHECK(b.at(step)["lr"] == a.at(step)["lr"]);
    } else if (step == 5) {
      CHECK(b.at(step)["lr"] == a.at(4)["lr"]);  // nothing applied at step 5
    } else {
      CHECK(b.at(step)["lr"] == a.at(step - 1)["lr"]);
    }
  }
  // The skipped step changed nothing: step 6 of the injected run trains on
  // step 6's batch with the weights of step 4, so its loss differs.
  CHECK(b.at(6)["loss"] != a.at(6)["loss"]);
  std::ifstream summary_file(injected / "summary.json");
  const auto summary = nlohmann::json::parse(summary_file);
  CHECK(summary["skipped_steps"] == 1);
  CHECK(summary["loss_scale"] == 32768.0);
}

TEST_CASE("a loss scale float32 holds as infinity is refused before the run starts") {
  const fs::path config = write_config("infinite_scale");
  for (const char* scale :
       {"precision.loss_scale.init_scale=1e300", "precision.loss_scale.static_scale=1e300"}) {
    INFO(scale);
    const fs::path dir = kRoot / "infinite_scale";
    fs::remove_all(dir);
    const auto r =
        run_trainer("run " + config.string() + " --out " + dir.string() + " " + scale, true);
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK(r.out.find("<command line>:1:") == 0);
    CHECK(r.out.find("<= 18446744073709551616, found number 1e300") != std::string::npos);
    CHECK_FALSE(fs::exists(dir));
  }
}

namespace {

// A run named `name` whose first 10 steps overflow (injected), with the
// loss scale setting `scale` and a collapse after 3 overflows at the floor.
trainer::testing::CommandResult collapsing_run(const std::string& name, const std::string& scale) {
  const fs::path config = write_config(name);
  fs::remove_all(kRoot / name);
  return run_command(run_with_env("TRAINER_INJECT_OVERFLOW=1,2,3,4,5,6,7,8,9,10",
                                  "run " + config.string() + " --out " + (kRoot / name).string() +
                                      " " + scale + " precision.loss_scale.collapse_patience=3"));
}

}  // namespace

TEST_CASE("overflows that persist at the minimum scale stop the run with a diagnosis") {
  const auto r = collapsing_run("collapse", "precision.loss_scale.init_scale=4");
  const fs::path dir = kRoot / "collapse";
  INFO(r.out);
  CHECK(r.code == 1);
  CHECK(r.out.find("fp16 loss scaling collapsed at step 5") != std::string::npos);
  CHECK(r.out.find("Likely cause") != std::string::npos);
  CHECK(r.out.find("gradients of fc1.weight") != std::string::npos);
  CHECK(r.out.find("where a relu hides it from the loss") != std::string::npos);
  // No update was applied: each record shows the rate the first update
  // would use (the warmup's first), not 0.
  const auto records = train_records(dir);
  REQUIRE(records.size() >= 4);
  for (const auto& [step, record] : records) {
    INFO("step " << step);
    CHECK(record["lr"].get<double>() > 0);
    CHECK(record["lr"] == records.begin()->second["lr"]);
  }
}

TEST_CASE("a static loss scale that keeps overflowing: the scale to lower is named") {
  const auto r = collapsing_run("collapse_static", "precision.loss_scale.static_scale=1024");
  INFO(r.out);
  CHECK(r.code == 1);
  CHECK(r.out.find("3 consecutive steps overflowed at the static loss scale 1024") !=
        std::string::npos);
  CHECK(r.out.find("Lower precision.loss_scale.static_scale") != std::string::npos);
  CHECK(r.out.find("minimum loss scale") == std::string::npos);
}

TEST_CASE("under loss scaling the learning rates stay exact past the backend's window") {
  // The backend holds the rates of at most 4096 updates ahead; with log_every
  // above that the host reads the state at least every 4096 steps. A warmup
  // over 4600 updates changes the rate at every one, and 4700 steps apply more
  // than 4096 updates: the weights must not depend on log_every. (No epoch
  // checkpoints: each one reads the state too.)
  const fs::path config = write_config("rate_window");
  std::string weights[2];
  int i = 0;
  for (const std::string log_every : {"5000", "100"}) {
    const fs::path dir = kRoot / ("rate_window_" + log_every);
    fs::remove_all(dir);
    const auto r = run_trainer(
        "run " + config.string() + " --out " + dir.string() +
        " deterministic=true checkpoint.every_epochs=0 train.max_steps=4700 train.log_every=" +
        log_every +
        " schedule.warmup_steps=4600 precision.loss_scale.init_scale=1e9"
        " precision.loss_scale.backoff_factor=0.1"
        " precision.loss_scale.growth_interval=3");
    INFO(r.out);
    REQUIRE(r.code == 0);
    std::ifstream in(dir / "checkpoints/last/model.safetensors", std::ios::binary);
    weights[i++] = std::string((std::istreambuf_iterator<char>(in)), {});
  }
  REQUIRE_FALSE(weights[0].empty());
  CHECK(weights[0] == weights[1]);
}

TEST_CASE("a collapse is reported at the next log point even when clean steps followed it") {
  // Steps 1 to 5 overflow (collapse at step 5: 4 -> 2 -> 1, then three at the
  // minimum); steps 6 to 10 are clean; the state is read at step 10.
  const fs::path config = write_config("collapse_later");
  const fs::path dir = kRoot / "collapse_later";
  fs::remove_all(dir);
  const auto r = run_command(
      run_with_env("TRAINER_INJECT_OVERFLOW=1,2,3,4,5",
                   "run " + config.string() + " --out " + dir.string() +
                       " train.max_steps=20 train.log_every=10 precision.loss_scale.init_scale=4"
                       " precision.loss_scale.collapse_patience=3"));
  INFO(r.out);
  CHECK(r.code == 1);
  CHECK(r.out.find("fp16 loss scaling collapsed at step 5") != std::string::npos);
  CHECK(r.out.find("5 steps skipped up to step 10") != std::string::npos);
}

TEST_CASE("real overflows are skipped alike whether the update runs inside the step or after it") {
  // A huge initial scale that backs off tenfold and grows every 3 clean
  // steps: the first steps overflow for real, later ones again after growth.
  // The update decides inside itself in both runs; an injection hook set
  // beyond the run moves it out of the step without injecting anything.
  const fs::path config = write_config("real_overflow");
  const fs::path inside = kRoot / "real_inside", after = kRoot / "real_after";
  fs::remove_all(inside);
  fs::remove_all(after);
  auto run_args = [&](const fs::path& dir) {
    return "run " + config.string() + " --out " + dir.string() +
           " deterministic=true train.max_steps=30 train.log_every=5"
           " precision.loss_scale.init_scale=1e9 precision.loss_scale.backoff_factor=0.1"
           " precision.loss_scale.growth_interval=3";
  };
  const auto r = run_trainer(run_args(inside));
  INFO(r.out);
  REQUIRE(r.code == 0);
  // Steps 1 to 3 overflow at 1e9, 1e8 and 1e7: one warning for the window.
  CHECK(r.out.find("steps 1 to 5: ") != std::string::npos);
  CHECK(r.out.find("steps' gradients overflowed and were skipped") != std::string::npos);
  const auto r2 = run_command(run_with_env("TRAINER_INJECT_OVERFLOW=1000", run_args(after)));
  INFO(r2.out);
  REQUIRE(r2.code == 0);
  std::ifstream a_file(inside / "metrics.jsonl"), b_file(after / "metrics.jsonl");
  const std::string a((std::istreambuf_iterator<char>(a_file)), {}),
      b((std::istreambuf_iterator<char>(b_file)), {});
  CHECK(a == b);
  const auto records = train_records(inside);
  REQUIRE(records.size() == 6);
  // Before any update applies, the rate shown is the one the first will use
  // (steps 1 to 4 overflow: step 5 applies the first update).
  const fs::path each = kRoot / "real_each_step";
  fs::remove_all(each);
  REQUIRE(run_trainer(run_args(each) + " train.log_every=1").code == 0);
  const auto each_records = train_records(each);
  REQUIRE(each_records.at(1)["skipped_steps"] == 1);
  REQUIRE(each_records.at(5)["skipped_steps"] == 4);
  CHECK(each_records.at(1)["lr"].get<double>() > 0);
  CHECK(each_records.at(1)["lr"] == each_records.at(5)["lr"]);
  for (int step = 2; step <= 20; ++step) {  // and it never goes back while warming up
    INFO("step " << step);
    CHECK(each_records.at(step)["lr"].get<double>() >=
          each_records.at(step - 1)["lr"].get<double>());
  }
  CHECK(records.at(5)["skipped_steps"].get<int>() >= 3);
  CHECK(records.at(5)["loss_scale"].get<double>() <= 1e6);
  std::ifstream summary_file(inside / "summary.json"), after_file(after / "summary.json");
  const auto summary = nlohmann::json::parse(summary_file);
  CHECK(summary["skipped_steps"] == records.at(30)["skipped_steps"]);
  CHECK(summary["optimizer_update"] == "in the step");
  CHECK(nlohmann::json::parse(after_file)["optimizer_update"].get<std::string>().rfind(
            "after the step", 0) == 0);
}

TEST_CASE("bf16 and fp16 train the MLP to within half a point of float32") {
  std::map<std::string, double> accuracy;
  const bool bf16 = cpu_computes_bf16();
  for (const std::string precision : {"fp32", "bf16", "fp16"}) {
    if (precision == "bf16" && !bf16) continue;
    const fs::path dir = kRoot / ("mlp_" + precision);
    fs::remove_all(dir);
    const auto r =
        run_trainer("run configs/fashion_mnist_mlp.yaml train.epochs=1 precision=" + precision +
                        " --out " + dir.string(),
                    true);
    INFO(r.out);
    REQUIRE(r.code == 0);
    std::ifstream summary_file(dir / "summary.json");
    accuracy[precision] =
        nlohmann::json::parse(summary_file)["final_eval"]["accuracy"].get<double>();
    std::ifstream manifest_file(dir / "manifest.json");
    const auto manifest = nlohmann::json::parse(manifest_file);
    CHECK(manifest["precision"] == precision);
    CHECK(manifest["precision_emulation"] == (precision == "fp16"));
    if (precision != "fp32")
      CHECK(manifest["compute_types"]["linear1"] == (precision == "bf16" ? "bf16" : "f16"));
  }
  INFO("fp32 " << accuracy["fp32"] << " bf16 " << accuracy["bf16"] << " fp16 " << accuracy["fp16"]);
  CHECK(accuracy["fp32"] >= 0.84);
  if (bf16) CHECK(std::abs(accuracy["bf16"] - accuracy["fp32"]) <= 0.005);
  CHECK(std::abs(accuracy["fp16"] - accuracy["fp32"]) <= 0.005);
}

TEST_CASE(
    "tf32 on the CPU says that it computes in float32, and the manifest does not claim tf32") {
  const fs::path dir = kRoot / "mlp_tf32_cpu";
  fs::remove_all(dir);
  const auto r = run_trainer(
      "run configs/fashion_mnist_mlp.yaml train.max_steps=2 precision=tf32 "
      "--out " +
          dir.string(),
      true);
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("note: precision tf32: tf32 is a GPU matmul mode: on the CPU every operation "
                   "computes in float32") != std::string::npos);
  std::ifstream manifest_file(dir / "manifest.json");
  const auto manifest = nlohmann::json::parse(manifest_file);
  CHECK(manifest["precision"] == "tf32");
  CHECK(manifest["determinism"]["tf32"] == false);
  CHECK(manifest["precision_note"].get<std::string>().find("float32") != std::string::npos);
}

TEST_CASE("bf16 on a CPU whose oneDNN runs below AVX-512 is refused at precision.mode") {
  // DNNL_MAX_CPU_ISA makes oneDNN act as on an AVX2 machine.
  const fs::path dir = kRoot / "bf16_avx2";
  fs::remove_all(dir);
  const std::string avx2 = "DNNL_MAX_CPU_ISA=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 ";
  const auto refused = trainer::testing::run_command(
      avx2 + TRAINER_BINARY + " run configs/fashion_mnist_mlp.yaml train.max_steps=2 --out " +
      dir.string() + " precision=bf16");
  INFO(refused.out);
  CHECK(refused.code == 2);
  CHECK(refused.out ==
        "<command line>:2:11: error: precision.mode: bf16 is not available on the cpu backend: "
        "oneDNN's bf16 kernels need AVX-512, and oneDNN runs at AVX2 on this CPU (as "
        "ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA limits it): use precision: fp32, or fp16 "
        "(emulated) (in override 2 'precision=bf16')\n1 error\n");
  CHECK_FALSE(fs::exists(dir));
  // float32 runs there.
  CHECK(trainer::testing::run_command(avx2 + TRAINER_BINARY +
                                      " run configs/fashion_mnist_mlp.yaml train.max_steps=2 "
                                      "--out " +
                                      dir.string())
            .code == 0);
}
