// labels: cpu train
// Memory end to end: the plan's prediction matches what a run allocates,
// `micro_batch_size: auto` picks the largest micro-batch the plan fits (for
// `time` as for `run`) and refuses at its key when none does, an
// allocation that fails prints the memory figures and the plan's advice, and
// host memory that runs out elsewhere says so and what to check.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cpu_bf16.h"
#include "run_command.h"

namespace fs = std::filesystem;
using trainer::testing::run_command;
using trainer::testing::run_trainer;

namespace {

const fs::path kRoot = fs::temp_directory_path() / "trainer_test_memory_fit";

// Large activations (32 channels of 64 x 64), so micro-batches differ by many MiB.
fs::path write_config() {
  fs::create_directories(kRoot);
  const fs::path config = kRoot / "conv.yaml";
  std::ofstream(config) << R"(name: conv
data:
  train: {type: synthetic, shape: [3, 64, 64], classes: 4, size: 256, seed: 1}
  workers: 1
model:
  layers:
    - {type: conv2d, out_channels: 32, kernel: 3, padding: 1}
    - {type: batchnorm}
    - {type: relu}
    - {type: global_avgpool}
    - {type: linear, out_features: 4}
  loss: {type: cross_entropy}
optimizer: {type: adam, lr: 0.001}
train: {batch_size: 32, max_steps: 2, log_every: 1}
backend: {threads: 1}
)";
  return config;
}

// A figure of `trainer plan`'s memory table ("  total   12.34 MiB").
double plan_line(const std::string& out, const std::string& label) {
  const auto at = out.find("  " + label);
  REQUIRE(at != std::string::npos);
  return std::stod(out.substr(at + 2 + label.size()));
}

double plan_figure(const fs::path& config, const std::string& extra, const std::string& label) {
  const auto r = run_trainer("plan " + config.string() + " " + extra);
  INFO(r.out);
  REQUIRE(r.code == 0);
  return plan_line(r.out, label);
}

}  // namespace

TEST_CASE("the plan predicts the memory a run allocates within 5%") {
  const fs::path config = write_config();
  for (const std::string extra : {"", "train.micro_batch_size=8", "precision=bf16"}) {
    if (extra == "precision=bf16" && !cpu_computes_bf16()) continue;
    INFO("overrides: " << extra);
    const auto r = run_trainer("plan " + config.string() + " " + extra);
    REQUIRE(r.code == 0);
    const double predicted = plan_line(r.out, "total") - plan_line(r.out, "loader buffers");
    const fs::path dir = kRoot / "measured";
    fs::remove_all(dir);
    REQUIRE(run_trainer("run " + config.string() + " --out " + dir.string() + " " + extra).code ==
            0);
    std::ifstream summary_file(dir / "summary.json");
    const double peak = nlohmann::json::parse(summary_file)["memory_peak_mib"].get<double>();
    INFO("predicted " << predicted << " MiB, allocated " << peak << " MiB");
    CHECK(peak > 0);
    CHECK(std::abs(peak - predicted) <= 0.05 * peak);
  }
}

TEST_CASE("micro_batch_size: auto picks the largest micro-batch the plan fits") {
  const fs::path config = write_config();
  const fs::path dir = kRoot / "auto";
  fs::remove_all(dir);
  // The plan at micro-batch 32 and 16, to set a limit only the smaller fits.
  const double at32 = plan_figure(config, "", "total"),
               at16 = plan_figure(config, "train.micro_batch_size=16", "total");
  REQUIRE(at16 < at32);
  // Capacity such that 90% of it lies between the two.
  const int limit = static_cast<int>(std::ceil((at16 + at32) / 2 / 0.9));
  const auto r =
      run_trainer("run " + config.string() + " --out " + dir.string() +
                  " train.micro_batch_size=auto train.memory_limit_mib=" + std::to_string(limit));
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("micro_batch_size: auto: micro-batch 16 x accumulation 2") != std::string::npos);
  std::ifstream manifest_file(dir / "manifest.json");
  const auto manifest = nlohmann::json::parse(manifest_file);
  CHECK(manifest["batch"]["micro"] == 16);
  CHECK(manifest["batch"]["accumulation"] == 2);
  CHECK(manifest["batch"]["global"] == 32);
  CHECK(manifest["batch"]["micro_batch_auto"] == true);
}

