// labels: cpu
// Every bad-config fixture (tests/data/configs/bad/) is rejected with the exact
// file:line:col, key, message and suggestion; several errors are all reported.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runner/config/load.h"
#include "runner/train/session_checks.h"

using trainer::config::ConfigError;
using trainer::config::Diagnostic;
using trainer::config::load_config;

namespace {

const std::string kBad = std::string(TRAINER_TEST_DATA_DIR) + "/configs/bad/";
const std::string kGood = std::string(TRAINER_TEST_DATA_DIR) + "/configs/good/";

std::vector<Diagnostic> errors_of(const std::string& path,
                                  const std::vector<std::string>& overrides = {}) {
  try {
    load_config(path, overrides);
  } catch (const ConfigError& e) {
    return e.diagnostics().list();
  }
  FAIL("expected " << path << " to be rejected");
  return {};
}

// "file:line:col: error: key: message" + "\n    suggestion" as printed to users.
std::string only_error(const std::string& path, const std::vector<std::string>& overrides = {}) {
  const auto list = errors_of(path, overrides);
  REQUIRE(list.size() == 1);
  return format(list[0]);
}

}  // namespace

TEST_CASE("a typo in a key is reported at the key with the nearest name") {
  CHECK(only_error(kBad + "typo_key.yaml") ==
        kBad +
            "typo_key.yaml:8:3: error: optimizer.momentun: unknown key 'momentun'\n"
            "    did you mean 'momentum'?");
}

TEST_CASE("a value of the wrong type is reported at the value") {
  CHECK(only_error(kBad + "wrong_type.yaml") ==
        kBad +
            "wrong_type.yaml:8:15: error: train.batch_size: expected an integer >= 1 and <= "
            "1000000000, found 'many'");
}

TEST_CASE("an out-of-range value names the range") {
  CHECK(only_error(kBad + "out_of_range.yaml") ==
        kBad +
            "out_of_range.yaml:8:7: error: optimizer.lr: expected a number >= 1e-30 and <= "
            "1e+30, found number -0.5");
}

TEST_CASE("a bad enum value lists the choices and suggests the nearest") {
  CHECK(only_error(kBad + "bad_enum.yaml") ==
        kBad +
            "bad_enum.yaml:8:9: error: optimizer.type: expected one of sgd, adam, adamw, "
            "found 'adamm'\n    did you mean 'adam'?");
}

TEST_CASE("a missing required field of a data source is reported at its map") {
  const std::string e = only_error(kBad + "missing_required.yaml");
  CHECK(e.rfind(kBad + "missing_required.yaml:6:10: error: data.train.labels: missing required "
                       "key 'labels'",
                0) == 0);
}

TEST_CASE("a missing extends file is named at the extends key") {
  const std::string folder = std::filesystem::path(kBad).lexically_normal().string();
  CHECK(only_error(kBad + "bad_extends.yaml") ==
        kBad + "bad_extends.yaml:2:1: error: extends: file not found: '" + folder +
            "no_such_base.yaml'\n    a relative path is read from the folder of the file that "
            "names it (" +
            std::filesystem::path(folder).parent_path().string() +
            "), not from the working directory");
}

TEST_CASE("an extends cycle is reported with the chain") {
  CHECK(only_error(kBad + "cycle_a.yaml") ==
        kBad + "cycle_b.yaml:1:1: error: extends: extends cycle: " + kBad + "cycle_a.yaml -> " +
            kBad + "cycle_b.yaml -> " + kBad + "cycle_a.yaml");
}

TEST_CASE("extends chains are bounded in depth, and a shared base is read once") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("trainer_extends_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  // 40 levels, each extending the next one twice: 2^40 merges when each
  // base was read again for every file that names it.
  for (int i = 0; i < 40; ++i) {
    const std::string next = "d" + std::to_string(i + 1) + ".yaml";
    std::ofstream(dir / ("d" + std::to_string(i) + ".yaml"))
        << "extends: [" << next << ", " << next << "]\nseed: " << i << "\n";
  }
  std::ofstream(dir / "d40.yaml") << "model: {layers: [{type: flatten}, {type: linear, "
                                     "out_features: 2}]}\ndata: {train: {type: synthetic, "
                                     "shape: [1, 2, 2]}}\n";
  CHECK(load_config((dir / "d0.yaml").string()).seed == 0);
  // A chain of 100 files: refused at the 65th, not a stack overflow.
  for (int i = 0; i < 100; ++i)
    std::ofstream(dir / ("c" + std::to_string(i) + ".yaml")) << "extends: c" << i + 1 << ".yaml\n";
  std::ofstream(dir / "c100.yaml") << "seed: 1\n";
  CHECK(only_error((dir / "c0.yaml").string()) ==
        (dir / "c63.yaml").string() + ":1:1: error: extends: extends chain of more than 64 files " +
            "(from " + (dir / "c0.yaml").string() + ")\n    merge some of the bases into one file");
  fs::remove_all(dir);
}

TEST_CASE("a YAML syntax error is a diagnostic with its position, not an exception trace") {
  CHECK(only_error(kBad + "syntax_error.yaml") ==
        kBad +
            "syntax_error.yaml:4:5: error: invalid YAML: end of map flow not found\n"
            "    a '{' before here is not closed: add its '}'");
}

TEST_CASE("a duplicate key is reported at the second occurrence") {
  CHECK(only_error(kBad + "duplicate_key.yaml") ==
        kBad + "duplicate_key.yaml:9:3: error: duplicate key 'lr' (first given at " + kBad +
            "duplicate_key.yaml:8:3)");
}

TEST_CASE("several errors in one file are all reported, in file order") {
  const auto list = errors_of(kBad + "several_errors.yaml");
  REQUIRE(list.size() == 6);
  const std::vector<std::tuple<int, int, std::string, std::string>> expected = {
      {2, 1, "sed", "did you mean 'seed'?"},
      {8, 17, "data.train.type", "did you mean 'synthetic'?"},
      {9, 12, "data.workers", ""},
      {11, 13, "optimizer.momentum", ""},
      {12, 12, "precision.mode", "did you mean 'bf16'?"},
      {14, 3, "train.pin_memory", "did you mean 'data.pin_memory'? (pin_memory goes under data:)"},
  };
  for (std::size_t i = 0; i < expected.size(); ++i) {
    INFO("diagnostic " << i << ": " << format(list[i]));
    CHECK(list[i].mark.file == kBad + "several_errors.yaml");
    CHECK(list[i].mark.line == std::get<0>(expected[i]));
    CHECK(list[i].mark.column == std::get<1>(expected[i]));
    CHECK(list[i].key_path == std::get<2>(expected[i]));
    CHECK(list[i].suggestion == std::get<3>(expected[i]));
  }
}

TEST_CASE("an unknown override key points at the override with a suggestion") {
  CHECK(only_error(kGood + "minimal.yaml", {"optimizer.lr=0.01", "optimiser.lr=1"}) ==
        "<command line>:2:1: error: optimiser: unknown key 'optimiser' (in override 2 "
        "'optimiser.lr=1')\n    did you mean 'optimizer'?");
  CHECK(only_error(kGood + "minimal.yaml", {"train.epocs=3"}) ==
        "<command line>:1:7: error: train.epocs: unknown key 'epocs' (in override 1 "
        "'train.epocs=3')\n    did you mean 'epochs'?");
}

