// labels: cpu train
// Training against PyTorch: the same model from the same initial state on the
// same batches, trained by the trainer and by torch for a few steps, gives
// the same loss at every step and the same final weights and batchnorm
// statistics (float32 rounding apart). Cases: one-cycle schedules that cycle
// the momentum (SGD's momentum, Adam's beta1: OneCycleLR's cycle_momentum,
// also in fp16), SGD with Nesterov momentum under cosine, AdamW's decoupled
// decay under linear, SGD with weight decay and label smoothing under step,
// a CNN (conv, batchnorm, average pooling counting the padding, max pooling),
// a residual network (add, global average pooling) under AdamW with warm-up,
// an MLP with layernorm, both GELUs, SiLU and a concatenation, gradient
// clipping, also over accumulated micro-batches, frozen layers, a layer with
// its own learning-rate factor, and an average of the weights. tests/test_torch_parity.py
// writes the data and the initial state and runs PyTorch's side. Skipped when /usr/bin/python3 has
// no torch.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "run_command.h"
#include "runner/checkpoint/checkpoint_store.h"
#include "runner/checkpoint/safetensors.h"
#include "test_resume_fixtures.h"

using namespace trainer::testing;

std::string trainer_test_skip_reason() {
  if (std::system("/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1") != 0)
    return "/usr/bin/python3 cannot import torch and numpy (install python3-torch)";
  return {};
}