TEST_CASE("trainer time plans the batch against memory as run and plan do") {
  const fs::path config = write_config();
  const double at32 = plan_figure(config, "", "total"),
               at16 = plan_figure(config, "train.micro_batch_size=16", "total");
  REQUIRE(at16 < at32);
  const std::string limit = " train.memory_limit_mib=" +
                            std::to_string(static_cast<int>(std::ceil((at16 + at32) / 2 / 0.9)));
  const auto planned =
      run_trainer("plan " + config.string() + " train.micro_batch_size=auto" + limit);
  REQUIRE(planned.code == 0);
  CHECK(planned.out.find("batch 32 = micro 16 x accumulation 2") != std::string::npos);
  const auto timed = run_trainer("time " + config.string() + " train.micro_batch_size=auto" +
                                 limit + " --steps 1");
  INFO(timed.out);
  REQUIRE(timed.code == 0);
  CHECK(timed.out.find("micro_batch_size: auto: micro-batch 16 x accumulation 2") !=
        std::string::npos);
  CHECK(timed.out.find("on cpu: micro-batch 16 x accumulation 2, 1 steps") != std::string::npos);
  // The configured batch over the limit: refused as `run` refuses it.
  const auto refused = run_trainer("time " + config.string() + limit + " --steps 1", true);
  INFO(refused.out);
  CHECK(refused.code == 2);
  CHECK(refused.out.find("error: train.memory_limit_mib: the memory plan needs") !=
        std::string::npos);
}