TEST_CASE("keys and values as other tools write them are pointed to this config's") {
  const auto suggestion = [](const std::string& override_text) {
    const auto list = errors_of(kGood + "minimal.yaml", {override_text});
    REQUIRE(list.size() == 1);
    return list[0].suggestion;
  };
  // A key of another section, and another tool's name for one.
  CHECK(suggestion("lr=0.1") == "did you mean 'optimizer.lr'? (lr goes under optimizer:)");
  CHECK(suggestion("train.learning_rate=0.1") ==
        "did you mean 'optimizer.lr'? (lr goes under optimizer:)");
  CHECK(suggestion("train.seed=3") == "did you mean 'seed'? (seed goes at the top level)");
  CHECK(suggestion("train.max_epochs=3") == "did you mean 'epochs'?");
  CHECK(suggestion("data.num_workers=3") == "did you mean 'workers'?");
  CHECK(suggestion("precision=float16") == "did you mean 'fp16'?");
  CHECK(suggestion("schedule.type=cosine_annealing") == "did you mean 'cosine'?");
  // A key of this very name in another section, before a near one here.
  CHECK(suggestion("optimizer.epochs=3") ==
        "did you mean 'train.epochs'? (epochs goes under train:)");
  // A kind named where its settings go: the kind it is, or is nearest.
  CHECK(suggestion("optimizer=adam") == "write the kind as its type: optimizer: {type: adam}");
  CHECK(suggestion("schedule=steplr") == "write the kind as its type: schedule: {type: step}");
  CHECK(suggestion("schedule=5").empty());
}

TEST_CASE("a bad override value points at the value's column") {
  CHECK(only_error(kGood + "minimal.yaml", {"optimizer.lr=abc"}) ==
        "<command line>:1:14: error: optimizer.lr: expected a number >= 1e-30 and <= 1e+30, "
        "found 'abc' (in override 1 'optimizer.lr=abc')");
  CHECK(only_error(kGood + "minimal.yaml", {"train.epochs"}) ==
        "<command line>:1:1: error: expected KEY=VALUE (e.g. optimizer.lr=0.01), found "
        "'train.epochs' (in override 1 'train.epochs')");
  // A whole section after a key of it would drop that key unseen.
  CHECK(only_error(kGood + "minimal.yaml", {"optimizer.lr=0.5", "optimizer={type: sgd}"}) ==
        "<command line>:2:1: error: optimizer: replaces all of optimizer, so override 1 "
        "'optimizer.lr=0.5' before it has no effect (in override 2 'optimizer={type: sgd}')\n"
        "    give 'optimizer={type: sgd}' first, then the keys under it");
  CHECK_NOTHROW(load_config(kGood + "minimal.yaml", {"optimizer={type: sgd}", "optimizer.lr=0.5"}));
  // Other tools' prefixes for adding and removing keys.
  CHECK(only_error(kGood + "minimal.yaml", {"+train.eval_every=5"}) ==
        "<command line>:1:1: error: '+train.eval_every=5': a key is set without '+' here, whether "
        "the config file writes it or not (in override 1 '+train.eval_every=5')\n"
        "    write train.eval_every=5");
  CHECK_THAT(only_error(kGood + "minimal.yaml", {"~train.eval_every"}),
             Catch::StartsWith("<command line>:1:1: error: '~train.eval_every': keys are not "
                               "removed by an override"));
  CHECK(only_error(kGood + "minimal.yaml", {"model.layers[7].out_features=3"}) ==
        "<command line>:1:13: error: model.layers[7]: 'model.layers' has 2 item(s), so it has "
        "no item 7 (in override 1 'model.layers[7].out_features=3')\n"
        "    an override replaces list items but cannot add them; to add one, give the whole "
        "list: model.layers=[...]");
  CHECK(only_error(kGood + "minimal.yaml", {"devices=[0,"}).find("<command line>:1:") == 0);
  // A '#' after a space would start a YAML comment: the value would lose its end.
  CHECK(only_error(kGood + "minimal.yaml", {"output.dir=runs #2"}) ==
        "<command line>:1:17: error: output.dir: '#2' would be read as a YAML comment (a '#' "
        "that starts a value or follows a space starts one), leaving 'runs' (in override 1 "
        "'output.dir=runs #2')\n"
        "    quote the value in YAML, inside the shell's quotes: 'output.dir=\"runs #2\"'");
  CHECK_THAT(only_error(kGood + "minimal.yaml", {"output.dir=#2"}),
             Catch::Contains("leaving no value"));
  // A quote inside a plain value is a character: the '#' after it starts a comment.
  CHECK_THAT(only_error(kGood + "minimal.yaml", {"output.dir=x 'y #z'"}),
             Catch::Contains("'#z'' would be read as a YAML comment") &&
                 Catch::Contains("quote the string that holds the '#' in YAML"));
  CHECK_THAT(only_error(kGood + "minimal.yaml", {"devices=[0, 1] # two"}),
             Catch::Contains("'# two' would be read as a YAML comment"));
  // Right after a list's end or a quote, the reader takes a '#' for one too:
  // the rest of the list would be gone without a word.
  CHECK_THAT(
      only_error(kGood + "minimal.yaml", {"data.transforms=[{type: scale}]#c, {type: normalize}"}),
      Catch::Contains("'#c, {type: normalize}' would be read as a YAML comment"));
  CHECK_THAT(only_error(kGood + "minimal.yaml", {"output.dir=\"x\"#c"}),
             Catch::Contains("'#c' would be read as a YAML comment"));
  // A comment that cuts a flow list short is named, not only the list's end.
  CHECK_THAT(only_error(kGood + "minimal.yaml", {"data.transforms=[{type: scale} #c]"}),
             Catch::Contains("'#c]' would be read as a YAML comment"));
  // The suggestion quotes the value without the blanks around it.
  CHECK_THAT(only_error(kGood + "minimal.yaml", {"output.dir= #x"}),
             Catch::Contains("'output.dir=\"#x\"'"));
  // Quoted (a doubled quote, an escaped one, JSON's "key":"value"), or a '#'
  // inside a word: part of the value, as YAML reads it.
  const auto dir_of = [](const std::string& override_text) {
    return load_config(kGood + "minimal.yaml", {override_text}).output.dir;
  };
  CHECK(dir_of("output.dir='runs #2'") == "runs #2");
  CHECK(dir_of("output.dir='it''s #2'") == "it's #2");
  CHECK(dir_of("output.dir=\"a \\\" #2\"") == "a \" #2");
  CHECK(dir_of("output.dir=runs#2") == "runs#2");
  CHECK(dir_of("output={\"dir\":\"a #2\",\"tensorboard\":false}") == "a #2");
  CHECK(dir_of("output.dir=http://host/page#part") == "http://host/page#part");
  // A count that the compute threads' int could not hold.
  CHECK_THAT(only_error(kGood + "minimal.yaml", {"backend.threads=4294967297"}),
             Catch::Contains("backend.threads: expected an integer >= 0 and <= 4096"));
}

TEST_CASE("a list item reached with a dot is shown the bracketed index, by number or by name") {
  CHECK(only_error(kGood + "minimal.yaml", {"model.layers.1.out_features=4"}) ==
        "<command line>:1:14: error: model.layers.1: cannot set a key inside 'model.layers': it "
        "is a list (at " +
            kGood +
            "minimal.yaml:4:5), not a map (in override 1 'model.layers.1.out_features=4')\n"
            "    list items are written with their index in brackets: "
            "model.layers[1].out_features=4");
  const std::vector<std::string> named = {
      "model.layers=[{type: flatten}, {type: linear, name: head, out_features: 10}]",
      "model.layers.head.out_features=4"};
  CHECK(only_error(kGood + "minimal.yaml", named)
            .find("\n    list items are written with their index in brackets: "
                  "model.layers[1].out_features=4") != std::string::npos);
  // No such item, by number or by name: no suggestion to follow.
  for (const char* unknown : {"model.layers.2.out_features=4", "model.layers.fc.out_features=4"})
    CHECK(only_error(kGood + "minimal.yaml", {unknown}).find("brackets") == std::string::npos);
}