namespace {

constexpr int kSteps = 12;

const char* const kMlp =
    "    - {type: linear, name: fc1, out_features: 16}\n"
    "    - {type: relu}\n"
    "    - {type: linear, name: fc2, out_features: 4}\n";

const char* const kCnn =
    "    - {type: conv2d, name: conv, out_channels: 4, kernel: 3, padding: 1}\n"
    "    - {type: batchnorm, name: bn}\n"
    "    - {type: relu}\n"
    "    - {type: avgpool2d, kernel: 3, stride: 2, padding: 1, count_include_pad: true}\n"
    "    - {type: maxpool2d, kernel: 2}\n"
    "    - {type: flatten}\n"
    "    - {type: linear, name: fc, out_features: 4}\n";

const char* const kResidual =
    "    - {type: conv2d, name: stem, out_channels: 4, kernel: 3, padding: 1, bias: false}\n"
    "    - {type: batchnorm, name: stem_bn}\n"
    "    - {type: relu, name: stem_relu}\n"
    "    - {type: conv2d, name: conv1, out_channels: 4, kernel: 3, padding: 1, bias: false}\n"
    "    - {type: batchnorm, name: bn1}\n"
    "    - {type: relu}\n"
    "    - {type: conv2d, name: conv2, out_channels: 4, kernel: 3, padding: 1, bias: false}\n"
    "    - {type: batchnorm, name: bn2}\n"
    "    - {type: add, name: sum, inputs: [bn2, stem_relu]}\n"
    "    - {type: relu}\n"
    "    - {type: global_avgpool}\n"
    "    - {type: linear, name: fc, out_features: 4}\n";

const char* const kLayerNormMlp =
    "    - {type: linear, name: fc1, out_features: 16}\n"
    "    - {type: layernorm, name: ln}\n"
    "    - {type: gelu}\n"
    "    - {type: linear, name: fc2, out_features: 8}\n"
    "    - {type: silu, name: h}\n"
    "    - {type: concat, inputs: [h, input]}\n"
    "    - {type: linear, name: fc3, out_features: 12}\n"
    "    - {type: gelu, approximate: tanh}\n"
    "    - {type: linear, name: fc4, out_features: 4}\n";

struct ParityCase {
  std::string name;       // test_torch_parity.py's CASE
  std::string optimizer;  // the trainer's optimizer and schedule sections
  std::string schedule;
  std::string loss = "{type: cross_entropy}";
  std::string layers = kMlp;  // the trainer's model.layers, as PyTorch's model for CASE
  double ema_decay = 0;       // train.ema_decay, and an evaluation of the averages
  bool ema_warmup = false;    // train.ema_warmup
};

std::string parity_config(const ParityCase& c, int log_every) {
  return "name: parity\n"
         "seed: 1\n"
         "deterministic: true\n"
         "data:\n"
         "  train: {type: npy, x: x.npy, y: y.npy, classes: 4}\n" +
         std::string(c.ema_decay > 0 ? "  eval: {type: npy, x: x.npy, y: y.npy, classes: 4}\n"
                                     : "") +
         "  shuffle: false\n"
         "  drop_last: true\n"
         "  workers: 1\n"
         "model:\n"
         "  layers:\n" +
         c.layers + "  loss: " + c.loss + "\n  init_from: init.safetensors\n" +
         "optimizer: " + c.optimizer + "\n" + "schedule: " + c.schedule + "\n" +
         "train: {max_steps: " + std::to_string(kSteps) +
         ", batch_size: 16, log_every: " + std::to_string(log_every) +
         ", ema_decay: " + std::to_string(c.ema_decay) +
         ", ema_warmup: " + (c.ema_warmup ? "true" : "false") + "}\n" + "backend: {threads: 1}\n";
}

// The float32 values of tensor `name` in a safetensors file.
std::vector<float> tensor_values(const trainer::checkpoint::Safetensors& file,
                                 const std::string& name) {
  const auto* t = file.find(name);
  REQUIRE(t != nullptr);
  REQUIRE(t->dtype == "F32");
  std::vector<float> values(t->bytes.size() / sizeof(float));
  std::memcpy(values.data(), t->bytes.data(), t->bytes.size());
  return values;
}

// The tensors of safetensors file `path` against PyTorch's (name: flattened values).
void check_tensors(const std::string& path, const nlohmann::json& want, double margin) {
  INFO(path);
  const auto file = trainer::checkpoint::read_safetensors(path);
  REQUIRE(want.size() == file.tensors.size());
  for (const auto& [name, values] : want.items()) {
    INFO(name);
    const std::vector<float> got = tensor_values(file, name);
    REQUIRE(got.size() == values.size());
    for (std::size_t k = 0; k < got.size(); ++k)
      CHECK(got[k] == Approx(values[k].get<double>()).epsilon(0).margin(margin));
  }
}

// Runs PyTorch's side of case `c`, then the trainer (with `overrides`, and a
// record every `log_every` steps: the mean loss of those steps), and compares
// the losses and the final state to within `margin`.
void check_parity(const ParityCase& c, const std::string& overrides = "", int log_every = 1,
                  double margin = 2e-5) {
  INFO(c.name << " " << overrides);
  TempDir tmp("torch-parity-" + c.name);
  const auto torch =
      run_command("/usr/bin/python3 tests/test_torch_parity.py " + tmp.path().string() + " " +
                      c.name + " " + std::to_string(kSteps),
                  false);
  INFO(torch.out);
  REQUIRE(torch.code == 0);
  const auto torch_side = nlohmann::json::parse(torch.out);
  const auto& want = torch_side["losses"];
  const auto& momenta = torch_side["momenta"];
  REQUIRE(want.size() == kSteps);

  write_text(tmp / "parity.yaml", parity_config(c, log_every));
  const auto run = run_trainer(
      "run " + (tmp / "parity.yaml") + " " + overrides + " --out " + (tmp / "run"), true);
  INFO(run.out);
  REQUIRE(run.code == 0);
  const auto records = metrics_records(tmp / "run", "train");
  REQUIRE(records.size() == static_cast<std::size_t>(kSteps / log_every));
  for (int i = 0; i < kSteps / log_every; ++i) {
    const int last = (i + 1) * log_every;
    double mean = 0;
    for (int step = last - log_every; step < last; ++step)
      mean += want[step].get<double>() / log_every;
    INFO("step " << last);
    CHECK(records[i]["step"] == last);
    CHECK(records[i]["loss"].get<double>() == Approx(mean).epsilon(0).margin(margin));
    // A cycled momentum is recorded: the one the window's last update used.
    if (c.schedule.find("cycle_momentum: true") != std::string::npos)
      CHECK(records[i]["momentum"].get<double>() ==
            Approx(momenta[last - 1].get<double>()).epsilon(1e-6));
    else
      CHECK_FALSE(records[i].contains("momentum"));
  }

  // The final weights (and batchnorm's running statistics): the last
  // checkpoint's; with averaging, its averaged ones too, and the evaluation
  // of them at the end.
  const trainer::checkpoint::CheckpointStore store(tmp / "run");
  const std::string last = store.find("last", "eval.loss", false);
  check_tensors(last + "/model.safetensors", torch_side["final"], margin);
  if (c.ema_decay > 0) {
    check_tensors(last + "/model_ema.safetensors", torch_side["ema"], margin);
    const auto evals = metrics_records(tmp / "run", "eval");
    REQUIRE_FALSE(evals.empty());
    CHECK(evals.back()["step"] == kSteps);
    CHECK(evals.back()["loss"].get<double>() ==
          Approx(torch_side["ema_eval_loss"].get<double>()).epsilon(0).margin(margin));
  }
}

}  // namespace

TEST_CASE("SGD under a one-cycle schedule that cycles the momentum trains as PyTorch does") {
  const ParityCase sgd{"sgd_onecycle_momentum",
                       "{type: sgd, lr: 0.1, momentum: 0, weight_decay: 0}",
                       "{type: onecycle, max_lr: 0.5, pct_start: 0.3, cycle_momentum: true}"};
  check_parity(sgd);
  // fp16 with loss scaling: the update takes its rate and momentum from the
  // window of the schedule the host sends at each log point (4 updates
  // ahead). fp16 rounding stays within 2e-3 of PyTorch's float32 losses;
  // without the momentum cycle they differ by 0.1 to 0.5 from step 4 on.
  check_parity(sgd, "precision=fp16", 4, 2e-3);
}