TEST_CASE("micro_batch_size: auto that cannot fit a micro-batch of 1 is an error at the key") {
  // Parameters, gradients and Adam's state of a 4000 x 4000 linear layer: 320
  // MiB at any micro-batch, over a limit of 100 MiB.
  const fs::path config = kRoot / "wide.yaml";
  std::ofstream(config) << R"(name: wide
data:
  train: {type: synthetic, shape: [4000], classes: 10, size: 64, seed: 1}
  workers: 1
model:
  layers:
    - {type: linear, out_features: 4000}
    - {type: linear, out_features: 10}
  loss: {type: cross_entropy}
optimizer: {type: adam, lr: 0.001}
train: {batch_size: 64, max_steps: 1, log_every: 1}
backend: {threads: 1}
)";
  const std::string overrides = " train.micro_batch_size=auto train.memory_limit_mib=100";
  const std::string error_at_key =
      "<command line>:1:24: error: train.micro_batch_size: auto: even a micro-batch of 1 needs ";
  // plan: the plan at micro-batch 1, then the error.
  const auto planned = run_trainer("plan " + config.string() + overrides, true);
  INFO(planned.out);
  CHECK(planned.code == 2);
  const auto plan_at = planned.out.find("batch 64 = micro 1 x accumulation 64");
  const auto total_at = planned.out.find("  total ");
  const auto error_at = planned.out.find(error_at_key);
  CHECK(plan_at != std::string::npos);
  CHECK(total_at != std::string::npos);
  REQUIRE(error_at != std::string::npos);
  CHECK(total_at < error_at);
  // The plan's verdict gives the advice; its error points there, not again.
  const auto advice_at = planned.out.find("model.recompute cannot help");
  CHECK(advice_at < error_at);
  CHECK(planned.out.find("model.recompute cannot help", error_at) == std::string::npos);
  CHECK(planned.out.find("needs", error_at) < planned.out.find("(itemised above)", error_at));
  // The error's figure is the plan's total, as printed.
  const auto total_end = planned.out.find(" MiB", total_at);
  REQUIRE(total_end != std::string::npos);
  std::string total = planned.out.substr(total_at + 8, total_end - total_at - 8);
  total.erase(0, total.find_first_not_of(' '));
  CHECK(planned.out.find(error_at_key + total + " MiB (itemised above)") == error_at);
  // run: refused before the run directory exists, with the advice.
  const fs::path dir = kRoot / "wide_run";
  fs::remove_all(dir);
  const auto ran =
      run_trainer("run " + config.string() + " --out " + dir.string() + overrides, true);
  INFO(ran.out);
  CHECK(ran.code == 2);
  CHECK(ran.out.find(error_at_key) == 0);
  CHECK(ran.out.find("(`trainer plan` itemises it)") != std::string::npos);
  CHECK(ran.out.find("model.recompute cannot help") != std::string::npos);
  CHECK_FALSE(fs::exists(dir));
  // validate: the same, on the CPU.
  const auto validated = run_trainer("validate " + config.string() + overrides, true);
  CHECK(validated.code == 2);
  CHECK(validated.out == ran.out);
  // Activations over the limit: recompute may help, and is what it advises.
  const auto conv = run_trainer("validate " + write_config().string() +
                                    " train.micro_batch_size=auto train.memory_limit_mib=1",
                                true);
  INFO(conv.out);
  CHECK(conv.code == 2);
  CHECK(conv.out.find("error: train.micro_batch_size: auto: even a micro-batch of 1") !=
        std::string::npos);
  CHECK(conv.out.find("model.recompute: [blocks or layers]") != std::string::npos);
  CHECK(conv.out.find("cannot help") == std::string::npos);
  // A batchnorm over features takes no micro-batch of 1 (one value per
  // channel): the smallest it takes is the one that does not fit, named so,
  // and no batchnorm error about a micro-batch nobody asked for.
  const fs::path normed = kRoot / "normed.yaml";
  std::ofstream(normed) << R"(name: normed
data:
  train: {type: synthetic, shape: [4000], classes: 10, size: 64, seed: 1}
model:
  layers:
    - {type: linear, out_features: 4000}
    - {type: batchnorm}
    - {type: linear, out_features: 10}
optimizer: {type: adam, lr: 0.001}
train: {batch_size: 64, max_steps: 1}
)";
  for (const std::string auto_too : {"", " train.micro_batch_size=auto"}) {
    const auto r =
        run_trainer("validate " + normed.string() + " train.memory_limit_mib=100" + auto_too, true);
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK(r.out.find(" 2 (the smallest the model takes)") != std::string::npos);
    CHECK(r.out.find("one per channel") == std::string::npos);
  }
}

TEST_CASE("a run whose plan does not fit train.memory_limit_mib is refused before it starts") {
  const fs::path config = write_config();
  const fs::path dir = kRoot / "over_limit";
  fs::remove_all(dir);
  const double at16 = plan_figure(config, "train.micro_batch_size=16", "total");
  // Room for micro-batch 16 with the headroom, not for the configured 32.
  const int limit = static_cast<int>(std::ceil(at16 / 0.9)) + 1;
  const std::string run = "run " + config.string() + " --out " + dir.string() +
                          " train.memory_limit_mib=" + std::to_string(limit);
  const auto refused = run_trainer(run, true);
  INFO(refused.out);
  CHECK(refused.code == 2);
  CHECK(refused.out.find("<command line>:1:24: error: train.memory_limit_mib: the memory plan "
                         "needs ") == 0);
  CHECK(refused.out.find("does not fit by") != std::string::npos);
  CHECK(refused.out.find("train.micro_batch_size: auto -> micro-batch 16 x accumulation 2") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(dir));  // nothing started, no run directory
  // validate finds it too, with the same words.
  const auto validated = run_trainer(
      "validate " + config.string() + " train.memory_limit_mib=" + std::to_string(limit), true);
  CHECK(validated.code == 2);
  CHECK(validated.out == refused.out);
  // Its first suggestion runs.
  CHECK(run_trainer(run + " train.micro_batch_size=16").code == 0);
}

