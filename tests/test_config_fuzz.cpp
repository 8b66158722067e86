// labels: cpu
// Mutated configs against the promise that bad input never crashes or hangs,
// and that a config error is found by `trainer validate`, not by a run that
// has started: each trial sets one to three settings of a shipped config
// (every leaf of its resolved tree, lists included) to a value near the old
// one, a boundary, another type or another choice, then runs `validate` and a
// two-step `run`. Seeded: the same trials every time (TRAINER_FUZZ_TRIALS
// trials, 24 by default; TRAINER_FUZZ_SEED picks another set).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "run_command.h"
#include "runner/config/load.h"

namespace fs = std::filesystem;
using trainer::config::Node;
using trainer::testing::run_command;

namespace {

struct Leaf {
  std::string path;  // an override key: "optimizer.lr", "model.layers[3].out_features"
  std::string text;  // its value in the resolved config
};

void collect_leaves(const Node& node, const std::string& path, std::vector<Leaf>& out) {
  if (node.is_map()) {
    for (std::size_t i = 0; i < node.size(); ++i)
      collect_leaves(node.value_at(i), path.empty() ? node.key_at(i) : path + "." + node.key_at(i),
                     out);
  } else if (node.is_sequence()) {
    for (std::size_t i = 0; i < node.size(); ++i)
      collect_leaves(node.value_at(i), path + "[" + std::to_string(i) + "]", out);
    out.push_back({path, "[]"});  // the whole list, too
  } else if (!path.empty() && path.rfind("output", 0) != 0) {
    out.push_back({path, node.text()});
  }
}

bool is_integer(const std::string& s) {
  return !s.empty() && s.find_first_not_of("-0123456789") == std::string::npos;
}

// A value for a setting whose resolved text is `old`.
std::string mutated(const std::string& old, std::mt19937& rng) {
  const auto pick = [&](const std::vector<std::string>& choices) {
    return choices[std::uniform_int_distribution<std::size_t>(0, choices.size() - 1)(rng)];
  };
  if (std::uniform_int_distribution<int>(0, 9)(rng) == 0)  // another type altogether
    return pick({"null", "[]", "{}", "x", "-1", "1e30", "nan", "true", "[1, 2]", "/nonexistent"});
  if (old == "true" || old == "false") return old == "true" ? "false" : "true";
  if (is_integer(old)) {
    const long long v = std::stoll(old);
    return pick({"0", "1", "2", "3", "7", "64", "1000", std::to_string(v * 2),
                 std::to_string(v > 1 ? v / 2 : 1), std::to_string(v + 1)});
  }
  char* end = nullptr;
  std::strtod(old.c_str(), &end);
  if (!old.empty() && end && *end == '\0')
    return pick({"0", "1e-8", "0.1", "0.5", "0.9", "1", "2", "10"});
  return pick({"adam",        "adamw",       "sgd",
               "bf16",        "fp16",        "tf32",
               "fp32",        "cosine",      "step",
               "multistep",   "onecycle",    "linear",
               "constant",    "relu",        "gelu",
               "none",        "max",         "min",
               "mse",         "conv2d",      "linear",
               "batchnorm",   "dropout",     "maxpool2d",
               "add",         "flatten",     "global_avgpool",
               "random_flip", "random_crop", "normalize",
               "scale",       "synthetic",   "idx",
               "eval.loss",   "train.loss",  "x"});
}

std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

}  // namespace

TEST_CASE("mutated configs: no crash or hang, and every config error is found by validate") {
  const std::vector<std::string> configs = {"configs/fashion_mnist_mlp.yaml",
                                            "configs/fashion_mnist_cnn.yaml",
                                            "configs/fashion_mnist_resnet.yaml"};
  std::vector<std::vector<Leaf>> leaves(configs.size());
  for (std::size_t c = 0; c < configs.size(); ++c)
    collect_leaves(trainer::config::load_config(configs[c]).resolved, "", leaves[c]);

  const fs::path root = fs::temp_directory_path() / "trainer_test_config_fuzz";
  fs::remove_all(root);
  fs::create_directories(root);
  // Short runs whatever the mutations say; these come last, so they win.
  const std::string fixed =
      " train.max_steps=2 train.epochs=1 train.eval_batches=2 "
      "data.workers=1 output.dir=" +
      (root / "runs").string();
  std::mt19937 rng(static_cast<std::uint32_t>(env_int("TRAINER_FUZZ_SEED", 20261130)));
  const int trials = env_int("TRAINER_FUZZ_TRIALS", 24);
  int validated = 0, ran = 0;
  for (int t = 0; t < trials; ++t) {
    const std::size_t c = std::uniform_int_distribution<std::size_t>(0, configs.size() - 1)(rng);
    std::string overrides;
    const int count = std::uniform_int_distribution<int>(1, 3)(rng);
    for (int m = 0; m < count; ++m) {
      const Leaf& leaf =
          leaves[c][std::uniform_int_distribution<std::size_t>(0, leaves[c].size() - 1)(rng)];
      overrides += " " + quoted(leaf.path + "=" + mutated(leaf.text, rng));
    }
    const std::string args = configs[c] + overrides + fixed;
    const std::string trainer = "timeout -k 10 180 " + std::string(TRAINER_BINARY);
    const auto validate = run_command(trainer + " validate " + args);
    const auto run = run_command(trainer + " run " + args + " --out " +
                                 (root / ("trial-" + std::to_string(t))).string());
    INFO("trial " << t << ": " << args << "\nvalidate (exit " << validate.code << "):\n"
                  << validate.out << "\nrun (exit " << run.code << "):\n"
                  << run.out);
    // Exit codes: 0 ok, 1 runtime failure, 2 usage or config error. Anything
    // else is a crash (128 + signal) or a hang (124).
    CHECK((validate.code == 0 || validate.code == 2));
    CHECK((run.code == 0 || run.code == 1 || run.code == 2));
    for (const auto* out : {&validate.out, &run.out}) {
      CHECK(out->find("terminate called") == std::string::npos);
      CHECK(out->find("Sanitizer") == std::string::npos);
    }
    // What validate rejects, run rejects; what it accepts, no run rejects as a
    // config error.
    if (validate.code == 2) CHECK(run.code == 2);
    if (validate.code == 0) CHECK(run.code != 2);
    if (run.code == 1) CHECK(run.out.find("error: ") != std::string::npos);
    validated += validate.code == 0;
    ran += run.code == 0;
  }
  // The mutations are mild enough that some configs stay valid and train.
  INFO(validated << " of " << trials << " validated, " << ran << " ran");
  CHECK(ran > 0);
  CHECK(validated < trials);
  fs::remove_all(root);
}