TEST_CASE("a bad value of a field that also takes a word names the word") {
  CHECK(only_error(kGood + "minimal.yaml", {"train.micro_batch_size=autoo"}) ==
        "<command line>:1:24: error: train.micro_batch_size: expected auto or an integer >= 0, "
        "found 'autoo' (in override 1 'train.micro_batch_size=autoo')\n"
        "    did you mean 'auto'?");
  CHECK(only_error(kGood + "minimal.yaml", {"train.micro_batch_size=-1"}) ==
        "<command line>:1:24: error: train.micro_batch_size: expected auto or an integer >= 0, "
        "found integer -1 (in override 1 'train.micro_batch_size=-1')");
}

TEST_CASE("cross-field rules") {
  CHECK(only_error(kGood + "minimal.yaml", {"train.epochs=0"})
            .find("train.epochs: nothing to train") != std::string::npos);
  // Reported where the schedule's type is, the milestones having no place of their own.
  CHECK(only_error(kGood + "minimal.yaml", {"schedule.type=multistep"})
            .find("<command line>:1:15: error: schedule.milestones: a multistep schedule needs "
                  "milestones") == 0);
  CHECK(only_error(kGood + "minimal.yaml",
                   {"data.eval={type: synthetic, shape: [1, 4, 4]}", "data.split=0.2"}) ==
        "<command line>:2:12: error: data.split: it holds part of data.train out for evaluation "
        "only when there is no data.eval; data.eval is set, so the split would be ignored (in "
        "override 2 'data.split=0.2')\n"
        "    remove data.split, or data.eval");
  CHECK_NOTHROW(load_config(kGood + "minimal.yaml", {"data.split=0.2"}));
  CHECK(only_error(kGood + "minimal.yaml", {"devices=[1,1]"}) ==
        "<command line>:1:9: error: devices.gpus: a GPU index is listed twice (in override 1 "
        "'devices=[1,1]')");
  CHECK(only_error(kGood + "minimal.yaml", {"devices=gpu"}) ==
        "<command line>:1:9: error: devices: expected 'cpu' or a list of GPU indices like [0, 1], "
        "found 'gpu' (in override 1 'devices=gpu')");
  // [cpu] reads naturally: the error says what to write instead.
  CHECK(only_error(kGood + "minimal.yaml", {"devices=[cpu]"}) ==
        "<command line>:1:10: error: devices: 'cpu' in a list of GPU indices: for the CPU write "
        "devices: cpu (no brackets); for GPUs, their indices: devices: [0, 1] (in override 1 "
        "'devices=[cpu]')");
}

TEST_CASE("an override that gives a whole section no value is refused") {
  CHECK(only_error(kGood + "minimal.yaml", {"optimizer.lr=0.05", "optimizer="}) ==
        "<command line>:2:11: error: optimizer: no value for the whole section: every key of "
        "optimizer would be put back to its default, whatever the config sets (in override 2 "
        "'optimizer=')\n"
        "    to set one key: optimizer.KEY=VALUE; to put the whole section back to its defaults: "
        "optimizer={}");
  CHECK(only_error(kGood + "minimal.yaml", {"train.early_stopping="})
            .find("error: train.early_stopping: no value for the whole section") !=
        std::string::npos);
  // Said on purpose, it is taken (the file's keys of the section reset).
  CHECK(load_config(kGood + "mlp.yaml", {"optimizer={}"}).optimizer.type == "sgd");
}

TEST_CASE("a block definition's keys are checked, and a block no layer uses is a warning") {
  const std::string res =
      "model.blocks.res={params: {ch: 4}, layers: [{type: linear, "
      "out_features: $ch}]}";
  CHECK(only_error(kGood + "minimal.yaml", {res, "model.blocks.res.layres=[]"}) ==
        "<command line>:2:18: error: model.blocks.res.layres: unknown key 'layres' (in override 2 "
        "'model.blocks.res.layres=[]')\n"
        "    did you mean 'layers'?");
  CHECK(only_error(kGood + "minimal.yaml", {res, "model.blocks.res.params=4"})
            .find("model.blocks.res.params: expected a map of parameter names to default values, "
                  "found integer 4") != std::string::npos);
  CHECK(only_error(kGood + "minimal.yaml", {res, "model.blocks.res.layers=[]"})
            .find("model.blocks.res.layers: a block needs at least one layer") !=
        std::string::npos);
  // An instance key as a parameter could never be set.
  for (const char* key : {"block", "name", "inputs", "repeat", "first"})
    CHECK(only_error(kGood + "minimal.yaml",
                     {res, std::string("model.blocks.res.params.") + key + "=2"})
              .find(std::string("model.blocks.res.params.") + key + ": '" + key +
                    "' is a key of every block instance") != std::string::npos);
  const auto unused = load_config(kGood + "minimal.yaml", {res});
  REQUIRE(unused.warnings.size() == 1);
  CHECK(format(unused.warnings[0], "warning") ==
        "<command line>:1:14: warning: model.blocks.res: no layer uses this block, so its layers "
        "are not checked\n"
        "    use it ({block: res, name: ...} in model.layers), or remove it");
  // Used by a layer (or by a block a layer uses): no warning.
  CHECK(load_config(kGood + "minimal.yaml", {res, "model.layers[1]={block: res, name: r}"})
            .warnings.empty());
  // A parameter no layer of the block refers to: an instance setting it changes nothing.
  const auto idle = load_config(
      kGood + "minimal.yaml",
      {"model.blocks.res={params: {ch: 4, unused: 3, quoted: 1}, layers: [{type: linear, "
       "out_features: $ch, name: '$quoted'}]}",
       "model.layers[1]={block: res, name: r, unused: 99}"});
  REQUIRE(idle.warnings.size() == 2);
  CHECK(
      format(idle.warnings[0], "warning") ==
      "<command line>:1:35: warning: model.blocks.res.params.unused: no layer of the block refers "
      "to $unused, so setting it on an instance changes nothing\n"
      "    use it in the block's layers (a value `$unused`), or remove it");
  CHECK(idle.warnings[1].key_path == "model.blocks.res.params.quoted");
}

TEST_CASE("a layer whose output no later layer reads is a warning") {
  // The head reads the flatten, skipping the hidden layer.
  const auto skipped = load_config(
      kGood + "minimal.yaml",
      {"model.layers=[{type: flatten, name: flat}, {type: linear, name: hidden, out_features: 8}, "
       "{type: linear, out_features: 10, inputs: flat}]"});
  REQUIRE(skipped.warnings.size() == 1);
  CHECK(format(skipped.warnings[0], "warning") ==
        "<command line>:1:44: warning: model.layers[1]: no layer reads the output of 'hidden': "
        "the next layer names other `inputs:` and no later one names it, so it is left out of "
        "every step: its parameters never train (a checkpoint keeps them as initialised)\n"
        "    add 'hidden' to a later layer's inputs, or remove the layer");
  // An unnamed layer goes by the name the graph gives it; in a block, too.
  const auto in_block = load_config(
      kGood + "minimal.yaml",
      {"model.blocks.b={layers: [{type: relu}, {type: relu}, {type: add, inputs: [relu1, relu1]}]}",
       "model.layers=[{type: flatten}, {block: b}, {type: linear, out_features: 10}]"});
  REQUIRE(in_block.warnings.size() == 1);
  CHECK(in_block.warnings[0].key_path == "model.blocks.b.layers[1]");
  CHECK(in_block.warnings[0].message.find("'relu2'") != std::string::npos);
  // Read by a later layer (by its name or the name the graph gives it), or by
  // the next one, or through a block parameter: no warning.
  CHECK(load_config(kGood + "minimal.yaml",
                    {"model.layers=[{type: flatten}, {type: linear, out_features: 10}, {type: "
                     "relu, inputs: flatten1}, {type: add, inputs: [linear1, relu1]}]"})
            .warnings.empty());
  CHECK(
      load_config(kGood + "minimal.yaml",
                  {"model.blocks.b={params: {from: x}, layers: [{type: relu, name: x}, {type: "
                   "relu, name: y}, {type: relu, inputs: $from}]}",
                   "model.layers=[{type: flatten}, {block: b}, {type: linear, out_features: 10}]"})
          .warnings.empty());
}