TEST_CASE("CPU ranks on one machine each plan for their share of its memory") {
  const std::string plan = std::string(TRAINER_BINARY) + " plan " + write_config().string() +
                           " train.memory_limit_mib=100";
  const auto alone = run_command(plan);
  INFO(alone.out);
  CHECK(plan_line(alone.out, "limit") == Approx(100));
  // Rank 0 of 2 on this machine (as mpirun starts it): half the limit.
  const auto shared = run_command(
      "OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_LOCAL_SIZE=2 "
      "OMPI_COMM_WORLD_LOCAL_RANK=0 " +
      plan);
  INFO(shared.out);
  CHECK(plan_line(shared.out, "limit") == Approx(50));
  CHECK_THAT(shared.out, Catch::Contains("(50.00 MiB for each of the 2 ranks on this machine)"));
  // Before trainer's own launcher starts 2 ranks here: the same share, so
  // `validate`, the launcher's check and the ranks' agree.
  const auto two = run_command(plan + " devices.world_size=2");
  INFO(two.out);
  CHECK(plan_line(two.out, "limit") == Approx(50));
  // A launcher that does not say how many ranks share this node: no share assumed.
  const auto unknown = run_command("PMI_RANK=0 PMI_SIZE=8 " + plan);
  INFO(unknown.out);
  CHECK(plan_line(unknown.out, "limit") == Approx(100));
  // Without a limit: the machine's memory is shared, but each rank has a
  // ulimit -v of its own whole (each process gets one).
  const std::string free_plan = std::string(TRAINER_BINARY) + " plan " + write_config().string();
  const auto machine_share = run_command(free_plan + " devices.world_size=2");
  const auto capped_alone = run_command("ulimit -v 3000000; " + free_plan);
  const auto capped_two = run_command("ulimit -v 3000000; " + free_plan + " devices.world_size=2");
  INFO(capped_alone.out << capped_two.out);
  const double room = plan_line(capped_alone.out, "available");
  if (plan_line(machine_share.out, "available") > 1.2 * room)  // the share is not the smaller
    CHECK(plan_line(capped_two.out, "available") == Approx(room).epsilon(0.05));
}

TEST_CASE("the plan counts the loader batches an epoch can fill, and offers fewer") {
  const fs::path config = write_config();
  // 256 samples in batches of 32: 8 batches an epoch, 1.5 MiB each.
  const auto many = run_trainer("plan " + config.string() + " data.prefetch=1024");
  INFO(many.out);
  REQUIRE(many.code == 0);
  CHECK(many.out.find("(8 batches in flight)") != std::string::npos);
  CHECK(plan_line(many.out, "loader buffers") == Approx(12.0).margin(0.01));
  const auto inline_batches = run_trainer("plan " + config.string() + " data.workers=0");
  CHECK(inline_batches.out.find("(1 batch in flight)") != std::string::npos);
  // A limit that the plan with 2 batches in flight fits and the one with 8 does not.
  const double at2 = plan_figure(config, "data.prefetch=2", "total");
  const int limit = static_cast<int>(std::ceil(at2 / 0.9)) + 1;
  const auto refused =
      run_trainer("validate " + config.string() +
                      " data.prefetch=8 train.memory_limit_mib=" + std::to_string(limit),
                  true);
  INFO(refused.out);
  CHECK(refused.code == 2);
  char expected[64];
  std::snprintf(expected, sizeof expected, "data.prefetch: 2 -> %.2f MiB\n", at2);
  CHECK(refused.out.find(expected) != std::string::npos);
  // An option that is not enough alone says so.
  const auto short_of_it =
      run_trainer("validate " + config.string() +
                      " data.prefetch=8 train.memory_limit_mib=" + std::to_string(limit / 2),
                  true);
  std::snprintf(expected, sizeof expected, "data.prefetch: 2 -> %.2f MiB (not enough alone)", at2);
  CHECK(short_of_it.out.find(expected) != std::string::npos);
}

