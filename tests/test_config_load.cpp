// labels: cpu
// load_config on good fixtures: typed values, shorthands, extends merging,
// overrides, defaults and data paths resolved relative to the YAML file.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "runner/config/load.h"
#include "runner/config/validate_hooks.h"
#include "temp_dir.h"

using trainer::config::Config;
using trainer::config::load_config;
using trainer::config::load_config_text;
using trainer::testing::TempDir;
namespace fs = std::filesystem;

namespace {
const std::string kGood = std::string(TRAINER_TEST_DATA_DIR) + "/configs/good/";
}

TEST_CASE("every section of a full config is bound to the typed struct") {
  const Config c = load_config(kGood + "mlp.yaml");
  CHECK(c.name == "mlp-synthetic");
  CHECK(c.seed == 7);
  CHECK(c.deterministic);
  CHECK(c.optimizer.type == "adamw");
  CHECK(c.optimizer.lr == Approx(3e-4));
  CHECK(c.optimizer.weight_decay == Approx(0.01));
  CHECK(c.schedule.type == "cosine");
  CHECK(c.schedule.warmup_steps == 10);
  CHECK(c.train.epochs == 2);
  CHECK(c.train.batch_size == 32);
  CHECK(c.train.micro_batch_auto);
  CHECK(c.precision.mode == "bf16");  // `precision: bf16` shorthand
  CHECK(c.devices.cpu);
  CHECK(c.devices.gpus.empty());
  CHECK(c.data.workers == 1);
  REQUIRE(c.data.train);
  CHECK(c.data.train->type == "synthetic");
  CHECK(c.data.train->attrs.get_int("size") == 256);
  CHECK(c.data.train->attrs.get_int("seed") == 0);  // default filled
  REQUIRE(c.data.eval);
  CHECK(c.data.eval->attrs.get_int("seed") == 1);
  REQUIRE(c.data.transforms.size() == 1);
  CHECK(c.data.transforms[0].type == "normalize");
  // eval_transforms defaults to the non-random transforms.
  REQUIRE(c.data.eval_transforms.size() == 1);
  CHECK(c.data.eval_transforms[0].type == "normalize");
  CHECK(c.model.node.find("layers")->items().size() == 4);
  CHECK(c.source_file == kGood + "mlp.yaml");
}

TEST_CASE("defaults come from the registry when a section is absent") {
  const Config c = load_config(kGood + "minimal.yaml");
  CHECK(c.name == "experiment");
  CHECK(c.optimizer.type == "sgd");
  CHECK(c.optimizer.lr == Approx(0.1));
  CHECK(c.train.batch_size == 128);
  CHECK_FALSE(c.train.micro_batch_auto);
  CHECK(c.precision.mode == "fp32");
  CHECK(c.precision.loss_scale.init_scale == Approx(65536));
  CHECK(c.checkpoint.metric == "eval.accuracy");
  CHECK(c.output.dir == "runs");
  // The resolved tree shows them too.
  const auto* lr = c.resolved.find("optimizer")->find("lr");
  REQUIRE(lr);
  CHECK(lr->text() == "0.1");
}

TEST_CASE("the resolved model shows the default loss and the layers' defaulted attributes") {
  const Config c = load_config(kGood + "minimal.yaml");  // no `loss:`, linear without bias/init
  const auto* model = c.resolved.find("model");
  REQUIRE(model);
  const auto* loss = model->find("loss");
  REQUIRE(loss);
  REQUIRE(loss->find("type"));
  CHECK(loss->find("type")->text() == "cross_entropy");
  REQUIRE(loss->find("label_smoothing"));
  CHECK(loss->find("label_smoothing")->text() == "0");
  const auto& layers = model->find("layers")->items();
  REQUIRE(layers.size() == 2);
  const auto* bias = layers[1].find("bias");
  REQUIRE(bias);
  CHECK(bias->text() == "true");
  REQUIRE(layers[1].find("init"));
  CHECK(layers[1].find("init")->text() == "kaiming_uniform");
  REQUIRE(layers[1].find("bias_init"));
  CHECK(layers[1].find("bias_init")->text() == "zeros");
  CHECK(layers[0].size() == 1);  // flatten has no attributes
  // The model the run builds reads the same tree.
  CHECK(c.model.node.find("loss"));
  // A given loss keeps its own values; a block's layers are filled like the top level's.
  const Config given = load_config_text(
      "model:\n"
      "  blocks:\n"
      "    mlp: {params: {w: 8}, layers: [{type: linear, out_features: $w}]}\n"
      "  layers: [{type: flatten}, {block: mlp}, {type: linear, out_features: 3}]\n"
      "  loss: {type: cross_entropy, label_smoothing: 0.1}\n"
      "data: {train: {type: synthetic, shape: [4], classes: 3}}\n",
      "given.yaml");
  const auto* given_model = given.resolved.find("model");
  CHECK(given_model->find("loss")->find("label_smoothing")->text() == "0.1");
  CHECK(given_model->find("loss")->find("ignore_index")->text() == "-100");
  const auto& block_layer = given_model->find("blocks")->find("mlp")->find("layers")->items()[0];
  CHECK(block_layer.find("out_features")->text() == "$w");
  CHECK(block_layer.find("bias"));
  CHECK(given_model->find("layers")->items()[1].size() == 1);  // a block instance: as written
  // A setting of the default loss, given without its type, sets that loss's.
  const Config smoothed = load_config(kGood + "minimal.yaml", {"model.loss.label_smoothing=0.1"});
  const auto* smoothed_loss = smoothed.resolved.find("model")->find("loss");
  CHECK(smoothed_loss->find("type")->text() == "cross_entropy");
  CHECK(smoothed_loss->find("label_smoothing")->text() == "0.1");
}

