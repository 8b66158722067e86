// labels: cpu
// The benchmark half of scripts/gpu-check.sh, checked where there is no GPU:
// bench/gpu/torch_peer.py runs its whole code path on the CPU (--device cpu
// --small) and writes every figure the GPU run reads, and
// bench/gpu/gpu_results.py turns that JSON and real `trainer time` output into
// the ratios of results.json. A GPU machine is lent for minutes at a time: a
// broken script or a changed `trainer time` line must fail here, not there.
// No figure here says anything about a GPU. Skipped when /usr/bin/python3 has
// no torch.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "run_command.h"
#include "test_resume_fixtures.h"

using namespace trainer::testing;

std::string trainer_test_skip_reason() {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0)
    return "/usr/bin/python3 cannot import torch (install python3-torch)";
  return {};
}

namespace {

// `trainer time` of `config` with `overrides`, its output saved as the GPU
// script saves it; returns the samples/s it printed.
double time_into(const TempDir& tmp, const std::string& key, const std::string& config,
                 const std::string& overrides) {
  const std::string log = tmp / ("trainer_time_" + key + ".log");
  const auto timed = run_trainer("time " + config + " " + overrides + " --steps 3 > " + log, true);
  INFO(read_text(log));
  REQUIRE(timed.code == 0);
  const std::string text = read_text(log);
  const auto at = text.find(" samples/s)");
  REQUIRE(at != std::string::npos);
  const auto open = text.rfind('(', at);
  return std::stod(text.substr(open + 1, at - open - 1));
}

}  // namespace

TEST_CASE("the GPU check's PyTorch peer and results composer work on real output") {
  TempDir tmp("gpu-check-results");
  const auto peer = run_command(
      "/usr/bin/python3 bench/gpu/torch_peer.py --device cpu --small "
      "--steps 2 --warmup 1 --out " +
          (tmp / "torch_peer.json"),
      true);
  INFO(peer.out);
  REQUIRE(peer.code == 0);
  const auto torch_side = nlohmann::json::parse(read_text(tmp / "torch_peer.json"));
  for (const char* model : {"mlp", "cnn", "resnet"})
    for (const char* precision : {"fp32", "tf32", "bf16"})
      CHECK(torch_side["train_samples_per_s"][std::string(model) + "/" + precision].get<double>() >
            0);
  REQUIRE(torch_side["bf16_gemm_tflops"].get<double>() > 0);
  const auto& large = torch_side["large_bf16_mlp"];
  REQUIRE(large["width"] == 256);
  REQUIRE(large["depth"] == 4);

  // The trainer's side as the GPU script runs it, on the CPU, the large MLP
  // at the peer's small width.
  const double mlp_rate = time_into(tmp, "mlp_fp32", "configs/fashion_mnist_mlp.yaml", "");
  const std::string small_layers =
      "'model.layers=[{type: linear, out_features: 256}, {type: "
      "relu}, {type: linear, out_features: 256}, {type: relu}, {type: "
      "linear, out_features: 256}, {type: relu}, {type: linear, "
      "out_features: 256}]'";
  const std::string small_data =
      "'data.train.shape=[256]' data.train.classes=256 "
      "data.train.size=512 train.batch_size=256 'devices=[]' ";
  const double large_rate =
      time_into(tmp, "large_mlp_bf16", "bench/gpu/large_mlp.yaml", small_data + small_layers);
  time_into(tmp, "large_mlp_bf16_unfused", "bench/gpu/large_mlp.yaml",
            small_data + small_layers + " backend.fuse_activations=false");
  write_text(tmp / "doctor.txt", "status: cpu only\n");
  write_text(tmp / "test_gpu_ops.log", "FAILED:\n  the reason\n");

  const auto composed = run_command(
      "STATUS=passed STAGES='tests bench' RCS='doctor=0\ntest_gpu_ops=1' "
      "OUTDIR=" +
          tmp.path().string() + " /usr/bin/python3 bench/gpu/gpu_results.py",
      true);
  INFO(composed.out);
  REQUIRE(composed.code == 0);
  const auto results = nlohmann::json::parse(read_text(tmp / "results.json"));
  CHECK(results["status"] == "passed");
  CHECK(results["stages"] == nlohmann::json::array({"tests", "bench"}));
  CHECK(results["exit_codes"]["test_gpu_ops"] == "1");
  CHECK(results["doctor"] == "status: cpu only\n");
  CHECK(results["log_tails"]["test_gpu_ops.log"].get<std::string>().find("the reason") !=
        std::string::npos);

  const double torch_mlp = torch_side["train_samples_per_s"]["mlp/fp32"].get<double>();
  CHECK(results["trainer_over_torch_samples_per_s"]["mlp_fp32"].get<double>() ==
        Approx(mlp_rate / torch_mlp).margin(0.001));
  CHECK(results["trainer_time"]["mlp_fp32"]["steps_ran"].get<std::string>().find("eager") !=
        std::string::npos);
  // 6 FLOPs per weight per sample: 2 in the forward GEMM, 4 in the backward's two.
  const double trainer_tflops = 6.0 * 256 * 256 * 4 * large_rate / 1e12;
  CHECK(results["large_bf16_mlp"]["trainer_tflops"].get<double>() ==
        Approx(trainer_tflops).margin(0.0005));
  CHECK(results["large_bf16_mlp"]["fraction_of_gemm_rate"].get<double>() ==
        Approx(trainer_tflops / torch_side["bf16_gemm_tflops"].get<double>())
            .epsilon(0.01)
            .margin(0.0005));
  CHECK(results["large_bf16_mlp_epilogue_speedup"].get<double>() > 0);
}