TEST_CASE("the model section must be a map with a list of layers") {
  CHECK(only_error(kGood + "minimal.yaml", {"model.layers=3"}) ==
        "<command line>:1:14: error: model.layers: expected a non-empty list of layers, found "
        "integer 3 (in override 1 'model.layers=3')");
}

TEST_CASE("a setting without effect under the type it depends on is a warning at its value") {
  const auto config =
      load_config(kGood + "minimal.yaml",
                  {"optimizer.type=adam", "optimizer.momentum=0.5", "schedule.milestones=[10]",
                   "precision.loss_scale.init_scale=1024", "optimizer.beta2=0.99"});
  REQUIRE(config.warnings.size() == 3);
  CHECK(format(config.warnings[0], "warning") ==
        "<command line>:2:20: warning: optimizer.momentum: has no effect with optimizer.type: "
        "adam (it applies to sgd)\n"
        "    remove it, or set optimizer.type: sgd");
  CHECK(config.warnings[1].key_path == "schedule.milestones");
  CHECK(config.warnings[1].message ==
        "has no effect with schedule.type: constant (it applies to multistep)");
  CHECK(config.warnings[2].message ==
        "has no effect with precision.mode: fp32 (it applies to fp16)");  // another section's
  // Values equal to the defaults (as print-config writes them) and settings of
  // the chosen type are not reported.
  CHECK(load_config(kGood + "minimal.yaml", {"optimizer.type=adam", "optimizer.momentum=0.9"})
            .warnings.empty());
  CHECK(load_config(kGood + "minimal.yaml",
                    {"optimizer.momentum=0.5", "schedule.type=step", "schedule.gamma=0.5",
                     "precision.mode=fp16", "precision.loss_scale.init_scale=1024"})
            .warnings.empty());
}

TEST_CASE("a setting that acts on a value other than 0 warns when that value is 0") {
  const auto config =
      load_config(kGood + "minimal.yaml",
                  {"optimizer.nesterov=true", "optimizer.momentum=0", "train.ema_warmup=true"});
  REQUIRE(config.warnings.size() == 2);
  CHECK(format(config.warnings[0], "warning") ==
        "<command line>:1:20: warning: optimizer.nesterov: has no effect with optimizer.momentum: "
        "0 (it acts only when optimizer.momentum is above 0)\n"
        "    remove it, or set optimizer.momentum above 0");
  CHECK(config.warnings[1].key_path == "train.ema_warmup");
  CHECK(config.warnings[1].message ==
        "has no effect with train.ema_decay: 0 (it acts only when train.ema_decay is above 0)");
  CHECK(load_config(kGood + "minimal.yaml",
                    {"optimizer.nesterov=true", "train.ema_warmup=true", "train.ema_decay=0.99"})
            .warnings.empty());
  CHECK(load_config(kGood + "minimal.yaml", {"optimizer.nesterov=false", "optimizer.momentum=0"})
            .warnings.empty());
  // Both of nesterov's conditions failed: one warning, whose suggestion mends both.
  const auto both =
      load_config(kGood + "minimal.yaml",
                  {"optimizer.type=adam", "optimizer.momentum=0", "optimizer.nesterov=true"});
  REQUIRE(both.warnings.size() == 2);  // momentum's own (adam) and nesterov's
  CHECK(both.warnings[1].key_path == "optimizer.nesterov");
  CHECK(both.warnings[1].message == "has no effect with optimizer.type: adam (it applies to sgd)");
  CHECK(both.warnings[1].suggestion ==
        "remove it, or set optimizer.type: sgd and optimizer.momentum above 0");
  // Early stopping's settings without its patience: it is off.
  const auto stopping = load_config(kGood + "minimal.yaml",
                                    {"train.early_stopping={metric: eval.accuracy, mode: max}"});
  REQUIRE(stopping.warnings.size() == 2);
  CHECK(stopping.warnings[0].key_path == "train.early_stopping.metric");
  CHECK(stopping.warnings[1].message ==
        "has no effect with train.early_stopping.patience: 0 (it acts only when "
        "train.early_stopping.patience is above 0)");
  CHECK(load_config(kGood + "minimal.yaml",
                    {"train.early_stopping={metric: eval.loss, mode: min, min_delta: 0}"})
            .warnings.empty());
}

TEST_CASE("keep_best by a train metric warns when checkpoints miss the logging beat") {
  const auto config = load_config(kGood + "minimal.yaml",
                                  {"checkpoint={keep_best: 1, metric: train.loss, mode: min, "
                                   "every_steps: 7}"});
  REQUIRE(config.warnings.size() == 1);
  CHECK(format(config.warnings[0], "warning") ==
        "<command line>:1:71: warning: checkpoint.every_steps: 7 is not a multiple of "
        "train.log_every (50, its default): its checkpoints at other steps record no train.loss, "
        "so keep_best cannot rank them\n    make checkpoint.every_steps a multiple of "
        "train.log_every");
  CHECK(load_config(kGood + "minimal.yaml",
                    {"checkpoint={keep_best: 1, metric: train.loss, mode: min, every_steps: 7}",
                     "train.log_every=7"})
            .warnings.empty());
}

TEST_CASE("more loader workers than the loader builds batches at once is a warning") {
  const auto config = load_config(kGood + "minimal.yaml", {"data.workers=8"});
  REQUIRE(config.warnings.size() == 1);
  CHECK(format(config.warnings[0], "warning") ==
        "<command line>:1:14: warning: data.workers: 8 with data.prefetch: 4 (its default): no "
        "more than 5 batches are built at once (data.prefetch ahead of the step, and the one it "
        "hands back; fewer when an epoch has fewer batches), so 3 of the workers would only "
        "wait\n    set data.prefetch: 7 (each batch it adds is held in memory), or data.workers: "
        "5");
  const auto given = load_config(kGood + "minimal.yaml", {"data.workers=3", "data.prefetch=1"});
  REQUIRE(given.warnings.size() == 1);
  CHECK(given.warnings[0].key_path == "data.prefetch");
  CHECK(given.warnings[0].message ==
        "1 with data.workers: 3: no more than 2 batches are built at once (data.prefetch ahead "
        "of the step, and the one it hands back; fewer when an epoch has fewer batches), so 1 "
        "of the workers would only wait");
  CHECK(load_config(kGood + "minimal.yaml", {"data.workers=5"}).warnings.empty());
  CHECK(
      load_config(kGood + "minimal.yaml", {"data.workers=2", "data.prefetch=1"}).warnings.empty());
}

TEST_CASE("settings of the evaluation warn when there is no evaluation set") {
  const std::vector<std::string> settings = {"train.eval_every=5", "train.eval_batches=2",
                                             "data.eval_transforms=[{type: scale}]"};
  const auto config = load_config(kGood + "minimal.yaml", settings);
  REQUIRE(config.warnings.size() == 3);
  CHECK(format(config.warnings[0], "warning") ==
        "<command line>:1:18: warning: train.eval_every: has no effect: there is no evaluation "
        "set (no data.eval, and data.split is 0)\n"
        "    add data.eval (or data.split: 0.1 to hold out part of data.train), or remove it");
  CHECK(config.warnings[1].key_path == "train.eval_batches");
  CHECK(config.warnings[2].key_path == "data.eval_transforms");
  // As a resolved config writes them (0, the derived list): nothing to say.
  CHECK(load_config(kGood + "minimal.yaml", {"train.eval_every=0", "train.eval_batches=0"})
            .warnings.empty());
  // With a split (or data.eval) they act.
  std::vector<std::string> split = settings;
  split.push_back("data.split=0.2");
  CHECK(load_config(kGood + "minimal.yaml", split).warnings.empty());
}