TEST_CASE("extends deep-merges maps, replaces lists and lets the child win") {
  const Config c = load_config(kGood + "child.yaml");
  CHECK(c.name == "child");
  CHECK(c.optimizer.lr == Approx(0.05));                     // child
  CHECK(c.optimizer.momentum == Approx(0.9));                // base, merged
  CHECK(c.train.epochs == 3);                                // base
  CHECK(c.train.max_steps == 100);                           // child
  CHECK(c.train.batch_size == 16);                           // base
  CHECK(c.precision.mode == "fp16");                         // child shorthand over base map
  CHECK(c.precision.loss_scale.init_scale == Approx(1024));  // base, kept by the merge
  CHECK(c.devices.cpu);                                      // `cpu` replaces base [0, 1]
  CHECK(c.model.node.find("layers")->items().size() == 2);   // lists replace
  REQUIRE(c.data.train);
  CHECK(c.data.train->attrs.get_int("size") == 128);  // from base
  CHECK(c.resolved.find("extends") == nullptr);
}

TEST_CASE("overrides apply last, parsed as YAML") {
  const Config c = load_config(
      kGood + "child.yaml",
      {"optimizer.lr=3e-4", "devices=[0,1]", "precision=bf16", "model.layers[1].out_features=64",
       "train.micro_batch_size=auto", "optimizer.nesterov=true", "name='2024'"});
  CHECK(c.optimizer.lr == Approx(3e-4));
  CHECK(c.devices.gpus == std::vector<std::int64_t>{0, 1});
  CHECK_FALSE(c.devices.cpu);
  CHECK(c.precision.mode == "bf16");
  CHECK(c.precision.loss_scale.init_scale == Approx(65536));  // the whole section was replaced
  CHECK(c.model.node.find("layers")->items()[1].find("out_features")->text() == "64");
  CHECK(c.train.micro_batch_auto);
  CHECK(c.optimizer.nesterov);
  CHECK(c.name == "2024");  // quoted: a string
}

TEST_CASE("a later override refines what an earlier one set in short") {
  const Config c = load_config(
      kGood + "minimal.yaml",
      {"precision=fp16", "precision.loss_scale.init_scale=1024", "devices=cpu",
       "devices.world_size=2", "model.loss=cross_entropy", "model.loss.label_smoothing=0.1"});
  CHECK(c.precision.mode == "fp16");
  CHECK(c.precision.loss_scale.init_scale == Approx(1024));
  CHECK(c.devices.cpu);
  CHECK(c.devices.world_size == 2);
  const trainer::config::Node* loss = c.model.node.find("loss");
  REQUIRE(loss);
  CHECK(loss->find("type")->text() == "cross_entropy");
  CHECK(loss->find("label_smoothing")->text() == "0.1");
  // A loss given by its name in the file takes a key by override.
  const Config named = load_config_text(
      "model: {layers: [{type: flatten}], loss: cross_entropy}\n"
      "data: {train: {type: synthetic, shape: [2]}}\n",
      "<test>", {"model.loss.ignore_index=3"});
  CHECK(named.model.node.find("loss")->find("ignore_index")->text() == "3");
}

TEST_CASE("a loss named in a file replaces its base's loss; a precision mode keeps its scaling") {
  const TempDir tmp("config-load-loss");
  const fs::path& dir = tmp.path();
  std::ofstream(dir / "parent.yaml")
      << "model:\n  layers: [{type: flatten}, {type: linear, out_features: 3}]\n"
         "  loss: {type: cross_entropy, label_smoothing: 0.1}\n"
         "data: {train: {type: synthetic, shape: [2], classes: 3}}\n"
         "precision: {mode: fp32, loss_scale: {init_scale: 512}}\n";
  std::ofstream(dir / "child.yaml")
      << "extends: parent.yaml\nmodel: {loss: cross_entropy}\nprecision: fp16\n";
  const Config c = load_config((dir / "child.yaml").string());
  CHECK(c.model.node.find("loss")->find("label_smoothing")->text() == "0");
  CHECK(c.precision.mode == "fp16");
  CHECK(c.precision.loss_scale.init_scale == Approx(512));
}