TEST_CASE("a plan larger than the memory available is refused before the run allocates it") {
  const fs::path config = write_config();
  const fs::path dir = kRoot / "beyond_available";
  fs::remove_all(dir);
  // Under a 4 GB address-space limit a micro-batch of 4096 (about 10 GiB of
  // activations) cannot be allocated.
  const auto r =
      run_command("ulimit -v 4000000; " + std::string(TRAINER_BINARY) + " run " + config.string() +
                  " --out " + dir.string() + " train.batch_size=4096 data.train.size=4096");
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK(r.out.find("error: train.batch_size: the memory plan needs ") != std::string::npos);
  CHECK(r.out.find(" MiB available on cpu (train.memory_limit_mib, when set, is planned for "
                   "instead): the run would fail allocating it") != std::string::npos);
  CHECK(r.out.find("train.micro_batch_size: auto -> micro-batch") != std::string::npos);
  CHECK_FALSE(fs::exists(dir));
}

TEST_CASE("an allocation that fails prints the memory figures and the plan's advice") {
  const fs::path config = write_config();
  const fs::path dir = kRoot / "oom";
  fs::remove_all(dir);
  // A limit far above the 4 GB address-space limit: the plan is held to the
  // limit, and the allocation fails.
  const auto r = run_command(
      "ulimit -v 4000000; " + std::string(TRAINER_BINARY) + " run " + config.string() + " --out " +
      dir.string() + " train.batch_size=4096 data.train.size=4096 train.memory_limit_mib=100000");
  INFO(r.out);
  CHECK(r.code == 1);
  CHECK(r.out.find("error: out of host memory") != std::string::npos);
  CHECK(r.out.find("the plan for micro-batch 4096") != std::string::npos);
  CHECK(r.out.find("does not fit by") != std::string::npos);
  CHECK(r.out.find("train.micro_batch_size: auto -> micro-batch") != std::string::npos);
}