TEST_CASE("Adam under a one-cycle schedule that cycles beta1 trains as PyTorch does") {
  check_parity({"adam_onecycle_momentum", "{type: adam, lr: 0.01, weight_decay: 0}",
                "{type: onecycle, max_lr: 0.02, pct_start: 0.25, cycle_momentum: true, "
                "base_momentum: 0.8, max_momentum: 0.9}"});
}

TEST_CASE("SGD with Nesterov momentum under a cosine schedule trains as PyTorch does") {
  check_parity({"sgd_nesterov_cosine",
                "{type: sgd, lr: 0.2, momentum: 0.9, nesterov: true, weight_decay: 0}",
                "{type: cosine}"});
}

TEST_CASE("AdamW's decoupled decay under a linear schedule trains as PyTorch does") {
  check_parity({"adamw_linear",
                "{type: adamw, lr: 0.01, weight_decay: 0.05, weight_decay_params: all}",
                "{type: linear, min_lr: 0.001}"});
}

TEST_CASE(
    "SGD with weight decay and label smoothing under a step schedule trains as PyTorch does") {
  check_parity({"sgd_smoothing_step",
                "{type: sgd, lr: 0.3, momentum: 0.5, weight_decay: 0.01, weight_decay_params: all}",
                "{type: step, step_size: 4, gamma: 0.5}",
                "{type: cross_entropy, label_smoothing: 0.1}"});
}

TEST_CASE("a CNN with batchnorm and both poolings trains as PyTorch does") {
  check_parity(
      {"cnn_sgd",
       "{type: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.001, weight_decay_params: all}",
       "{type: cosine}", "{type: cross_entropy}", kCnn});
}

TEST_CASE("a residual network under AdamW with warm-up and cosine trains as PyTorch does") {
  // PyTorch's side: SequentialLR([LinearLR(1/3, total_iters=2), CosineAnnealingLR(T_max=9)],
  // milestones=[3]), the equivalence the README gives for warmup_steps.
  check_parity({"residual_adamw_warmup",
                "{type: adamw, lr: 0.02, weight_decay: 0.01, weight_decay_params: all}",
                "{type: cosine, warmup_steps: 3}", "{type: cross_entropy}", kResidual});
}

TEST_CASE("layernorm, both GELUs, SiLU and a concatenation train as PyTorch does") {
  check_parity({"layernorm_adam",
                "{type: adam, lr: 0.01, beta1: 0.8, beta2: 0.99, eps: 1.0e-6, weight_decay: 0}",
                "{type: constant}", "{type: cross_entropy}", kLayerNormMlp});
}

TEST_CASE("gradient clipping and accumulation over micro-batches train as PyTorch does") {
  // PyTorch: the whole batch of 16, then clip_grad_norm_(0.5). The trainer:
  // two micro-batches of 8 whose gradients accumulate, clipped inside the update.
  const ParityCase sgd{"sgd_clip", "{type: sgd, lr: 0.2, momentum: 0.9, weight_decay: 0}",
                       "{type: constant}"};
  check_parity(sgd, "train.clip_grad_norm=0.5");
  check_parity(sgd, "train.clip_grad_norm=0.5 train.micro_batch_size=8");
}

TEST_CASE("frozen layers (model.freeze) train as PyTorch's requires_grad_(False)") {
  // The first layer frozen: no gradient reaches it. The last: the gradient
  // passes through it to the first, which trains. Either way the frozen
  // weights end where they started (the final state is compared).
  const std::string sgd =
      "{type: sgd, lr: 0.2, momentum: 0.9, weight_decay: 0.01, "
      "weight_decay_params: all}";
  check_parity({"frozen_first", sgd, "{type: constant}"}, "model.freeze=[fc1]");
  check_parity({"frozen_last", sgd, "{type: constant}"}, "model.freeze=[fc2]");
}

TEST_CASE("a layer's learning-rate factor (model.lr_scale) trains as a PyTorch parameter group") {
  // PyTorch: fc1 in a group with lr 0.001, fc2 with 0.01, both under one
  // cosine schedule; AdamW's decoupled decay follows each group's rate.
  check_parity(
      {"adamw_groups", "{type: adamw, lr: 0.01, weight_decay: 0.05, weight_decay_params: all}",
       "{type: cosine}"},
      "'model.lr_scale={fc1: 0.1}'");
}

TEST_CASE(
    "an average of the weights (train.ema_decay) is kept and evaluated as timm's ModelEmaV2") {
  // The CNN: batchnorm's running statistics are averaged too, and the final
  // evaluation (in evaluation mode) is of the averages.
  ParityCase ema{
      "cnn_ema",
      "{type: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.001, weight_decay_params: all}",
      "{type: cosine}", "{type: cross_entropy}", kCnn};
  ema.ema_decay = 0.8;
  check_parity(ema);
  // Warmed up: smaller decays at first, as TensorFlow's num_updates rule.
  ema.name = "cnn_ema_warmup";
  ema.ema_decay = 0.99;
  ema.ema_warmup = true;
  check_parity(ema);
}