TEST_CASE("a section a child config leaves empty is an error; an empty eval drops the base's") {
  const TempDir tmp("config-load-empty");
  const fs::path& dir = tmp.path();
  std::ofstream(dir / "base.yaml")
      << "model: {layers: [{type: flatten}, {type: linear, out_features: 3}]}\n"
         "data:\n  train: {type: synthetic, shape: [2], classes: 3}\n"
         "  eval: {type: synthetic, shape: [2], classes: 3, seed: 1}\n"
         "train: {epochs: 3, batch_size: 16}\n";
  // `train:` with its keys commented away would put epochs and batch back to their defaults.
  std::ofstream(dir / "emptied.yaml") << "extends: base.yaml\ntrain:\n  # epochs: 5\n";
  try {
    load_config((dir / "emptied.yaml").string());
    FAIL("the emptied section was accepted");
  } catch (const trainer::config::ConfigError& e) {
    REQUIRE(e.diagnostics().size() == 1);
    CHECK(
        format(e.diagnostics().list()[0]) ==
        (dir / "emptied.yaml").string() +
            ":2:1: error: train: no value for the whole section: every key of train that the "
            "configs merged before it set would be put back to its default\n    remove 'train:' to "
            "keep what they set, or write under it the keys to change");
  }
  // With a key, or as {}, it merges; in a config that extends none, `train:` is the defaults.
  std::ofstream(dir / "kept.yaml") << "extends: base.yaml\ntrain: {}\n";
  CHECK(load_config((dir / "kept.yaml").string()).train.epochs == 3);
  CHECK(load_config_text("model: {layers: [{type: flatten}]}\n"
                         "data: {train: {type: synthetic, shape: [2]}}\ntrain:\n",
                         "<test>")
            .train.epochs == 1);
  // `eval:` with no value, in a file or by override: no evaluation source.
  std::ofstream(dir / "no_eval.yaml") << "extends: base.yaml\ndata:\n  eval:\n";
  CHECK(load_config((dir / "base.yaml").string()).data.eval);
  for (const Config& c : {load_config((dir / "no_eval.yaml").string()),
                          load_config((dir / "base.yaml").string(), {"data.eval=null"})}) {
    CHECK_FALSE(c.data.eval);
    CHECK(c.resolved.find("data")->find("eval") == nullptr);
    CHECK(c.train.epochs == 3);
  }
}

TEST_CASE("a base listed in extends is found relative to the including file") {
  const TempDir tmp("config-load");
  const fs::path& dir = tmp.path();
  fs::create_directories(dir / "sub");
  {
    std::ofstream(dir / "sub" / "exp.yaml") << "extends: [../base1.yaml, ../base2.yaml]\n"
                                               "data:\n  train: {type: idx, images: "
                                               "img.gz, labels: /abs/labels.gz}\n";
    std::ofstream(dir / "base1.yaml") << "model: {layers: [{type: flatten}]}\nseed: 1\n";
    std::ofstream(dir / "base2.yaml") << "seed: 2\ntrain: {epochs: 4}\n";
  }
  const Config c = load_config((dir / "sub" / "exp.yaml").string());
  CHECK(c.seed == 2);  // later bases win over earlier ones
  CHECK(c.train.epochs == 4);
  REQUIRE(c.data.train);
  // Path fields are resolved relative to the file that wrote them.
  CHECK(c.data.train->attrs.get_string("images") == (dir / "sub" / "img.gz").string());
  CHECK(c.data.train->attrs.get_string("labels") == "/abs/labels.gz");
}

TEST_CASE("a base that two bases extend merges once, below both of them") {
  const TempDir tmp("config-load-diamond");
  const fs::path& dir = tmp.path();
  std::ofstream(dir / "base.yaml") << "model: {layers: [{type: flatten}]}\n"
                                      "data: {train: {type: synthetic, shape: [2]}}\n"
                                      "seed: 1\ntrain: {epochs: 2, batch_size: 8}\n";
  std::ofstream(dir / "long.yaml") << "extends: base.yaml\ntrain: {epochs: 30}\n";
  std::ofstream(dir / "wide.yaml") << "extends: base.yaml\ntrain: {batch_size: 64}\n";
  std::ofstream(dir / "exp.yaml") << "extends: [long.yaml, wide.yaml]\n";
  const Config both = load_config((dir / "exp.yaml").string());
  // wide.yaml's copy of base.yaml does not come back over long.yaml's epochs.
  CHECK(both.train.epochs == 30);
  CHECK(both.train.batch_size == 64);
  // A base listed after a file that extends it adds nothing more.
  std::ofstream(dir / "again.yaml") << "extends: [long.yaml, base.yaml]\n";
  CHECK(load_config((dir / "again.yaml").string()).train.epochs == 30);
  // Where both set a key, the later one in the list wins.
  std::ofstream(dir / "short.yaml") << "extends: base.yaml\ntrain: {epochs: 3}\n";
  std::ofstream(dir / "later.yaml") << "extends: [long.yaml, short.yaml]\n";
  CHECK(load_config((dir / "later.yaml").string()).train.epochs == 3);
}