TEST_CASE("host memory that runs out outside the arena is reported as such, with what to check") {
  const fs::path config = write_config();
  const fs::path dir = kRoot / "oom_outside_arena";
  fs::remove_all(dir);
  // An address-space limit (ulimit -v, KiB) under which the run trains with
  // 256 samples: the smallest of these that this build needs (a build with
  // CUDA maps more libraries). The loader's order of 100 million samples
  // (800 MB, more than the steps between them) cannot be allocated under it.
  const auto run_limited = [&](long limit_kib, const std::string& size, const fs::path& out) {
    fs::remove_all(out);
    return run_command("/bin/sh -c 'ulimit -v " + std::to_string(limit_kib) + "; " +
                       std::string(TRAINER_BINARY) + " run " + config.string() + " --out " +
                       out.string() + " data.train.size=" + size + "'");
  };
  long limit_kib = 0;
  for (const long candidate : {500'000L, 700'000L, 900'000L, 1'100'000L, 1'300'000L, 1'500'000L})
    if (run_limited(candidate, "256", kRoot / "oom_baseline").code == 0) {
      limit_kib = candidate;
      break;
    }
  REQUIRE(limit_kib > 0);
  const auto r = run_limited(limit_kib, "100000000", dir);
  INFO(r.out);
  CHECK(r.code == 1);
  CHECK(r.out.find("error: out of host memory: an allocation failed (std::bad_alloc); the "
                   "machine, or a limit on this process (ulimit -v, a cgroup), has no more memory "
                   "to give\n    check the data sizes") != std::string::npos);
  CHECK(r.out.find("train.batch_size / train.micro_batch_size") != std::string::npos);
  CHECK(r.out.find("run `trainer plan CONFIG` for the memory plan") != std::string::npos);
  CHECK(r.out.find("error: std::bad_alloc") == std::string::npos);
}

TEST_CASE("batch splits that cannot hold are errors at the key") {
  const fs::path config = write_config();
  const auto fixed = run_trainer(
      "validate " + config.string() + " train.micro_batch_size=auto train.accumulation=2", true);
  CHECK(fixed.code == 2);
  CHECK(fixed.out.find("train.accumulation: micro_batch_size: auto chooses the accumulation") !=
        std::string::npos);
  const auto uneven =
      run_trainer("validate " + config.string() + " train.micro_batch_size=12", true);
  CHECK(uneven.code == 2);
  CHECK(uneven.out.find("<command line>:1:") != std::string::npos);
  CHECK(uneven.out.find("train.micro_batch_size") != std::string::npos);
}

TEST_CASE("a run whose micro-batch auto chose resumes with that choice, whatever memory is now") {
  const fs::path config = write_config();
  const fs::path part = kRoot / "auto_part", whole = kRoot / "auto_whole";
  for (const auto& d : {part, whole}) fs::remove_all(d);
  const double at16 = plan_figure(config, "train.micro_batch_size=16", "total");
  const std::string limit =
      " train.micro_batch_size=auto deterministic=true train.memory_limit_mib=" +
      std::to_string(static_cast<int>(std::ceil(at16 / 0.9)) + 1);
  const auto first =
      run_trainer("run " + config.string() + limit + " --out " + part.string(), true);
  INFO(first.out);
  REQUIRE(first.code == 0);
  REQUIRE(first.out.find("micro_batch_size: auto: micro-batch 16 x accumulation 2") !=
          std::string::npos);
  // A limit given now holds the kept choice too: refused, nothing changed.
  const std::string records = [&] {
    std::ifstream in(part / "metrics.jsonl");
    return std::string((std::istreambuf_iterator<char>(in)), {});
  }();
  // Its advice cannot be another micro-batch: the resume would refuse that.
  const double at8 = plan_figure(config, "train.micro_batch_size=8", "total");
  const int tight = static_cast<int>(std::ceil(at8 / 0.9)) + 1;
  REQUIRE(tight * 0.9 < at16);
  const auto refused = run_trainer("run --resume " + part.string() + " train.memory_limit_mib=" +
                                       std::to_string(tight) + " train.max_steps=4",
                                   true);
  INFO(refused.out);
  CHECK(refused.code == 2);
  CHECK(refused.out.find("error: train.memory_limit_mib: ") != std::string::npos);
  CHECK(refused.out.find("- the resume keeps micro-batch 16 x accumulation 2, as the run chose") !=
        std::string::npos);
  CHECK(refused.out.find("train.micro_batch_size: ") == std::string::npos);
  CHECK(refused.out.find("as the run chose\n") == std::string::npos);  // not after the error
  {
    std::ifstream in(part / "metrics.jsonl");
    CHECK(std::string((std::istreambuf_iterator<char>(in)), {}) == records);
  }
  // A batch record edited so that its parts do not make its whole: said,
  // naming manifest.json, and auto chooses again (here 32 x 1, which the
  // checkpoint's steps of 2 micro-batches refuse, naming the fix).
  const auto text_of = [](const fs::path& file) {
    std::ifstream in(file);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  };
  const std::string manifest_text = text_of(part / "manifest.json");
  nlohmann::json damaged = nlohmann::json::parse(manifest_text);
  damaged["batch"]["accumulation"] = 5;
  std::ofstream(part / "manifest.json") << damaged.dump();
  const auto damaged_record = run_trainer(
      "run --resume " + part.string() + " train.memory_limit_mib=0 train.max_steps=4", true);
  INFO(damaged_record.out);
  CHECK(damaged_record.code == 2);
  CHECK(damaged_record.out.find(
            "warning: " + (part / "manifest.json").string() +
            " records a batch of micro-batch 16 x accumulation 5 x 1 rank(s), which is not its "
            "global batch 32 (the file was edited or damaged): micro_batch_size: auto chooses "
            "again") != std::string::npos);
  CHECK(damaged_record.out.find("train.micro_batch_size=16 keeps the run's 2") !=
        std::string::npos);
  std::ofstream(part / "manifest.json") << manifest_text;
  CHECK(text_of(part / "metrics.jsonl") == records);
  // More memory now: auto alone would take the whole batch of 32 at once.
  const auto resumed = run_trainer(
      "run --resume " + part.string() + " train.memory_limit_mib=0 train.max_steps=4", true);
  INFO(resumed.out);
  REQUIRE(resumed.code == 0);
  CHECK(resumed.out.find("micro_batch_size: auto: micro-batch 16 x accumulation 2, as the run "
                         "chose") != std::string::npos);
  const auto straight = run_trainer(
      "run " + config.string() + limit + " train.max_steps=4 --out " + whole.string(), true);
  REQUIRE(straight.code == 0);
  const auto text = [](const fs::path& file) {
    std::ifstream in(file);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  };
  CHECK(text(part / "metrics.jsonl") == text(whole / "metrics.jsonl"));
}

TEST_CASE("the advice on memory rules out only what cannot help, and each option it gives works") {
  const std::string cnn = "configs/fashion_mnist_cnn.yaml train.batch_size=2 ";
  // Micro-batch 1 carries accumulation's gradient buffer; at micro-batch 2,
  // with recompute, the CNN fits: recompute is advised, not ruled out.
  const std::string tight = " train.memory_limit_mib=11 train.memory_headroom=0.05";
  const auto refused = run_trainer("validate " + cnn + "train.micro_batch_size=auto" + tight, true);
  INFO(refused.out);
  CHECK(refused.code == 2);
  CHECK(refused.out.find("cannot help") == std::string::npos);
  CHECK(refused.out.find("model.recompute: [blocks or layers]") != std::string::npos);
  CHECK(refused.out.find("less 5% headroom") != std::string::npos);
  const fs::path dir = kRoot / "recomputed";
  fs::remove_all(dir);
  CHECK(run_trainer("run " + cnn +
                    "train.micro_batch_size=auto 'model.recompute={every: 2}' "
                    "train.max_steps=1 train.eval_batches=1" +
                    tight + " --out " + dir.string())
            .code == 0);
  // Loader rings too large: no micro-batch fits, and data.prefetch still
  // is an option, whose figure fits.
  const std::string mlp = "configs/fashion_mnist_mlp.yaml train.batch_size=16 ";
  const auto rings = run_trainer("plan " + mlp + "data.prefetch=64 train.memory_limit_mib=8", true);
  INFO(rings.out);
  const auto prefetch = rings.out.find("- data.prefetch: 2 -> ");
  REQUIRE(prefetch != std::string::npos);
  CHECK(rings.out.substr(prefetch, rings.out.find('\n', prefetch) - prefetch).find("not enough") ==
        std::string::npos);
  CHECK(run_trainer("validate " + mlp + "data.prefetch=2 train.memory_limit_mib=8").code == 0);
  // With train.accumulation given, auto is offered in its place.
  const auto fixed = run_trainer(
      "validate " + write_config().string() + " train.accumulation=1 train.memory_limit_mib=" +
          std::to_string(
              static_cast<int>(std::ceil(
                  plan_figure(write_config(), "train.micro_batch_size=8", "total") / 0.9)) +
              1),
      true);
  INFO(fixed.out);
  CHECK(fixed.code == 2);
  CHECK(fixed.out.find("- train.micro_batch_size: auto, without train.accumulation -> "
                       "micro-batch ") != std::string::npos);
}