namespace {

// A config file with `text` (bytes as given) in a fresh temporary folder.
std::string temp_config(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("trainer_config_errors_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

const std::string kMinimalText =
    "model:\n  layers:\n    - {type: flatten}\n    - {type: linear, out_features: 10}\n"
    "data:\n  train: {type: synthetic, shape: [1, 4, 4]}\n";

}  // namespace

TEST_CASE("extends cannot be an override: it is refused at the override with what to do") {
  CHECK(only_error(kGood + "minimal.yaml", {"extends=base.yaml"}) ==
        "<command line>:1:1: error: extends: `extends` cannot be given as an override: the "
        "files a config extends are merged when it is read (in override 1 'extends=base.yaml')\n"
        "    put `extends: base.yaml` at the top of the config file");
  // A config that extends another resolves without the key.
  const auto config = load_config(kGood + "child.yaml");
  CHECK(config.resolved.find("extends") == nullptr);
}

TEST_CASE("a list index too large for any list is an error at the index, not an exception") {
  CHECK(only_error(kGood + "minimal.yaml", {"model.layers[99999999999999999999].out_features=1"}) ==
        "<command line>:1:13: error: model.layers[99999999999999999999].out_features: list "
        "index 99999999999999999999 is out of range (at most 1000000) (in override 1 "
        "'model.layers[99999999999999999999].out_features=1')");
  CHECK(only_error(kGood + "minimal.yaml", {"model.layers[-1].out_features=5"}) ==
        "<command line>:1:13: error: model.layers[-1].out_features: a list index counts from 0 at "
        "the front: [-1] is not the last item; give its index ([2] for the third) (in override 1 "
        "'model.layers[-1].out_features=5')");
}

TEST_CASE("an index into a list the config does not have is reported once, with how to add it") {
  CHECK(only_error(kGood + "minimal.yaml", {"data.transforms[0].type=scale"}) ==
        "<command line>:1:16: error: data.transforms[0]: 'data.transforms' is not set, so it has "
        "no item 0 (in override 1 'data.transforms[0].type=scale')\n"
        "    an override replaces list items but cannot add them; to add one, give the whole "
        "list: data.transforms=[...]");
}

TEST_CASE("model.init_strict and model.init_from are type-checked like every field") {
  for (const char* value : {"maybe", "5", "0"}) {
    INFO(value);
    const std::string e =
        only_error(kGood + "minimal.yaml", {"model.init_strict=" + std::string(value)});
    CHECK(e.find("<command line>:1:19: error: model.init_strict: expected a boolean (true or "
                 "false), found ") == 0);
  }
  CHECK(only_error(kGood + "minimal.yaml", {"model.init_from=[a]"})
            .find("model.init_from: expected a string, found a list") != std::string::npos);
  CHECK_NOTHROW(load_config(kGood + "minimal.yaml", {"model.init_strict=false"}));
}

TEST_CASE("every number field refuses infinities, from overrides and files alike") {
  for (const char* override :
       {"optimizer.lr=1e400", "optimizer.lr=.inf", "optimizer.weight_decay=.inf",
        "optimizer.eps=-.inf", "schedule.min_lr=.inf", "schedule.max_lr=1e999",
        "train.early_stopping.min_delta=.inf", "data.split=-.inf"}) {
    INFO(override);
    CHECK(only_error(kGood + "minimal.yaml", {override}).find("expected a finite number") !=
          std::string::npos);
  }
  CHECK(only_error(kGood + "minimal.yaml", {"optimizer.lr=-.inf"}) ==
        "<command line>:1:14: error: optimizer.lr: expected a finite number >= 1e-30 and <= "
        "1e+30, found number -.inf (in override 1 'optimizer.lr=-.inf')");
  // Transform and layer attributes go through the same check.
  CHECK(only_error(kGood + "minimal.yaml", {"data.transforms=[{type: scale, factor: .inf}]"})
            .find("data.transforms[0].factor: expected a finite number >= 1e-30 and <= 1e+30") !=
        std::string::npos);
  // ... and float32's range: 1e-320 is 0 there, 1e39 an infinity.
  CHECK(only_error(kGood + "minimal.yaml",
                   {"data.transforms=[{type: normalize, mean: [0], std: [1e-320]}]"})
            .find("data.transforms[0].std[0]: expected a number >= 1e-30 and <= 1e+30") !=
        std::string::npos);
  CHECK(only_error(kGood + "minimal.yaml",
                   {"data.transforms=[{type: normalize, mean: [1e39], std: [1]}]"})
            .find("data.transforms[0].mean[0]: expected a number >= -1e+30 and <= 1e+30") !=
        std::string::npos);
  // An erased area fraction is at most the whole sample (beyond it nothing
  // would ever be erased).
  CHECK(only_error(kGood + "minimal.yaml",
                   {"data.transforms=[{type: random_erasing, scale: [0.5, 2]}]"})
            .find("data.transforms[0].scale[1]: expected a number > 0 and <= 1, found integer 2") !=
        std::string::npos);
  const std::string file =
      temp_config("inf_lr.yaml", kMinimalText + "optimizer: {lr: .inf, eps: 1e400}\n");
  const auto list = errors_of(file);
  REQUIRE(list.size() == 2);
  CHECK(format(list[0]) == file +
                               ":7:17: error: optimizer.lr: expected a finite number >= "
                               "1e-30 and <= 1e+30, found number .inf");
  CHECK(list[1].message.find("expected a finite number") == 0);
}

TEST_CASE("a rate float32 would turn into 0 or infinity is refused at its key") {
  CHECK(only_error(kGood + "minimal.yaml", {"optimizer.lr=1e-50"}) ==
        "<command line>:1:14: error: optimizer.lr: expected a number >= 1e-30 and <= 1e+30, found "
        "number 1e-50 (in override 1 'optimizer.lr=1e-50')\n"
        "    it is used in float32, where a nonzero magnitude below 1e-30 comes too near 0, and "
        "one above 1e+30 too near infinity");
  // A setting that takes 0 takes nothing between 0 and 1e-30.
  CHECK(only_error(kGood + "minimal.yaml", {"optimizer.weight_decay=1e-50"}) ==
        "<command line>:1:24: error: optimizer.weight_decay: expected 0 or a number from 1e-30 to "
        "1e+30, found number 1e-50 (in override 1 'optimizer.weight_decay=1e-50')\n"
        "    it is used in float32, where a nonzero magnitude below 1e-30 comes too near 0, and "
        "one above 1e+30 too near infinity");
  for (const char* override :
       {"optimizer.lr=1e50", "optimizer.weight_decay=1e31", "optimizer.eps=1e-31",
        "schedule.max_lr=1e-50", "schedule.max_lr=1e50", "schedule.min_lr=1e-40",
        "schedule.min_lr=1e40", "train.clip_grad_norm=1e-45"}) {
    INFO(override);
    const std::string key = std::string(override).substr(0, std::string(override).find('='));
    const std::string error = only_error(kGood + "minimal.yaml", {override});
    CHECK(error.find("error: " + key + ": expected ") != std::string::npos);
    CHECK(error.find("\n    it is used in float32") != std::string::npos);
  }
  // The ends of the range, and 0 where a setting takes it, are accepted.
  CHECK_NOTHROW(
      load_config(kGood + "minimal.yaml", {"optimizer.lr=1e-30", "optimizer.weight_decay=1e30",
                                           "schedule.min_lr=0", "train.clip_grad_norm=0"}));
  CHECK_NOTHROW(load_config(kGood + "minimal.yaml", {"optimizer.lr=1e30"}));
}

TEST_CASE("a loss scale is at most 2^64, refused at its key with what to write") {
  const std::string advice =
      "\n    float32 multiplies the loss by the scale: below 1e-30 the gradients vanish, and a "
      "scale above 2^64 only makes them overflow (the default start, 65536, suits most fp16 runs)";
  CHECK(only_error(kGood + "minimal.yaml",
                   {"precision.mode=fp16", "precision.loss_scale.init_scale=1e300"}) ==
        "<command line>:2:33: error: precision.loss_scale.init_scale: expected a number >= 1e-30 "
        "and <= 18446744073709551616, found number 1e300 (in override 2 "
        "'precision.loss_scale.init_scale=1e300')" +
            advice);
  CHECK(only_error(kGood + "minimal.yaml",
                   {"precision.mode=fp16", "precision.loss_scale.static_scale=1e300"}) ==
        "<command line>:2:35: error: precision.loss_scale.static_scale: expected a number >= 0 "
        "and <= 18446744073709551616, found number 1e300 (in override 2 "
        "'precision.loss_scale.static_scale=1e300')" +
            advice);
  for (const char* override :
       {"precision.loss_scale.min_scale=1e20", "precision.loss_scale.init_scale=1e-50",
        "precision.loss_scale.static_scale=1e-40", "precision.loss_scale.init_scale=1e20"}) {
    INFO(override);
    const std::string error = only_error(kGood + "minimal.yaml", {"precision.mode=fp16", override});
    CHECK(error.find(std::string(override).substr(0, std::string(override).find('=')) +
                     ": expected ") != std::string::npos);
    CHECK(error.find(advice) != std::string::npos);
  }
  CHECK_NOTHROW(
      load_config(kGood + "minimal.yaml",
                  {"precision.mode=fp16", "precision.loss_scale.init_scale=18446744073709551616",
                   "precision.loss_scale.min_scale=18446744073709551616",
                   "precision.loss_scale.static_scale=18446744073709551616"}));
}

TEST_CASE("an integer beyond 64 bits is said to be out of the representable range") {
  CHECK(only_error(kGood + "minimal.yaml", {"seed=9223372036854775808"}) ==
        "<command line>:1:6: error: seed: integer 9223372036854775808 is outside the "
        "representable range (-9223372036854775808 to 9223372036854775807); expected an integer "
        ">= 0 (in override 1 'seed=9223372036854775808')");
}

TEST_CASE("a sample or batch too large to count is refused at its key") {
  CHECK(only_error(kGood + "minimal.yaml", {"data.train.shape=[1000000,1000000,1000000]"}) ==
        "<command line>:1:18: error: data.train.shape: a sample of this shape has more than "
        "2147483648 (2^31) elements, the most supported (in override 1 "
        "'data.train.shape=[1000000,1000000,1000000]')\n"
        "    use a smaller sample shape");
  CHECK(only_error(kGood + "minimal.yaml", {"data.train.shape=[3000000000,1,1]"})
            .find("data.train.shape: a sample of this shape has more than 2147483648") !=
        std::string::npos);
  CHECK(only_error(kGood + "minimal.yaml",
                   {"data.train.shape=[2147483648]", "train.batch_size=1000000000"}) ==
        "<command line>:2:18: error: train.batch_size: a batch of 1000000000 samples of "
        "2147483648 elements each holds more than 2^60 elements, the most a batch may hold (in "
        "override 2 'train.batch_size=1000000000')\n"
        "    use a smaller batch_size");
  CHECK(only_error(kGood + "minimal.yaml", {"train.batch_size=4611686018427387904"}) ==
        "<command line>:1:18: error: train.batch_size: expected an integer >= 1 and <= "
        "1000000000, found integer 4611686018427387904 (in override 1 "
        "'train.batch_size=4611686018427387904')");
}

TEST_CASE("train.epochs and train.max_steps are bounded at the key") {
  CHECK(only_error(kGood + "minimal.yaml", {"train.epochs=9223372036854775807"}) ==
        "<command line>:1:14: error: train.epochs: expected an integer >= 0 and <= 1000000000, "
        "found integer 9223372036854775807 (in override 1 'train.epochs=9223372036854775807')");
  CHECK(only_error(kGood + "minimal.yaml", {"train.max_steps=1000000000001"}) ==
        "<command line>:1:17: error: train.max_steps: expected an integer >= 0 and <= "
        "1000000000000, found integer 1000000000001 (in override 1 "
        "'train.max_steps=1000000000001')");
  CHECK_NOTHROW(load_config(kGood + "minimal.yaml",
                            {"train.epochs=1000000000", "train.max_steps=1000000000000"}));
}

TEST_CASE("epochs of more steps than a run can count are an error at train.epochs") {
  const auto config = load_config(kGood + "minimal.yaml", {"train.epochs=1000000000"});
  trainer::config::Diagnostics diags;
  CHECK(trainer::train::total_steps(config, 9223372036, diags) == 9223372036000000000);
  CHECK(diags.empty());
  CHECK_FALSE(trainer::train::total_steps(config, 9223372037, diags).has_value());
  REQUIRE(diags.size() == 1);
  CHECK(format(diags.list()[0]) ==
        "<command line>:1:14: error: train.epochs: 1000000000 epochs of 9223372037 steps are more "
        "steps than a run can count (at most 9223372036854775807)\n"
        "    lower train.epochs, or set train.max_steps");
  // train.max_steps wins over the epochs.
  const auto capped =
      load_config(kGood + "minimal.yaml", {"train.epochs=1000000000", "train.max_steps=7"});
  CHECK(trainer::train::total_steps(capped, 9223372037, diags) == 7);
}

TEST_CASE("the experiment name must be one folder name") {
  for (const char* name : {"../../../escaped", "a/b", ".", "..", "a b", "/abs"}) {
    INFO(name);
    const auto list = errors_of(kGood + "minimal.yaml", {"name=\"" + std::string(name) + "\""});
    REQUIRE(list.size() == 1);
    CHECK(list[0].key_path == "name");
    CHECK(list[0].message.find("expected a single folder name") == 0);
  }
  CHECK(errors_of(kGood + "minimal.yaml", {"name=../../../escaped"})[0].suggestion ==
        "use e.g. name: escaped");
  CHECK_NOTHROW(load_config(kGood + "minimal.yaml", {"name=exp-1.v2_b"}));
}

TEST_CASE("output.dir must fit the file system's limits, with room for the runs below it") {
  const std::string folder(256, 'd');
  const auto long_folder = errors_of(kGood + "minimal.yaml", {"output.dir=/tmp/" + folder + "/x"});
  REQUIRE(long_folder.size() == 1);
  CHECK(long_folder[0].key_path == "output.dir");
  CHECK(long_folder[0].message.find("is 256 bytes, more than the 255 a file system allows") !=
        std::string::npos);
  // The override is quoted, but not whole.
  CHECK(long_folder[0].message.find("(in override 1 'output.dir=/tmp/ddd") != std::string::npos);
  CHECK(long_folder[0].message.find(folder) == std::string::npos);
  std::string deep = "/tmp";
  while (deep.size() <= 3584) deep += "/" + std::string(100, 'd');
  const auto long_path = errors_of(kGood + "minimal.yaml", {"output.dir=" + deep});
  REQUIRE(long_path.size() == 1);
  CHECK(long_path[0].message.find("more than the 3584 that leave room") != std::string::npos);
  CHECK_NOTHROW(load_config(kGood + "minimal.yaml", {"output.dir=/tmp/" + std::string(255, 'd')}));
}

TEST_CASE("the experiment name must fit one folder name: at most 200 bytes") {
  const std::string longest(200, 'n');
  CHECK(load_config(kGood + "minimal.yaml", {"name=" + longest}).name == longest);
  const std::string file =
      temp_config("long_name.yaml", kMinimalText + "name: " + std::string(300, 'n') + "\n");
  CHECK(only_error(file) == file +
                                ":7:7: error: name: expected a folder name of at most 200 bytes, "
                                "found one of 300: run directories are "
                                "<output.dir>/<name>/<timestamp>\n"
                                "    use a shorter name, e.g. name: " +
                                std::string(40, 'n'));
  // A name with nothing to keep still gets a suggestion; a NUL is refused too.
  for (const std::string& name : {std::string("\".\""), std::string("\"/\""),
                                  std::string("\"a\\0b\""), std::string("\"..\"")}) {
    INFO(name);
    const auto list = errors_of(kGood + "minimal.yaml", {"name=" + name});
    REQUIRE(list.size() == 1);
    CHECK(list[0].key_path == "name");
    CHECK_FALSE(list[0].suggestion.empty());
  }
}

TEST_CASE("a null data source type says it is empty and lists the types") {
  CHECK(only_error(kGood + "minimal.yaml", {"data.train.type=~"}) ==
        "<command line>:1:17: error: data.train.type: the data source type is empty (null) (in "
        "override 1 'data.train.type=~')\n"
        "    known data source types: idx, cifar, npy, csv, image_folder, synthetic");
}

TEST_CASE(
    "an item without a type is told the one type its keys belong to, when one alone has them") {
  CHECK(only_error(kGood + "minimal.yaml", {"data.eval={path: test.csv, label: y}"}) ==
        "<command line>:1:11: error: data.eval.type: missing required key 'type' (the data "
        "source) (in override 1 'data.eval={path: test.csv, label: y}')\n"
        "    add type: csv (the one data source type with path and label)");
  CHECK_THAT(only_error(kGood + "minimal.yaml", {"data.transforms=[{type: scale}, {p: 0.5}]"}),
             Catch::EndsWith("\n    known transform types: scale, normalize, random_crop, "
                             "random_flip, random_translate, random_erasing"));
  CHECK_THAT(only_error(kGood + "minimal.yaml", {"data.transforms=[{padding: 4}]"}),
             Catch::EndsWith("\n    add type: random_crop (the one transform type with padding)"));
  // The type written as a key (scale is also a key of random_erasing).
  CHECK_THAT(only_error(kGood + "minimal.yaml", {"data.transforms=[{scale: {factor: 255}}]"}),
             Catch::EndsWith("\n    write the type as the value of `type`, with its settings "
                             "beside it: {type: scale, ...}"));
}

TEST_CASE("a data source setting its other settings leave without effect is an error there") {
  const std::string model =
      "model:\n  layers:\n    - {type: flatten}\n    - {type: linear, out_features: 10}\n";
  // CIFAR-10 has no coarse labels.
  const std::string cifar =
      temp_config("cifar10_coarse.yaml",
                  model + "data:\n  train: {type: cifar, files: [a.bin], label: coarse}\n");
  CHECK(only_error(cifar) == cifar +
                                 ":6:47: error: data.train.label: label: coarse has no effect with "
                                 "variant: cifar10 (it acts only with variant: cifar100)\n"
                                 "    remove label, or set variant: cifar100");
  CHECK(load_config(cifar, {"data.train.variant=cifar100"}).data.train.has_value());
  CHECK(load_config(cifar, {"data.train.label=fine"}).data.train.has_value());
  CHECK(only_error(cifar, {"data.train.variant=cifar10"})
            .find("error: data.train.label: label: coarse has no effect with variant: cifar10") !=
        std::string::npos);
  // Regression targets have no classes.
  const std::string csv = temp_config("csv_regression_classes.yaml",
                                      model +
                                          "data:\n  train:\n    type: csv\n    path: t.csv\n"
                                          "    regression: true\n    classes: 5\n");
  CHECK(only_error(csv) == csv +
                               ":10:14: error: data.train.classes: classes: 5 has no effect with "
                               "regression: true (it acts only with regression: false)\n"
                               "    remove classes, or set regression: false");
  CHECK(load_config(csv, {"data.train.regression=false"}).data.train.has_value());
  CHECK(load_config(csv, {"data.train.classes=0"}).data.train.has_value());
}

TEST_CASE("control bytes in a config are shown escaped, never raw") {
  const std::string file = temp_config("nul.yaml", kMinimalText + "name: ab\x01\x1b[31m\n");
  const std::string e = only_error(file);
  CHECK(e.find('\x1b') == std::string::npos);
  CHECK(e.find('\x01') == std::string::npos);
  CHECK(e.find("\\x1b[31m") != std::string::npos);
  // An invisible character in a key (a zero-width space pasted with it): shown.
  const std::string invisible = temp_config("zw.yaml", kMinimalText + "seed\xe2\x80\x8b: 1\n");
  CHECK(only_error(invisible) == invisible +
                                     ":7:1: error: seed\\u200b: unknown key 'seed\\u200b'\n"
                                     "    did you mean 'seed'?");
  const std::string nul = temp_config("nul2.yaml", kMinimalText + std::string("seed: 1\0x\n", 10));
  CHECK(only_error(nul) == nul +
                               ":7:8: error: invalid YAML: a NUL byte (\\0); is this a binary "
                               "file?");
  // A NUL written as YAML's escape: a path would be cut there.
  const std::string nul_path =
      temp_config("nul3.yaml", kMinimalText + "output: {dir: \"runs\\0x\"}\n");
  CHECK_THAT(only_error(nul_path),
             Catch::Contains("error: output.dir: the string holds a NUL byte (\\0) at "
                             "character 4, which no name may hold"));
  const std::string nul_base = temp_config("nul4.yaml", "extends: \"minimal.yaml\\0x\"\n");
  CHECK_THAT(only_error(nul_base), Catch::Contains("error: extends: expected a file name"));
  // UTF-16 text, with or without its byte order mark: said so, not a NUL byte.
  const auto utf16 = [](const std::string& ascii, bool mark) {
    std::string out = mark ? std::string("\xFF\xFE") : std::string();
    for (const char c : ascii) out += std::string{c, '\0'};
    return out;
  };
  for (const bool mark : {true, false}) {
    const std::string wide = temp_config("wide.yaml", utf16(kMinimalText, mark));
    CHECK(only_error(wide) == wide +
                                  ":1:1: error: invalid YAML: the file is UTF-16 text (a config "
                                  "is UTF-8): save it as UTF-8 (iconv -f UTF-16 -t UTF-8 "
                                  "converts it)");
  }
  // A byte that is not UTF-8 (Latin-1 text), which JSON records cannot hold.
  const std::string latin = temp_config("latin.yaml", kMinimalText + "name: caf\xE9\n");
  CHECK(only_error(latin) == latin +
                                 ":7:10: error: invalid YAML: byte 0xE9 is not UTF-8 (a config is "
                                 "UTF-8 text; was this written in Latin-1 or another encoding?): "
                                 "write it as UTF-8 (iconv -f LATIN1 -t UTF-8 converts a Latin-1 "
                                 "file)");
  CHECK_THAT(only_error(temp_config("ok.yaml", kMinimalText), {"name=caf\xE9"}),
             Catch::Contains("<command line>:1:9: error: invalid YAML: byte 0xE9 is not UTF-8"));
}

TEST_CASE("a loss scale floor above its start is refused at the one written") {
  const std::string file = temp_config("scale.yaml", kMinimalText + "precision: fp16\n");
  CHECK(only_error(file, {"precision.loss_scale.min_scale=1e6"}) ==
        "<command line>:1:32: error: precision.loss_scale.min_scale: min_scale 1000000 is above "
        "init_scale 65536: the scale would start below its floor, and its first overflow would "
        "raise it (in override 1 'precision.loss_scale.min_scale=1e6')\n    set min_scale to at "
        "most init_scale");
  CHECK(only_error(file, {"precision.loss_scale.init_scale=0.5"}) ==
        "<command line>:1:33: error: precision.loss_scale.init_scale: min_scale 1 is above "
        "init_scale 0.5: the scale would start below its floor, and its first overflow would "
        "raise it (in override 1 'precision.loss_scale.init_scale=0.5')\n    set init_scale to at "
        "least min_scale (1, its default)");
  CHECK(load_config(file,
                    {"precision.loss_scale.init_scale=0.5", "precision.loss_scale.min_scale=0.25"})
            .precision.loss_scale.init_scale == 0.5);
}

TEST_CASE("a number where a string belongs: quoted for YAML, and for the shell in an override") {
  CHECK(only_error(temp_config("year.yaml", kMinimalText + "name: 2024\n"))
            .ends_with("error: name: expected a string, found integer 2024\n    quote it to make "
                       "it a string: "
                       "\"2024\""));
  CHECK(only_error(temp_config("plain.yaml", kMinimalText), {"name=2024"}) ==
        "<command line>:1:6: error: name: expected a string, found integer 2024 (in override 1 "
        "'name=2024')\n    quote it to make it a string: \"2024\" (a shell keeps the quotes "
        "inside its own: name='\"2024\"')");
  // Inside a map, the key of the value itself.
  CHECK(only_error(temp_config("plain.yaml", kMinimalText), {"output={dir: 5}"})
            .ends_with("(a shell keeps the quotes inside its own: output.dir='\"5\"')"));
}

TEST_CASE("a list of the wrong length is reported at the list, where it is written") {
  const std::string file = temp_config("lengths.yaml", kMinimalText);
  CHECK(only_error(file, {"data.train.shape=[]"}) ==
        "<command line>:1:18: error: data.train.shape: expected a list of at least 1 integers, "
        "found 0 item(s) (in override 1 'data.train.shape=[]')");
  CHECK(only_error(file, {"data.transforms=[{type: random_crop, size: [1, 2, 3]}]"}) ==
        "<command line>:1:44: error: data.transforms[0].size: expected a list of 1 or 2 integers, "
        "found 3 item(s) (in override 1 'data.transforms=[{type: random_crop, size: [1, 2, 3]}]')");
}

TEST_CASE("an empty value is reported at its key, not at the next line's") {
  const std::string file =
      temp_config("empty_value.yaml", kMinimalText + "optimizer:\n  lr:\n\n  momentum: 0.5\n");
  CHECK(only_error(file) ==
        file + ":8:3: error: optimizer.lr: expected a number >= 1e-30 and <= 1e+30, found nothing");
}

TEST_CASE("lists nested past the parser's limit are named as such, at the file") {
  const std::string deep =
      temp_config("deep.yaml",
                  kMinimalText + "name: " + std::string(3000, '[') + std::string(3000, ']') + "\n");
  const std::string e = only_error(deep);
  CHECK(e.rfind(deep + ":7:", 0) == 0);
  CHECK(e.find("nested too deeply") != std::string::npos);
  CHECK(e.find("bad file") == std::string::npos);
}

TEST_CASE("the YAML library's terser syntax errors come with what to look at") {
  CHECK(only_error(temp_config("tab.yaml", "name: t\n\tseed: 1\n"))
            .ends_with("invalid YAML: illegal tab when looking for indentation\n    indent with "
                       "spaces: YAML takes no tabs there"));
  CHECK(only_error(temp_config("nested_tab.yaml", "name: t\nseed:\n\tx: 1\n"))
            .ends_with("\n    indent with spaces: YAML takes no tabs there"));
  CHECK(only_error(temp_config("indent.yaml", "name: t\n  seed: 1\n"))
            .ends_with(":2:7: error: invalid YAML: illegal map value\n    a ':' here cannot start "
                       "a value: is this key indented deeper than the keys beside it? (a key "
                       "longer than 1024 characters reads this way too)"));
}

TEST_CASE("a quote that nothing closes is an error at the value, not the rest of the file") {
  for (const char quote : {'"', '\''}) {
    const std::string file =
        temp_config("unclosed.yaml", kMinimalText + "name: " + quote + "abc\nseed: 7\n");
    CHECK(only_error(file) == file + ":7:7: error: invalid YAML: this value opens a quote (" +
                                  quote +
                                  ") that nothing closes, so the rest of the file would be read "
                                  "into it; close it where the value ends");
  }
  // Behind an anchor or a tag too; and a byte order mark moves nothing.
  for (const std::string value : {"&n \"abc", "!!str 'abc"})
    CHECK(only_error(temp_config("behind.yaml", kMinimalText + "name: " + value + "\nseed: 7\n"))
              .find(":7:7: error: invalid YAML: this value opens a quote") != std::string::npos);
  CHECK(load_config(temp_config("bom.yaml", "\xEF\xBB\xBF" + kMinimalText + "name: 'a'\n")).name ==
        "a");
  // Escaped and doubled quotes inside closed ones, and a value over two lines, are fine.
  const auto escaped = load_config(
      temp_config("escaped.yaml", kMinimalText + "output: {dir: \"it\\\"s\n  here\"}\nseed: 7\n"));
  CHECK(escaped.output.dir.ends_with("it\"s here"));
  CHECK(escaped.seed == 7);
  const auto doubled =
      load_config(temp_config("doubled.yaml", kMinimalText + "output: {dir: 'it''s'}\nseed: 7\n"));
  CHECK(doubled.output.dir.ends_with("it's"));
  CHECK(doubled.seed == 7);
}

TEST_CASE("a file with CR-only line endings reads like one with LF") {
  std::string text = kMinimalText + "seed: 5\n";
  for (char& c : text)
    if (c == '\n') c = '\r';
  const auto config = load_config(temp_config("cr.yaml", text));
  CHECK(config.seed == 5);
  CHECK(only_error(temp_config("cr_bad.yaml", text + "sed: 1\r"))
            .find("cr_bad.yaml:8:1: error: sed") != std::string::npos);
}

TEST_CASE("a config without data, or an empty one, is reported at its file, not at a default") {
  const std::string empty = temp_config("empty.yaml", "");
  const auto empty_errors = errors_of(empty);
  REQUIRE(empty_errors.size() == 2);
  CHECK(format(empty_errors[0]) ==
        empty +
            ":1:1: error: model: missing required section 'model' (a map with `layers:`)\n"
            "    add one, e.g. model: {layers: [{type: flatten}, {type: linear, out_features: "
            "10}]}");
  CHECK(format(empty_errors[1]) ==
        empty +
            ":1:1: error: data.train: missing required key 'train' (the training source "
            "{type: <source>, ...})\n"
            "    add a data section with one, e.g. data: {train: {type: idx, images: "
            "train-images.gz, labels: train-labels.gz}}");
  // Without a data section: at the top-level map (where the first key is).
  const std::string no_data =
      temp_config("no_data.yaml", "# a model only\n\nmodel:\n  layers: [{type: flatten}]\n");
  CHECK(only_error(no_data).rfind(no_data + ":3:1: error: data.train: missing required key", 0) ==
        0);
  // A data section without a training source: at the section.
  const std::string no_train =
      temp_config("no_train.yaml", "model:\n  layers: [{type: flatten}]\ndata:\n  workers: 2\n");
  CHECK(only_error(no_train) ==
        no_train +
            ":4:3: error: data.train: missing required key 'train' (the training source "
            "{type: <source>, ...})\n"
            "    add one, e.g. train: {type: idx, images: train-images.gz, labels: "
            "train-labels.gz}");
}

TEST_CASE("an empty data path or a GPU index past its range is refused at its value") {
  CHECK(only_error(kGood + "minimal.yaml", {"data.train={type: csv, path: \"\"}"}) ==
        "<command line>:1:30: error: data.train.path: an empty path names no file (in override 1 "
        "'data.train={type: csv, path: \"\"}')\n"
        "    give the file's path (relative to this YAML file, or absolute)");
  CHECK(only_error(kGood + "minimal.yaml", {"devices=[4294967296]"})
            .find("devices.gpus[0]: expected an integer >= 0 and <= 1023") != std::string::npos);
}