TEST_CASE("a data source or loss that names another type replaces its base's; a section merges") {
  const TempDir tmp("config-load-switch");
  const fs::path& dir = tmp.path();
  std::ofstream(dir / "base.yaml")
      << "model: {layers: [{type: flatten}], loss: {type: cross_entropy, label_smoothing: 0.1}}\n"
         "data: {train: {type: synthetic, shape: [4], classes: 10, size: 128}}\n"
         "optimizer: {type: sgd, lr: 0.5, weight_decay: 0.01}\n";
  std::ofstream(dir / "exp.yaml") << "extends: base.yaml\n"
                                     "data: {train: {type: csv, path: x.csv}}\n"
                                     "model: {loss: {type: mse}}\n"
                                     "optimizer: {type: adam}\n";
  const Config c = load_config((dir / "exp.yaml").string());
  REQUIRE(c.data.train);
  CHECK(c.data.train->type == "csv");  // the synthetic source's shape would be unknown here
  CHECK(c.model.node.find("loss")->find("label_smoothing") == nullptr);
  CHECK(c.optimizer.type == "adam");
  CHECK(c.optimizer.lr == Approx(0.5));
  CHECK(c.optimizer.weight_decay == Approx(0.01));
  // The same type merges as any map does.
  std::ofstream(dir / "more.yaml") << "extends: base.yaml\n"
                                      "data: {train: {type: synthetic, size: 64}}\n";
  const Config more = load_config((dir / "more.yaml").string());
  CHECK(more.data.train->attrs.get_int("size") == 64);
  CHECK(more.data.train->attrs.get_int("classes") == 10);
  // A base's loss of the default type, its type not written: the child that
  // names that type merges into it.
  std::ofstream(dir / "untyped.yaml")
      << "model: {layers: [{type: flatten}], loss: {label_smoothing: 0.1}}\n"
         "data: {train: {type: synthetic, shape: [4], classes: 10}}\n";
  std::ofstream(dir / "typed.yaml")
      << "extends: untyped.yaml\nmodel: {loss: {type: cross_entropy, ignore_index: 3}}\n";
  const Config typed = load_config((dir / "typed.yaml").string());
  CHECK(typed.model.node.find("loss")->find("label_smoothing")->text() == "0.1");
  CHECK(typed.model.node.find("loss")->find("ignore_index")->text() == "3");
}

TEST_CASE("config text can be loaded without a file") {
  const Config c = load_config_text(
      "model: {layers: [{type: flatten}]}\ndata: {train: {type: synthetic, shape: [3]}}\n",
      "<test>", {"seed=5"});
  CHECK(c.seed == 5);
  CHECK(c.data.train->attrs.get_ints("shape", 1) == std::vector<std::int64_t>{3});
}

TEST_CASE("validation hooks run after field validation and report with the rest") {
  int calls = 0;
  trainer::config::add_validation_hook([&calls](const Config& c,
                                                trainer::config::Diagnostics& diags,
                                                trainer::config::Diagnostics& warnings) {
    ++calls;
    if (c.seed == 13) diags.add(c.model.node.mark(), "model", "unlucky model");
    if (c.seed == 7) warnings.add(c.model.node.mark(), "model", "lucky model");
  });
  CHECK_NOTHROW(trainer::config::load_and_check(kGood + "minimal.yaml", {}));
  CHECK(calls == 1);
  try {
    trainer::config::load_and_check(kGood + "minimal.yaml", {"seed=13"});
    FAIL("expected the hook's error");
  } catch (const trainer::config::ConfigError& e) {
    REQUIRE(e.diagnostics().size() == 1);
    CHECK(format(e.diagnostics().list()[0]) ==
          kGood + "minimal.yaml:3:3: error: model: unlucky model");
  }
  // Field errors stop before the hooks: they would see a half-valid config.
  CHECK_THROWS_AS(trainer::config::load_and_check(kGood + "minimal.yaml", {"seed=-1"}),
                  trainer::config::ConfigError);
  CHECK(calls == 2);
  // A hook's warnings come back to the caller.
  const auto warnings = trainer::config::run_validation_hooks(
      trainer::config::load_config(kGood + "minimal.yaml", {"seed=7"}));
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].message == "lucky model");
}
