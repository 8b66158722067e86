// labels: cpu
// The CLI contract of the config commands: exit codes, output streams, and
// print-config output that validates again.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "run_command.h"
#include "runner/config/reference.h"
#include "temp_dir.h"
#include "test_data_fixtures.h"

namespace {

const std::string kGood = std::string(TRAINER_TEST_DATA_DIR) + "/configs/good/";
const std::string kBad = std::string(TRAINER_TEST_DATA_DIR) + "/configs/bad/";

trainer::testing::CommandResult run(const std::string& args, bool merge_stderr = false) {
  return trainer::testing::run_trainer(args, merge_stderr);
}

// A fresh folder `name` in the temp directory holding train.csv (`train_csv`)
// and exp.yaml: a linear layer of 2 outputs, then `data` (the lines from
// "data:" on). Returns exp.yaml's path.
std::filesystem::path linear_csv_experiment(const std::string& name, const std::string& train_csv,
                                            const std::string& data) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "train.csv") << train_csv;
  std::ofstream(dir / "exp.yaml") << "model:\n  layers: [{type: linear, out_features: 2}]\n"
                                  << data;
  return dir / "exp.yaml";
}

}  // namespace

TEST_CASE("validate prints ok and exits 0 for a good config") {
  const auto r = run("validate " + kGood + "mlp.yaml optimizer.lr=0.01");
  CHECK(r.code == 0);
  CHECK(r.out == "ok\n");
}

TEST_CASE("output that cannot be written is an error; a reader that stops early is none") {
  // A full disk under `> file`: the printed config is incomplete.
  const std::string binary = trainer::testing::trainer_binary();
  auto r = trainer::testing::run_command("(" + binary + " print-config " + kGood +
                                         "mlp.yaml > /dev/full)");
  CHECK(r.code == 1);
  CHECK(r.out ==
        "error: cannot write to standard output: No space left on device: what this command "
        "printed there is incomplete\n");
  r = trainer::testing::run_command("(" + binary + " validate " + kGood + "mlp.yaml > /dev/full)");
  CHECK(r.code == 1);
  // A reader gone before the output comes (`| head`): the writes fail with
  // EPIPE, and the command ends as it would have: exit 0, no error.
  const trainer::testing::TempDir dir("stdout-gone");
  trainer::testing::run_command("(sleep 0.3; " + binary + " print-config " + kGood +
                                "mlp.yaml 2> " + (dir / "err") + "; echo $? > " + (dir / "code") +
                                ") | true");
  std::string code, err;
  std::ifstream(dir / "code") >> code;
  std::getline(std::ifstream(dir / "err"), err, '\0');
  CHECK(code == "0");
  CHECK(err.empty());
}

TEST_CASE("validate prints a setting without effect as a warning on stderr, and still ok") {
  const auto quiet =
      run("validate " + kGood + "mlp.yaml optimizer.type=adam optimizer.nesterov=true");
  CHECK(quiet.code == 0);
  CHECK(quiet.out == "ok\n");
  const auto r =
      run("validate " + kGood + "mlp.yaml optimizer.type=adam optimizer.nesterov=true", true);
  CHECK(r.out.find("<command line>:2:20: warning: optimizer.nesterov: has no effect with "
                   "optimizer.type: adam") == 0);
}

TEST_CASE("validate prints every error on stderr and exits 2") {
  const auto quiet = run("validate " + kBad + "several_errors.yaml");
  CHECK(quiet.code == 2);
  CHECK(quiet.out.empty());  // nothing on stdout
  const auto r = run("validate " + kBad + "several_errors.yaml", true);
  CHECK(r.out.find(kBad + "several_errors.yaml:2:1: error: sed: unknown key 'sed'\n"
                          "    did you mean 'seed'?\n") != std::string::npos);
  CHECK(r.out.find("several_errors.yaml:12:12: error: precision.mode:") != std::string::npos);
  CHECK(r.out.find("6 errors") != std::string::npos);
}

TEST_CASE("validate also runs the registered model check") {
  const auto r = run("validate " + kBad + "unknown_layer.yaml", true);
  CHECK(r.code == 2);
  CHECK(r.out.find(kBad + "unknown_layer.yaml:5:14: error: model.layers[1].type:") == 0);
  CHECK(r.out.find("did you mean 'linear'?") != std::string::npos);
}

TEST_CASE("validate and run report the layers' errors with the data's, each once") {
  // A data file that cannot be opened stops the session before the model is
  // built: the layers' own errors are still listed.
  const std::string layers =
      "model.layers=[{type: flatten}, {type: linear}, {type: linear, out_features: ten}]";
  auto r = run("validate " + kGood +
                   "minimal.yaml 'data.train={type: csv, path: /nonexistent.csv}' '" + layers + "'",
               true);
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK(r.out.find("model.layers[1].out_features: missing required key 'out_features'") !=
        std::string::npos);
  CHECK(r.out.find("model.layers[2].out_features: expected an integer >= 1, found 'ten'") !=
        std::string::npos);
  CHECK(r.out.find("data.train.path:") != std::string::npos);
  CHECK(r.out.find("3 errors") != std::string::npos);
  const auto ran =
      run("run " + kGood + "minimal.yaml 'data.train={type: csv, path: /nonexistent.csv}' '" +
              layers + "' --out /nonexistent-dir/run",
          true);
  CHECK(ran.code == 2);
  CHECK(ran.out == r.out);
  // With data that opens, the model's build finds the same two: listed once.
  r = run("validate " + kGood + "minimal.yaml '" + layers + "'", true);
  CHECK(r.code == 2);
  CHECK(r.out.find("2 errors") != std::string::npos);
}

TEST_CASE("a config key given as an option is refused with the override it means") {
  auto r = run("run " + kGood + "mlp.yaml --epochs 2", true);
  CHECK(r.code == 2);
  CHECK(r.out ==
        "error: '--epochs' is not an option; config values are set as KEY=VALUE after the config: "
        "train.epochs=2\n");
  r = run("validate " + kGood + "mlp.yaml --batch-size=64", true);
  CHECK(r.out.find("train.batch_size=64\n") != std::string::npos);
  // A whole key, and another tool's name for one.
  r = run("validate " + kGood + "mlp.yaml --optimizer.lr=0.1", true);
  CHECK(r.out.find("config: optimizer.lr=0.1\n") != std::string::npos);
  r = run("validate " + kGood + "mlp.yaml --max_epochs 3", true);
  CHECK(r.out.find("config: train.epochs=3\n") != std::string::npos);
  // A layer's attribute under another tool's name is not also missing.
  r = run(
      "validate " + kGood + "mlp.yaml 'model.layers=[{type: flatten}, {type: linear, units: 10}]'",
      true);
  CHECK(r.code == 2);
  CHECK(r.out.find("error: model.layers[1].units: unknown key 'units'") != std::string::npos);
  CHECK(r.out.find("\n    did you mean 'out_features'?\n1 error\n") != std::string::npos);
  // No such key: no such option.
  r = run("run " + kGood + "mlp.yaml --frobnicate", true);
  CHECK(r.code == 2);
  CHECK(r.out.find("error: trainer run has no option '--frobnicate'") == 0);
  // After --resume DIR the word after an unknown option was taken for the
  // config ("config: no such file 'step-00000002'").
  trainer::testing::TempDir dir("option_after_resume");
  r = run("run --resume " + dir.path().string() + " --checkpoint step-00000002", true);
  CHECK(r.code == 2);
  CHECK(r.out.find("error: trainer run has no option '--checkpoint': a resume goes on from the "
                   "newest checkpoint that verifies") == 0);
  // A misspelt option: the nearest of the command's.
  r = run("run --reusme " + dir.path().string(), true);
  CHECK(r.code == 2);
  CHECK(r.out.find("error: trainer run has no option '--reusme'\n    did you mean '--resume'?\n") ==
        0);
  // A run's directory given as the config: what to give instead.
  std::ofstream(dir.path() / "config.yaml") << "";
  std::ofstream(dir.path() / "config.sha256") << "";
  r = run("run " + dir.path().string(), true);
  CHECK(r.code == 2);
  CHECK(r.out.find("error: config: '" + dir.path().string() + "' is a run's directory; trainer " +
                   "run --resume " + dir.path().string() + " goes on with that run, and trainer " +
                   "run " + (dir.path() / "config.yaml").string() +
                   " starts a new run of its config") == 0);
  r = run("run --resume " + dir.path().string() + " --epochs 3", true);
  CHECK(r.out.find("error: '--epochs' is not an option; config values are set as KEY=VALUE after "
                   "the config: train.epochs=3") == 0);
}

TEST_CASE("a sweep with nothing to sweep is reported at the config file") {
  const auto r = run("sweep " + kGood + "minimal.yaml", true);
  CHECK(r.code == 2);
  CHECK(r.out.find(kGood + "minimal.yaml: error: sweep: nothing to sweep") == 0);
}

namespace {

// `trainer validate` of the minimal config with one override.
trainer::testing::CommandResult validate_minimal(const std::string& override_text) {
  return run("validate " + kGood + "minimal.yaml '" + override_text + "'", true);
}

}  // namespace

TEST_CASE("a convolution stride past what the libraries take is refused at it") {
  const auto r = validate_minimal(
      "model.layers=[{type: conv2d, out_channels: 2, kernel: 3, stride: 2147483648}, {type: "
      "flatten}, {type: linear, out_features: 10}]");
  CHECK(r.code == 2);
  CHECK(r.out.find("model.layers[0].stride: expected an integer >= 1 and <= 65536") !=
        std::string::npos);
}

TEST_CASE("transforms that make samples past the 2^31-element limit are refused at them") {
  const auto r =
      validate_minimal("data.transforms=[{type: random_crop, size: 100000, padding: 100000}]");
  CHECK(r.code == 2);
  CHECK(r.out.find("error: data.transforms: they make the training samples [1, 100000, 100000], "
                   "more than 2147483648 (2^31) elements, the most supported") !=
        std::string::npos);
  // At the limit itself: not refused for it (only, on a machine of less than
  // the 8 GiB a sample takes, by the memory plan).
  const auto at_limit = validate_minimal(
      "data.transforms=[{type: random_crop, size: [32768, 65536], padding: 32768}]");
  CHECK(at_limit.out.find("the most supported") == std::string::npos);
  CHECK((at_limit.code == 0 || at_limit.out.find("the memory plan needs") != std::string::npos));
}

TEST_CASE("validate refuses a model whose own tensors outgrow the memory there is, at the model") {
  // 2 x 10^9 features: 52 x 10^9 parameters, 208 GB of weights alone.
  const auto r = validate_minimal(
      "model.layers=[{type: flatten}, {type: linear, out_features: 2000000000}, {type: linear, "
      "out_features: 10}]");
  CHECK(r.code == 2);
  CHECK(r.out.find(kGood + "minimal.yaml:3:3: error: model: the memory plan needs ") == 0);
  CHECK(r.out.find("parameters, gradients and optimizer state alone need") != std::string::npos);
  // Fewer loader batches or another precision cannot make it fit: not offered.
  CHECK(r.out.find("data.prefetch") == std::string::npos);
  CHECK(r.out.find("precision: bf16") == std::string::npos);
}

TEST_CASE("usage errors exit 2, help exits 0") {
  CHECK(run("").code == 2);
  CHECK(run("frobnicate").code == 2);
  CHECK(run("validate").code == 2);
  CHECK(run("validate " + kGood + "does_not_exist.yaml").code == 2);
  CHECK(run("time " + kGood + "mlp.yaml --steps -3").code == 2);
  const auto zero_steps = run("time " + kGood + "mlp.yaml --steps 0", true);
  CHECK(zero_steps.code == 2);
  CHECK(zero_steps.out.find("error: --steps: expected an integer >= 1 and <= 1000000, found '0'") ==
        0);
  CHECK(run("time " + kGood + "mlp.yaml --steps 9223372036854775807", true)
            .out.find("error: --steps: expected an integer >= 1 and <= 1000000") == 0);
  CHECK(run("sweep " + kGood + "mlp.yaml --parallel 1.5", true)
            .out.find("error: --parallel: expected an integer >= 1 and <= 1024, found '1.5'") == 0);
  // The parser's own errors in this tool's words, each with where the usage is.
  CHECK(run("", true).out ==
        "error: a command is required: one of run, validate, print-config, plan, time, sweep, "
        "lr-find, eval, doctor, schema, version\n    trainer --help lists the commands\n");
  CHECK(run("validate", true).out ==
        "error: trainer validate needs a config file: trainer validate CONFIG.yaml [KEY=VALUE "
        "...]\n    trainer validate --help shows its usage\n");
  CHECK(run("validate nope.yaml", true).out ==
        "error: config: no such file 'nope.yaml'\n    trainer validate --help shows its usage\n");
  CHECK(run("run " + kGood + "mlp.yaml --out a --out b", true).out ==
        "error: --out is given more than once; give it once\n    trainer run --help shows its "
        "usage\n");
  CHECK(run("lr-find " + kGood + "mlp.yaml --min-lr abc", true).out ==
        "error: --min-lr: 'abc' is not a number\n    trainer lr-find --help shows its usage\n");
  CHECK(run("lr-find " + kGood + "mlp.yaml --min-lr ''", true).out.find("an empty value") !=
        std::string::npos);
  // A flag without its value, a missing or wrong directory, a word or flag
  // the command does not take.
  CHECK(run("lr-find " + kGood + "mlp.yaml --min-lr=", true).out ==
        "error: --min-lr needs a value: --min-lr NUMBER\n    trainer lr-find --help shows its "
        "usage\n");
  CHECK(run("sweep " + kGood + "mlp.yaml --grid", true)
            .out.find("error: --grid needs a value: --grid KEY=V1,V2,...\n") == 0);
  CHECK(run("eval", true)
            .out.find("error: trainer eval needs a run directory: trainer eval "
                      "RUN_DIR [KEY=VALUE ...]\n") == 0);
  CHECK(run("eval does_not_exist", true)
            .out.find("error: RUN_DIR: no such directory 'does_not_exist'\n") == 0);
  CHECK(run("run --resume " + kGood + "mlp.yaml", true)
            .out.find("error: --resume: '" + kGood +
                      "mlp.yaml' is a file; give the run directory") == 0);
  CHECK(run("doctor extra words", true)
            .out.find("error: trainer doctor takes no arguments extra words\n") == 0);
  CHECK(run("run " + kGood + "mlp.yaml --bogus", true)
            .out.find("error: trainer run has no option '--bogus'\n") == 0);
  const auto option_first = run("--bogus", true);
  CHECK(option_first.code == 2);
  CHECK(option_first.out.find("error: unknown option '--bogus'; a command comes first") == 0);
  // --help wins over a file that is not there.
  const auto help = run("validate --help nope.yaml", true);
  CHECK(help.code == 0);
  CHECK(help.out.find("Usage:") != std::string::npos);
  // An empty --out would silently mean the default directory.
  for (const char* sub : {"run", "sweep"}) {
    INFO(sub);
    const auto empty_out = run(std::string(sub) + " " + kGood + "mlp.yaml --out ''", true);
    CHECK(empty_out.code == 2);
    CHECK(empty_out.out.find("an empty directory name") != std::string::npos);
  }
  for (const char* sub : {"run", "validate", "print-config", "plan", "time", "sweep", "doctor",
                          "schema", "version"}) {
    INFO(sub);
    const auto r = run(std::string(sub) + " --help");
    CHECK(r.code == 0);
    CHECK(r.out.find("Usage") != std::string::npos);
  }
}

TEST_CASE("an override where the config file goes is refused with the order to use") {
  const auto r = run("validate optimizer.lr=0.01", true);
  CHECK(r.code == 2);
  CHECK(r.out.find("error: 'optimizer.lr=0.01' is an override, but the config file comes first: "
                   "trainer validate CONFIG.yaml optimizer.lr=0.01") == 0);
  const auto run_without_resume = run("run train.max_steps=3", true);
  CHECK(run_without_resume.code == 2);
  CHECK(run_without_resume.out.find("trainer run --resume RUN_DIR KEY=VALUE") != std::string::npos);
}

TEST_CASE("print-config refuses a layer that is not a map, as validate does") {
  for (const char* command : {"print-config", "validate"}) {
    INFO(command);
    const auto r =
        run(std::string(command) + " " + kGood + "minimal.yaml 'model.layers=[5]'", true);
    CHECK(r.code == 2);
    CHECK(r.out ==
          "<command line>:1:15: error: model.layers[0]: expected a layer map like {type: linear, "
          "...} (in override 1 'model.layers=[5]')\n1 error\n");
  }
}

TEST_CASE("print-config output is a config that validates to the same values") {
  const auto printed = run("print-config " + kGood + "child.yaml optimizer.lr=0.025");
  REQUIRE(printed.code == 0);
  CHECK(printed.out.find("lr: 0.025") != std::string::npos);
  CHECK(printed.out.find("momentum: 0.9") != std::string::npos);  // from the base
  const auto path = std::filesystem::temp_directory_path() / "trainer_test_cli_printed.yaml";
  std::ofstream(path) << printed.out;
  const auto again = run("print-config " + path.string());
  CHECK(again.code == 0);
  // Same content apart from the first comment line naming the source.
  CHECK(again.out.substr(again.out.find('\n')) == printed.out.substr(printed.out.find('\n')));
  std::filesystem::remove(path);
}

TEST_CASE("print-config refuses layers it cannot resolve: an unknown type, key or value") {
  const auto r =
      run("print-config " + kGood + "mlp.yaml model.layers[1].type=lienar model.layers[2].bogus=1",
          true);
  CHECK(r.code == 2);
  CHECK(r.out.find("<command line>:1:22: error: model.layers[1].type: unknown layer type "
                   "'lienar' (in override 1") == 0);
  CHECK(r.out.find("model.layers[2].bogus: unknown key 'bogus'") != std::string::npos);
  CHECK(r.out.find("name:") == std::string::npos);  // no YAML printed
}

TEST_CASE(
    "a missing base in an extends list is named at its item, with the folder it was read from") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "trainer_test_cli_extends_item";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "base.yaml") << "name: base\n";
  std::ofstream(dir / "exp.yaml") << "extends:\n  - base.yaml\n  - nope.yaml\n";
  // Named from its own folder: the folder is the working directory's.
  const auto r = trainer::testing::run_command(
      "cd " + dir.string() + " && " + trainer::testing::trainer_binary() + " validate exp.yaml");
  CHECK(r.code == 2);
  CHECK(r.out.find("exp.yaml:3:5: error: extends: file not found: '" +
                   (dir / "nope.yaml").string() +
                   "'\n    a relative path is read from the folder of the file that names it (" +
                   dir.string() + "), not from the working directory") == 0);
  fs::remove_all(dir);
}

TEST_CASE("print-config refuses unknown keys of the model, its loss and block instances") {
  const auto r = run("print-config " + kGood +
                         "mlp.yaml model.lyers=[] model.loss.label_smothing=0.1 "
                         "'model.blocks={b: {params: {width: 4}, layers: [{type: relu}]}}' "
                         "'model.layers[1]={block: b, widht: 8}'",
                     true);
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK(r.out.find("model.lyers: unknown key 'lyers'") != std::string::npos);
  CHECK(r.out.find("model.loss.label_smothing: unknown key 'label_smothing'") != std::string::npos);
  CHECK(r.out.find("model.layers[1].widht: unknown key 'widht'") != std::string::npos);
  CHECK(r.out.find("did you mean 'width'?") != std::string::npos);
  CHECK(r.out.find("name:") == std::string::npos);  // no YAML printed
}

TEST_CASE("print-config shows the loss a config without one uses, and layer defaults") {
  const auto r = run("print-config " + kGood + "minimal.yaml");
  REQUIRE(r.code == 0);
  CHECK(r.out.find("  loss:\n    type: cross_entropy\n") != std::string::npos);
  CHECK(r.out.find("      bias_init: zeros\n") != std::string::npos);
  // A loss given by its name alone gets its defaults too.
  const auto named = run("print-config " + kGood + "minimal.yaml model.loss=cross_entropy");
  REQUIRE(named.code == 0);
  CHECK(named.out.find("  loss:\n    type: cross_entropy\n    label_smoothing: 0\n") !=
        std::string::npos);
}

TEST_CASE("a data file that cannot be opened is reported at the key that names it") {
  namespace fs = std::filesystem;
  const fs::path exp =
      linear_csv_experiment("trainer_test_cli_data_file", "a,b,label\n1,2,0\n3,4,1\n",
                            "data:\n"
                            "  train: {type: csv, path: train.csv}\n"
                            "  eval:\n"
                            "    type: csv\n"
                            "    path: missing.csv\n");
  const fs::path dir = exp.parent_path();
  const std::string config = exp.string();
  // Written in the file: at the value of `path`.
  auto r = run("validate " + config, true);
  CHECK(r.code == 2);
  CHECK(r.out.find(config +
                   ":7:11: error: data.eval.path: cannot open the csv source: data file '" +
                   (dir / "missing.csv").string() + "' does not exist") == 0);
  // Written relative: where it was read from.
  CHECK(r.out.find("    a relative path is read from the folder of the file that writes it (" +
                   dir.string() + "), not from the working directory\n") != std::string::npos);
  // Given on the command line: at the override (an absolute path: no hint).
  r = run("validate " + config + " data.train.path=/nonexistent/train.csv", true);
  CHECK(r.code == 2);
  CHECK(r.out.find("<command line>:1:17: error: data.train.path: cannot open the csv source: data "
                   "file '/nonexistent/train.csv' does not exist") == 0);
  CHECK(r.out.find("relative path") == std::string::npos);
  // The shipped configs' dataset: the package that holds it.
  r = run("validate " + config +
              " 'data.train={type: idx, images: /usr/share/datasets/fashion-mnist/none.gz, "
              "labels: /usr/share/datasets/fashion-mnist/none-labels.gz}'",
          true);
  CHECK(r.out.find("    install the dataset: apt-get install dataset-fashion-mnist\n") !=
        std::string::npos);
  // One entry of a list of files: at that entry.
  std::ofstream(dir / "batch.bin") << std::string(3073, '\0');
  std::ofstream(dir / "cifar.yaml") << "model:\n"
                                       "  layers: [{type: flatten}, {type: linear, out_features: "
                                       "10}]\n"
                                       "data:\n"
                                       "  train:\n"
                                       "    type: cifar\n"
                                       "    files:\n"
                                       "      - batch.bin\n"
                                       "      - missing.bin\n";
  r = run("validate " + (dir / "cifar.yaml").string(), true);
  CHECK(r.code == 2);
  CHECK(r.out.find((dir / "cifar.yaml").string() + ":8:9: error: data.train.files[1]: cannot open "
                                                   "the cifar source") == 0);
  fs::remove_all(dir);
}

TEST_CASE("an evaluation CSV whose header orders the features otherwise is refused, exit 2") {
  namespace fs = std::filesystem;
  const fs::path exp =
      linear_csv_experiment("trainer_test_cli_feature_order", "a,b,c,label\n1,2,3,0\n3,4,5,1\n",
                            "data:\n"
                            "  train: {type: csv, path: train.csv}\n"
                            "  eval: {type: csv, path: swapped.csv}\n"
                            "train: {batch_size: 1}\n");
  const fs::path dir = exp.parent_path();
  std::ofstream(dir / "swapped.csv") << "b,a,c,label\n2,1,3,0\n";
  std::ofstream(dir / "renamed.csv") << "x,y,z,label\n1,2,3,0\n";
  const std::string config = exp.string();
  auto r = run("validate " + config, true);
  CHECK(r.code == 2);
  CHECK(r.out == config +
                     ":5:9: error: data.eval: its CSV header has feature 'b' in column 1 of the "
                     "features, where data.train's has it in column 2: features are read in the "
                     "file's order, not by name, so the model would take one feature for "
                     "another\n    list them in data.train's order: data.eval.features: [a, b, "
                     "c]\n1 error\n");
  // Following the advice reads the columns by name; names the training set
  // lacks are columns named otherwise, read by place.
  CHECK(run("validate " + config + " 'data.eval.features=[a, b, c]'", true).code == 0);
  CHECK(
      run("validate " + config + " data.eval.path=" + (dir / "renamed.csv").string(), true).code ==
      0);
}

TEST_CASE(
    "a CSV of class names trains, records its names, and evaluates a file of fewer classes by "
    "name") {
  namespace fs = std::filesystem;
  // 'cat' sorts first: class 0; the evaluation file, all 'dog', has 'dog' as
  // its own first class, which only the names map to the model's class 1.
  const fs::path exp = linear_csv_experiment(
      "trainer_test_cli_class_names",
      "a,b,label\n2,0,dog\n-2,0,cat\n1,1,dog\n-1,1,cat\n3,-1,dog\n-3,-1,cat\n",
      "data:\n"
      "  train: {type: csv, path: train.csv}\n"
      "  eval: {type: csv, path: eval.csv}\n"
      "train: {batch_size: 2, epochs: 20}\n");
  const fs::path dir = exp.parent_path();
  std::ofstream(dir / "eval.csv") << "a,b,label\n2,1,dog\n1,0,dog\n";
  auto r = run("run " + exp.string() + " --out " + (dir / "run").string(), true);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("eval  epoch 19 step 60: loss 0.0") != std::string::npos);
  CHECK(r.out.find("accuracy 1.0000") != std::string::npos);
  std::ifstream in(dir / "run" / "manifest.json");
  const std::string manifest((std::istreambuf_iterator<char>(in)), {});
  CHECK(manifest.find("\"class_names\": [\n    \"cat\",\n    \"dog\"\n  ]") != std::string::npos);
  r = run("eval " + (dir / "run").string(), true);
  CHECK(r.code == 0);
  CHECK(r.out.find("accuracy 1.0000 on 2 samples") != std::string::npos);
  // An evaluation file of numbers for a run of names: taken as places among
  // the sorted names, with a warning (here they follow that order).
  std::ofstream(dir / "numbers.csv") << "a,b,label\n2,1,1\n-1,0,0\n";
  r = run("eval " + (dir / "run").string() + " data.eval.path=" + (dir / "numbers.csv").string(),
          true);
  CHECK(r.code == 0);
  CHECK(r.out.find("warning: data.eval: data.train names its classes and data.eval numbers "
                   "them: the numbers are taken as places among the names in sorted order (cat "
                   "0, dog 1), which nothing checks") != std::string::npos);
  CHECK(r.out.find("accuracy 1.0000 on 2 samples") != std::string::npos);
  // An evaluation numbers the names as the run did, whatever the training
  // file names now ('cat' renamed: the run's classes are still cat, dog).
  std::ofstream(dir / "train.csv") << "a,b,label\n2,0,dog\n-2,0,kitten\n1,1,dog\n";
  r = run("eval " + (dir / "run").string(), true);
  CHECK(r.code == 0);
  CHECK(r.out.find("the classes come from the run's manifest (its 2 class names)") !=
        std::string::npos);
  CHECK(r.out.find("accuracy 1.0000 on 2 samples") != std::string::npos);
  std::ofstream(dir / "train.csv")
      << "a,b,label\n2,0,dog\n-2,0,cat\n1,1,dog\n-1,1,cat\n3,-1,dog\n-3,-1,cat\n";
  // A resume numbers the names as the run did: a training file that names
  // a class the run never had is refused, not numbered anew.
  std::ofstream(dir / "more.csv") << "a,b,label\n2,0,dog\n-2,0,cat\n1,1,ant\n-1,1,cat\n";
  r = run("run " + exp.string() + " --resume " + (dir / "run").string() +
              " train.epochs=21 data.train.path=" + (dir / "more.csv").string(),
          true);
  CHECK(r.code == 2);
  CHECK(r.out.find("error: data.train.label: CSV file '" + (dir / "more.csv").string() +
                   "' has class(es) 'ant' that the run (its manifest.json) does not have (its "
                   "classes: 'cat', 'dog')") != std::string::npos);
  // A name the training file lacks has no output of the model.
  std::ofstream(dir / "cow.csv") << "a,b,label\n2,1,cow\n";
  r = run("eval " + (dir / "run").string() + " data.eval.path=" + (dir / "cow.csv").string(), true);
  CHECK(r.code == 2);
  CHECK(r.out.find("error: data.eval.label: CSV file '" + (dir / "cow.csv").string() +
                   "' has class(es) 'cow' that the training set does not have (its classes: "
                   "'cat', 'dog')") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("a data setting the files do not fit is reported at that setting, exit 2") {
  namespace fs = std::filesystem;
  const fs::path exp =
      linear_csv_experiment("trainer_test_cli_data_setting", "a,b,label\n1,2,0\n3,4,1\n",
                            "data:\n"
                            "  train: {type: csv, path: train.csv, label: kind}\n"
                            "  split: 0.1\n"
                            "train: {batch_size: 1}\n");
  const fs::path dir = exp.parent_path();
  const std::string config = exp.string();
  auto r = run("validate " + config, true);
  CHECK(r.code == 2);
  CHECK(r.out.find(config +
                   ":4:46: error: data.train.label: cannot open the csv source: CSV file '" +
                   (dir / "train.csv").string() + "' has no column 'kind'") == 0);
  CHECK(r.out.find("did you mean") == std::string::npos);  // nothing near 'kind'
  // A misspelt column: the nearest one is offered.
  r = run("validate " + config + " data.train.label=labl", true);
  CHECK(r.code == 2);
  CHECK(r.out.find("has no column 'labl'; columns: a, b, label") != std::string::npos);
  CHECK(r.out.find("\n    did you mean 'label'?\n") != std::string::npos);
  // Two samples: 0.1 of them holds out none.
  r = run("validate " + config + " data.train.label=label", true);
  CHECK(r.code == 2);
  CHECK(r.out ==
        config +
            ":5:10: error: data.split: holding out 0.1 of the 2 training samples leaves no "
            "evaluation sample\n    hold out at least one sample: data.split=0.5 (1/2) "
            "or more\n1 error\n");
  // Regression targets for a classification loss: at the loss, with both ways out.
  r = run("validate " + config + " data.train.label=label data.train.regression=true data.split=0",
          true);
  CHECK(r.code == 2);
  CHECK(r.out.find(config +
                   ":2:3: error: model.loss.type: cross_entropy needs class labels, but "
                   "data.train (CSV file '" +
                   (dir / "train.csv").string() + "') gives regression targets [1]\n") == 0);
  CHECK(r.out.find("model.loss: {type: mse}") != std::string::npos);
  // Integer targets for mse: how to store them, not a class count (its
  // largest label, 4, makes 5 classes for the model's 2 outputs).
  std::ofstream(dir / "counts.csv") << "a,b,label\n1,2,0\n3,4,4\n";
  r = run("validate " + config + " data.train.path=" + (dir / "counts.csv").string() +
              " data.train.label=label data.split=0 'model.loss={type: mse}'",
          true);
  CHECK(r.code == 2);
  CHECK(r.out.find("error: model.loss.type: mse needs regression targets, but the data has class "
                   "labels (integers)") != std::string::npos);
  CHECK(r.out.find("a CSV: regression: true") != std::string::npos);
  CHECK(r.out.find("makes 5 classes") == std::string::npos);
  CHECK(r.out.find("\n1 error\n") != std::string::npos);
  // An evaluation image folder with a class the training folder lacks.
  for (const char* cls : {"train/ant", "train/bee", "eval/ant", "eval/dog"}) {
    fs::create_directories(dir / cls);
    std::ofstream(dir / cls / "x.png") << "never decoded by validate";
  }
  std::ofstream(dir / "img.yaml")
      << "model:\n"
         "  layers: [{type: flatten}, {type: linear, out_features: 2}]\n"
         "data:\n"
         "  train: {type: image_folder, root: train, size: 4}\n"
         "  eval: {type: image_folder, root: eval, size: 4}\n"
         "train: {batch_size: 1}\n";
  r = run("validate " + (dir / "img.yaml").string(), true);
  CHECK(r.code == 2);
  CHECK(r.out.find((dir / "img.yaml").string() + ":5:36: error: data.eval.root: image folder '" +
                   (dir / "eval").string() +
                   "' has class(es) 'dog' that the training set does not have") == 0);
  // Named classes beside numbered ones warn, unless the names are the numbers.
  for (const char* cls : {"named/ant", "named/bee", "numbered/0", "numbered/1"}) {
    fs::create_directories(dir / cls);
    std::ofstream(dir / cls / "x.png") << "never decoded by validate";
  }
  const std::string numbered_eval =
      " 'data.eval={type: synthetic, shape: [3, 4, 4], classes: 2, size: 8}'";
  r = run("validate " + (dir / "img.yaml").string() +
              " data.train.root=" + (dir / "named").string() + numbered_eval,
          true);
  CHECK(r.code == 0);
  CHECK(r.out.find("warning: data.eval: data.train names its classes and data.eval numbers "
                   "them: the numbers are taken as places among the names in sorted order (ant "
                   "0, bee 1), which nothing checks") != std::string::npos);
  r = run("validate " + (dir / "img.yaml").string() +
              " data.train.root=" + (dir / "numbered").string() + numbered_eval,
          true);
  CHECK(r.out == "ok\n");
  r = run("validate " + (dir / "img.yaml").string() + " data.eval.channels=2", true);
  CHECK(r.code == 2);
  CHECK(r.out.find("<command line>:1:20: error: data.eval.channels: cannot open the image_folder "
                   "source: an image folder gives 1 (grey) or 3 (RGB) channels, not 2") == 0);
  fs::remove_all(dir);
}

TEST_CASE("a metric name cut short gets the name it begins as a suggestion") {
  const auto r =
      run("validate " + kGood + "mlp.yaml checkpoint.keep_best=1 checkpoint.metric=eval.acc", true);
  CHECK(r.code == 2);
  CHECK(r.out.find("<command line>:2:19: error: checkpoint.metric: keep_best ranks checkpoints "
                   "by 'eval.acc', which this run never records (in override 2 "
                   "'checkpoint.metric=eval.acc')\n"
                   "    did you mean 'eval.accuracy'?") == 0);
}

TEST_CASE("an unknown key of a layer says which type the layer is") {
  const auto r = run("validate " + kGood + "mlp.yaml model.layers[2].out_features=64", true);
  CHECK(r.code == 2);
  CHECK(r.out.find("<command line>:1:17: error: model.layers[2].out_features: unknown key "
                   "'out_features'") == 0);
  CHECK(r.out.find("    layer 2 is a relu; valid keys: type, name, inputs\n") != std::string::npos);
}

TEST_CASE("the override examples of eval --help and the reference fit the shipped MLP") {
  namespace fs = std::filesystem;
  const fs::path mlp = fs::path(TRAINER_TEST_DATA_DIR).parent_path().parent_path() /
                       "configs/fashion_mnist_mlp.yaml";
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    WARN("Fashion-MNIST is not installed: validate cannot open the MLP's data");
    return;
  }
  // `eval --help`: "... overrides of the run's config (A, B)".
  const auto help = run("eval --help");
  const auto at = help.out.find("overrides of the run's config (");
  REQUIRE(at != std::string::npos);
  const auto open = help.out.find('(', at) + 1;
  std::string examples = help.out.substr(open, help.out.find(')', open) - open);
  for (auto comma = examples.find(", "); comma != std::string::npos; comma = examples.find(", "))
    examples.replace(comma, 2, "' '");
  auto r = run("validate " + mlp.string() + " '" + examples + "'", true);
  INFO(r.out);
  CHECK(r.code == 0);
  // The reference: "Overrides on the command line (`A`, `B`, `C`)", but for a
  // GPU list (validate checks it against this machine's GPUs).
  const std::string reference = trainer::config::config_reference_markdown();
  const auto rule = reference.find("Overrides on the command line (");
  REQUIRE(rule != std::string::npos);
  const std::string listed = reference.substr(rule, reference.find(')', rule) - rule);
  std::string overrides;
  for (auto tick = listed.find('`'); tick != std::string::npos;) {
    const auto end = listed.find('`', tick + 1);
    const std::string one = listed.substr(tick + 1, end - tick - 1);
    if (one.rfind("devices=", 0) != 0) overrides += " '" + one + "'";
    tick = listed.find('`', end + 1);
  }
  CHECK(overrides.find("model.layers[") != std::string::npos);
  r = run("validate " + mlp.string() + overrides, true);
  INFO(r.out);
  CHECK(r.code == 0);
}

TEST_CASE("version names the version and the backends") {
  const auto r = run("version");
  CHECK(r.code == 0);
  CHECK(r.out.find(std::string("trainer ") + TRAINER_VERSION) == 0);
  CHECK(r.out.find("CUDA backend: ") != std::string::npos);
  // The commit the build found: in a git checkout its hash ("-dirty" with
  // changes), else "unknown".
  const auto at = r.out.find("\ncommit: ");
  REQUIRE(at != std::string::npos);
  const std::string commit = r.out.substr(at + 9, r.out.find('\n', at + 1) - at - 9);
  const std::string source =
      std::filesystem::path(TRAINER_TEST_DATA_DIR).parent_path().parent_path().string();
  INFO("commit: " << commit);
  if (trainer::testing::run_command("git -C '" + source + "' rev-parse HEAD").code == 0) {
    CHECK(std::regex_match(commit, std::regex("[0-9a-f]{40}(-dirty)?")));
    CHECK(trainer::testing::run_command("git -C '" + source + "' cat-file -e " +
                                        commit.substr(0, 40) + "^{commit}")
              .code == 0);
  } else {
    CHECK(commit == "unknown");
  }
}

TEST_CASE("schema writes the schema and the reference under --out") {
  const auto dir = std::filesystem::temp_directory_path() / "trainer_test_cli_schema";
  std::filesystem::remove_all(dir);
  const auto r = run("schema --out " + dir.string());
  CHECK(r.code == 0);
  CHECK(std::filesystem::file_size(dir / "schemas" / "trainer.schema.json") > 1000);
  CHECK(std::filesystem::file_size(dir / "docs" / "config-reference.md") > 1000);
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "an evaluation set that does not fit the model, or a batch too large, is refused before "
    "training") {
  const auto dir = std::filesystem::temp_directory_path() / "trainer_test_cli_eval_fit";
  std::filesystem::create_directories(dir);
  const std::string config = (dir / "eval_fit.yaml").string();
  // Line 4 holds data.eval, so every error is reported at 4:9.
  const auto write_config = [&](const std::string& eval) {
    std::ofstream(config) << "name: eval_fit\n"
                             "data:\n"
                             "  train: {type: synthetic, shape: [4], classes: 3, size: 64}\n"
                             "  eval: "
                          << eval
                          << "\n"
                             "model:\n"
                             "  layers: [{type: linear, out_features: 3}]\n"
                             "train: {batch_size: 8}\n";
  };
  const auto error_of = [&](const std::string& eval) {
    write_config(eval);
    const auto r = run("validate " + config, true);
    CHECK(r.code == 2);
    return r.out;
  };
  write_config("{type: synthetic, shape: [4], classes: 2, size: 16}");  // fewer classes: fine
  CHECK(run("validate " + config).out == "ok\n");
  CHECK(error_of("{type: synthetic, shape: [5], classes: 3, size: 16}") ==
        config +
            ":4:9: error: data.eval: its samples are [5] after the transforms, but data.train's "
            "are [4] (the model's input)\n"
            "    use an evaluation set of the same shape as the training set\n1 error\n");
  CHECK(error_of("{type: synthetic, shape: [4], classes: 5, size: 16}") ==
        config +
            ":4:9: error: data.eval: it has 5 classes, but the model predicts data.train's 3\n"
            "    if the training set lacks some classes, set data.train.classes: 5 (and the "
            "last layer's size)\n1 error\n");
  // A batch the training set cannot fill is found here too, at the batch size.
  write_config("{type: synthetic, shape: [4], classes: 3, size: 16}");
  const auto too_large = run("validate " + config + " train.batch_size=128", true);
  CHECK(too_large.code == 2);
  CHECK(too_large.out ==
        "<command line>:1:18: error: train.batch_size: the training set's 64 samples do not fill "
        "one batch of 128 (data.drop_last: true drops a short one) (in override 1 "
        "'train.batch_size=128')\n"
        "    set train.batch_size to at most 64, or data.drop_last: false\n1 error\n");
  CHECK(run("validate " + config + " train.batch_size=128 data.drop_last=false").out == "ok\n");
  // A batch beyond 10^9 is refused at once (its plan alone would take hours).
  CHECK_THAT(run("validate " + config + " train.batch_size=274877906899", true).out,
             Catch::Contains("error: train.batch_size: expected an integer >= 1 and <= "
                             "1000000000, found integer 274877906899"));
  // Kept short, it is the whole set at every step: trained, with a warning.
  CHECK_THAT(run("validate " + config + " train.batch_size=128 data.drop_last=false", true).out,
             Catch::Contains("warning: train.batch_size: 128 is more than the training set's 64 "
                             "samples: with data.drop_last: false every step is the whole set as "
                             "one short batch, in memory planned for 128 rows\n    set "
                             "train.batch_size to at most 64 (the set's size)\n"));
  // Over ranks the batch that fills a step is a multiple of them.
  CHECK_THAT(run("validate " + config + " train.batch_size=126 devices.world_size=3", true).out,
             Catch::Contains("set train.batch_size to at most 63 (a multiple of the 3 ranks), or "
                             "data.drop_last: false"));
  CHECK_THAT(
      run("validate " + config + " train.batch_size=128 data.train.size=1 devices.world_size=2",
          true)
          .out,
      Catch::Contains("the training set's 1 sample over 2 ranks does not fill") &&
          Catch::Contains("there are fewer samples than ranks: set data.drop_last: false, "
                          "or use at most 1 rank"));
  // The default batch: at the data it does not fill, or at the ranks it does not divide over.
  const std::string defaulted = (dir / "default_batch.yaml").string();
  std::ofstream(defaulted) << "data:\n  train: {type: synthetic, shape: [4], classes: 3, size: "
                              "64}\nmodel:\n  layers: [{type: linear, out_features: 3}]\n";
  CHECK(run("validate " + defaulted, true).out ==
        defaulted +
            ":2:10: error: train.batch_size: the training set's 64 samples do not fill one batch "
            "of 128, the default train.batch_size (data.drop_last: true drops a short one)\n"
            "    set train.batch_size to at most 64, or data.drop_last: false\n1 error\n");
  // A transform that does not fit the samples: at its key, in the file.
  std::ofstream(dir / "crop.yaml") << "extends: default_batch.yaml\n"
                                      "data:\n"
                                      "  transforms:\n"
                                      "    - {type: scale}\n"
                                      "    - {type: random_crop, size: 6}\n";
  CHECK_THAT(run("validate " + (dir / "crop.yaml").string() + " train.batch_size=8", true).out,
             Catch::StartsWith((dir / "crop.yaml").string() +
                               ":5:7: error: data.transforms[1]: transform 'random_crop' needs "
                               "image samples [C, H, W] or [H, W], got [4]"));
  // The evaluation's list derived from data.transforms leaves the random
  // transforms out: its error is at the item's place in data.transforms.
  std::ofstream(dir / "eval_shape.yaml")
      << "model:\n  layers: [{type: flatten}, {type: linear, out_features: 3}]\n"
         "data:\n"
         "  train: {type: synthetic, shape: [3, 4, 4], classes: 3, size: 64}\n"
         "  eval: {type: synthetic, shape: [1, 4, 4], classes: 3, size: 64}\n"
         "  transforms:\n"
         "    - {type: random_flip}\n"
         "    - {type: normalize, mean: [0, 0, 0], std: [1, 1, 1]}\n"
         "train: {batch_size: 8}\n";
  CHECK_THAT(run("validate " + (dir / "eval_shape.yaml").string(), true).out,
             Catch::StartsWith((dir / "eval_shape.yaml").string() +
                               ":8:31: error: data.transforms[1].mean: on data.eval's samples: "
                               "transform 'normalize': mean and std need 1 value (one per "
                               "channel) for samples [1, 4, 4], got 3"));
  // A transform of data.eval_transforms that does not fit: at that item of the list.
  CHECK(run("validate " + defaulted +
                " train.batch_size=8 'data.eval_transforms=[{type: random_crop, size: 6}]'",
            true)
            .out ==
        "<command line>:2:23: error: data.eval_transforms[0]: transform 'random_crop' needs "
        "image samples [C, H, W] or [H, W], got [4] (in override 2 "
        "'data.eval_transforms=[{type: random_crop, size: 6}]')\n1 error\n");
  std::ofstream(defaulted, std::ios::app) << "devices: {world_size: 3}\n";
  CHECK(run("validate " + defaulted + " data.train.size=300", true).out ==
        defaulted +
            ":5:23: error: train.batch_size: the default train.batch_size 128 does not divide "
            "over 3 ranks\n    set train.batch_size to a multiple of 3\n1 error\n");
  const std::string csv = (dir / "targets.csv").string();
  std::ofstream(csv) << "a,b,c,d,y\n0.1,0.2,0.3,0.4,1.5\n0.5,0.6,0.7,0.8,-2.5\n";
  CHECK(error_of("{type: csv, path: " + csv + ", regression: true}") ==
        config +
            ":4:9: error: data.eval: it has regression targets, but data.train has class labels\n"
            "    use an evaluation set of the same kind as the training set\n1 error\n");
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "keep_best with a metric the run never records, or a loss kept at its largest, is refused") {
  const auto dir = std::filesystem::temp_directory_path() / "trainer_test_cli_keep_best";
  std::filesystem::create_directories(dir);
  const std::string config = (dir / "keep_best.yaml").string();
  std::ofstream(config) << "name: keep_best\n"
                           "data:\n"
                           "  train: {type: synthetic, shape: [4], classes: 3, size: 64}\n"
                           "  eval: {type: synthetic, shape: [4], classes: 3, size: 16}\n"
                           "model:\n"
                           "  layers: [{type: linear, out_features: 3}]\n"
                           "train: {batch_size: 8}\n"
                           "checkpoint: {keep_best: 2}\n";
  const auto validate = [&](const std::string& overrides) {
    return run("validate " + config + " " + overrides, true);
  };
  CHECK(validate("").out == "ok\n");  // eval.accuracy, the default
  CHECK(validate("checkpoint.metric=eval.loss checkpoint.mode=min").out == "ok\n");
  CHECK(validate("checkpoint.metric=train.accuracy").out == "ok\n");
  CHECK(validate("checkpoint.metric=eval.acuracy").out ==
        "<command line>:1:19: error: checkpoint.metric: keep_best ranks checkpoints by "
        "'eval.acuracy', which this run never records (in override 1 "
        "'checkpoint.metric=eval.acuracy')\n"
        "    did you mean 'eval.accuracy'? It records eval.loss, eval.accuracy, train.loss, "
        "train.accuracy\n1 error\n");
  CHECK(validate("checkpoint.metric=eval.top5")
            .out.find("never records: top5 needs more than 5 classes, and the data has 3 (in "
                      "override 1 'checkpoint.metric=eval.top5')\n") != std::string::npos);
  const auto loss_at_max = validate("checkpoint.metric=eval.loss");
  CHECK(loss_at_max.code == 2);
  CHECK(loss_at_max.out ==
        "<command line>:1:19: error: checkpoint.mode: keep_best would keep the checkpoints of the "
        "largest eval.loss (checkpoint.mode defaults to max) (in override 1 "
        "'checkpoint.metric=eval.loss')\n"
        "    set checkpoint.mode: min\n1 error\n");
  // A mode written against the default metric, at the mode.
  CHECK(validate("checkpoint.mode=min").out ==
        "<command line>:1:17: error: checkpoint.mode: keep_best would keep the checkpoints of the "
        "smallest eval.accuracy (checkpoint.metric defaults to eval.accuracy) (in override 1 "
        "'checkpoint.mode=min')\n"
        "    set checkpoint.metric to the metric meant, or checkpoint.mode: max\n1 error\n");
  // No evaluation set: the default metric is reported at keep_best.
  std::ofstream(config) << "name: keep_best\n"
                           "data:\n"
                           "  train: {type: synthetic, shape: [4], classes: 3, size: 64}\n"
                           "model:\n"
                           "  layers: [{type: linear, out_features: 3}]\n"
                           "train: {batch_size: 8}\n"
                           "checkpoint: {keep_best: 2}\n";
  CHECK(validate("").out ==
        config +
            ":7:25: error: checkpoint.metric: keep_best ranks checkpoints by 'eval.accuracy' "
            "(checkpoint.metric's default), which this run never records: it has no evaluation "
            "set (add data.eval, or data.split)\n"
            "    it records train.loss, train.accuracy\n1 error\n");
  // Without keep_best, a metric written still ranks `eval --checkpoint best`:
  // a loss at the default max would pick the worst checkpoint (a warning:
  // nothing else ranks by it).
  const auto unranked = validate("checkpoint.keep_best=0 checkpoint.metric=train.loss");
  CHECK(unranked.code == 0);
  CHECK(unranked.out ==
        "<command line>:2:19: warning: checkpoint.mode: trainer eval --checkpoint best would "
        "pick the checkpoint of the largest train.loss (checkpoint.mode defaults to max)\n"
        "    set checkpoint.mode: min\nok\n");
  // A mode written with the default metric, which this run never records:
  // said at the mode.
  CHECK_THAT(validate("checkpoint.keep_best=0 checkpoint.mode=min").out,
             Catch::StartsWith("<command line>:2:17: warning: checkpoint.metric: trainer eval "
                               "--checkpoint best ranks checkpoints by 'eval.accuracy' "
                               "(checkpoint.metric's default), which this run never records"));
  CHECK(validate("checkpoint.keep_best=0 checkpoint.metric=train.loss checkpoint.mode=min").out ==
        "ok\n");
  CHECK(validate("checkpoint.keep_best=0").out == "ok\n");  // nothing ranks: nothing to say
  std::filesystem::remove_all(dir);
}

namespace {

// A fresh temporary folder for one test case, removed at its end.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path() / ("trainer_test_cli_" + name)) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
    return (path_ / name).string();
  }
  std::string path(const std::string& name = "") const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// A tiny experiment that trains in well under a second.
const std::string kTinyExperiment =
    "name: tiny\n"
    "data:\n"
    "  train: {type: synthetic, shape: [1, 4, 4], classes: 4, size: 32}\n"
    "  eval: {type: synthetic, shape: [1, 4, 4], classes: 4, size: 16, seed: 3}\n"
    "  workers: 1\n"
    "model:\n"
    "  layers: [{type: flatten}, {type: linear, out_features: 4}]\n"
    "train: {max_steps: 1, batch_size: 8, log_every: 1}\n"
    "backend: {threads: 1}\n";

}  // namespace

TEST_CASE("extends given as an override is refused by every config command") {
  TempDir dir("extends_override");
  const std::string only_name = dir.file("onlyname.yaml", "name: only\n");
  const std::string base = dir.file("base.yaml", kTinyExperiment);
  for (const std::string& command : {"validate " + only_name, "print-config " + base}) {
    INFO(command);
    const auto r = run(command + " extends=" + base, true);
    CHECK(r.code == 2);
    CHECK(r.out.find("<command line>:1:1: error: extends: `extends` cannot be given as an "
                     "override") != std::string::npos);
    CHECK(r.out.find("put `extends: " + base + "` at the top of the config file") !=
          std::string::npos);
  }
  // A config that extends another prints without the key.
  const std::string child = dir.file("child.yaml", "extends: base.yaml\nseed: 3\n");
  const auto printed = run("print-config " + child);
  CHECK(printed.code == 0);
  CHECK(printed.out.find("extends:") == std::string::npos);
}

TEST_CASE("a value an extending file or an override sets again is reported where it is set") {
  TempDir dir("set_again");
  const std::string base = dir.file(
      "base.yaml",
      kTinyExperiment + "sweep:\n  grid:\n    optimizer.lr: [0.1, 0.01]\n  seeds: [0, 1]\n");
  const std::string child =
      dir.file("child.yaml",
               "extends: base.yaml\nsweep:\n  grid:\n    optimizer.lr: [abc, 0.1]\n"
               "  seeds: [x, 1]\n");
  const auto r = run("validate " + child, true);
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK(r.out.find(child + ":4:5: error: sweep.grid.optimizer.lr: with optimizer.lr=abc") !=
        std::string::npos);
  CHECK(r.out.find(child + ":5:3: error: sweep.seeds: with seed=x") != std::string::npos);
  CHECK(r.out.find("base.yaml:") == std::string::npos);
  const auto overridden = run("validate " + base + " 'sweep.seeds=[x, 1]'", true);
  INFO(overridden.out);
  CHECK(overridden.out.find("<command line>:1:7: error: sweep.seeds: with seed=x") !=
        std::string::npos);
}

TEST_CASE("validate of a config the sweep mends warns that run refuses it alone") {
  TempDir dir("mended_alone");
  dir.file("base.yaml", kTinyExperiment + "sweep:\n  grid:\n    optimizer.lr: [0.1, 0.01]\n");
  const std::string child = dir.file("child.yaml", "extends: base.yaml\noptimizer: {lr: abc}\n");
  const auto validated = run("validate " + child, true);
  INFO(validated.out);
  CHECK(validated.code == 0);
  CHECK(validated.out.find(child + ":2:17: warning: optimizer.lr: expected a number") !=
        std::string::npos);
  CHECK(validated.out.find("`trainer run` of this config refuses it; `trainer sweep` sets what "
                           "it needs in every trial (optimizer.lr=0.1 in the first)") !=
        std::string::npos);
  const auto ran = run("run " + child + " --out " + dir.path("run"), true);
  CHECK(ran.code == 2);
  CHECK(ran.out.find(child + ":2:17: error: optimizer.lr: expected a number") != std::string::npos);
}

TEST_CASE("a list index beyond any list is a config error (exit 2), also in a sweep") {
  TempDir dir("huge_index");
  const std::string config = dir.file("tiny.yaml", kTinyExperiment);
  const auto r =
      run("validate " + config + " model.layers[99999999999999999999].out_features=1", true);
  CHECK(r.code == 2);
  CHECK(r.out.find("list index 99999999999999999999 is out of range") != std::string::npos);
  CHECK(r.out.find("stoul") == std::string::npos);
  const auto sweep = run("sweep " + config + " --out " + dir.path("sw") +
                             " --grid model.layers[99999999999999999999].out_features=1,2",
                         true);
  CHECK(sweep.code == 2);
  CHECK(sweep.out.find("list index 99999999999999999999 is out of range") != std::string::npos);
}

TEST_CASE("schema --out that cannot be written names the path and the reason") {
  const auto r = run("schema --out /proc/trainer_no_such_dir", true);
  CHECK(r.code == 2);
  CHECK(r.out ==
        "error: schema --out: cannot create the folder "
        "'/proc/trainer_no_such_dir/schemas': No such file or directory\n");
  // An empty name would silently write into the current directory.
  const auto empty = run("schema --out ''", true);
  CHECK(empty.code == 2);
  CHECK(empty.out.find("--out: an empty directory name") != std::string::npos);
}

TEST_CASE("an unknown command is named, with the commands and the nearest") {
  const auto r = run("frobnicate", true);
  CHECK(r.code == 2);
  CHECK(r.out ==
        "error: unknown command 'frobnicate'; the commands are: run, validate, "
        "print-config, plan, time, sweep, lr-find, eval, doctor, schema, version\n"
        "    trainer --help says what each does\n");
  CHECK(run("valdate x.yaml", true).out.find("    did you mean 'validate'?\n") !=
        std::string::npos);
  // --version answers at once: what follows it would go unread.
  const auto version = run("--version extra", true);
  CHECK(version.code == 2);
  CHECK(version.out.find("error: trainer --version takes no argument 'extra'") !=
        std::string::npos);
  CHECK(run("--version", true).code == 0);
}

TEST_CASE("a layer name that is not a string is described, not shown as ''") {
  TempDir dir("layer_name");
  const std::string config = dir.file("tiny.yaml", kTinyExperiment);
  const auto r = run("validate " + config + " model.layers[1].name=[a]", true);
  CHECK(r.code == 2);
  CHECK(r.out.find("model.layers[1].name: expected a layer name without dots (and not 'input' or "
                   "'loss', which name the batch and the loss), "
                   "found a list (in override 1 'model.layers[1].name=[a]')\n") !=
        std::string::npos);
}

TEST_CASE("block repeat is an integer field with a stated limit; parameters are checked") {
  TempDir dir("blocks");
  const auto config_with = [&](const std::string& instance, const std::string& body) {
    return dir.file("blocks.yaml", kTinyExperiment.substr(0, kTinyExperiment.find("model:")) +
                                       "model:\n"
                                       "  blocks:\n"
                                       "    b:\n"
                                       "      params: {ch: 4}\n"
                                       "      layers:\n"
                                       "        - " +
                                       body +
                                       "\n"
                                       "  layers:\n"
                                       "    - {type: flatten}\n"
                                       "    - " +
                                       instance +
                                       "\n"
                                       "train: {max_steps: 1, batch_size: 8}\n");
  };
  const std::string linear = "{type: linear, out_features: $ch}";
  CHECK(run("validate " + config_with("{block: b, repeat: 2}", linear), true).out == "ok\n");
  for (const char* repeat : {"2.5", "1e1", "\"3\"", "0", "1000000000"}) {
    INFO(repeat);
    const std::string config =
        config_with("{block: b, repeat: " + std::string(repeat) + "}", linear);
    const auto r = run("validate " + config, true);
    CHECK(r.code == 2);
    CHECK(r.out.find(config + ":14:26: error: model.layers[1].repeat: expected an integer >= 1 "
                              "and <= 10000, found ") == 0);
  }
  // An undeclared parameter is named, with the block's parameters.
  std::string config = config_with("{block: b}", "{type: linear, out_features: $nope}");
  CHECK(run("validate " + config, true).out ==
        config +
            ":11:40: error: model.blocks.b.layers: '$nope' names no parameter of block 'b'\n"
            "    its parameters: ch (declared under model.blocks.b.params)\n1 error\n");
  config = config_with("{block: b}", "{type: linear, out_features: $cj}");
  CHECK(run("validate " + config, true).out.find("    did you mean '$ch'?\n") != std::string::npos);
  // Quoted, a reference is a string: the error says how to write it.
  for (const char* quoted : {"\"$ch\"", "\"${ch}\""}) {
    config = config_with("{block: b}", "{type: linear, out_features: " + std::string(quoted) + "}");
    const auto r = run("validate " + config, true);
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK(r.out.find("    a block parameter is written without quotes: $ch (quoted, it is the "
                     "string '") != std::string::npos);
  }
  // A bad parameter value is reported where the instance writes it.
  config = config_with("{block: b, ch: abc}", linear);
  CHECK(run("validate " + config, true).out ==
        config +
            ":14:22: error: model.blocks.b.layers[0].out_features: expected an integer >= 1, "
            "found 'abc'\n1 error\n");
}

TEST_CASE("validate checks the sweep section like trainer sweep does") {
  TempDir dir("validate_sweep");
  const std::string config =
      dir.file("sweep.yaml",
               kTinyExperiment +
                   "sweep:\n"
                   "  grid: {optimizer: {lr: [0.1, 0.2]}}\n"
                   "  random: {trials: 2, params: {optimizer.momentum: {uniform: [0.2, 0.1]}}}\n"
                   "  objective: {metric: eval.acc}\n");
  const auto r = run("validate " + config, true);
  CHECK(r.code == 2);
  CHECK(r.out.find(":11:21: error: sweep.grid.optimizer: expected a list of values, found a map: "
                   "grid keys are dotted config keys\n"
                   "    write `optimizer.lr: [...]` directly under sweep.grid\n") !=
        std::string::npos);
  CHECK(r.out.find(":12:62: error: sweep.random.params.optimizer.momentum.uniform: expected "
                   "[low, high] with low <= high\n") != std::string::npos);
  CHECK(r.out.find(":13:23: error: sweep.objective.metric: unknown metric 'eval.acc'") !=
        std::string::npos);
  CHECK(r.out.find("3 errors\n") != std::string::npos);
  // Swept values are checked against the config, at the sweep key.
  const std::string values =
      dir.file("values.yaml",
               kTinyExperiment + "sweep:\n  grid: {optimizer.lr: [0.1, -1], optimizer.lrr: [1]}\n");
  const auto v = run("validate " + values, true);
  CHECK(v.code == 2);
  CHECK(v.out.find(values + ":11:10: error: sweep.grid.optimizer.lr: with optimizer.lr=-1: "
                            "expected a number >= 1e-30 and <= 1e+30, found integer -1\n") !=
        std::string::npos);
  CHECK(v.out.find("sweep.grid.optimizer.lrr: with optimizer.lrr=1: unknown key 'lrr'") !=
        std::string::npos);
  // Too many trials, counted without expanding them.
  const std::string big = dir.file(
      "big.yaml",
      kTinyExperiment + "sweep:\n  random: {trials: 100000000, params: {seed: {int: [0, 9]}}}\n");
  const auto b = run("validate " + big, true);
  CHECK(b.code == 2);
  CHECK(b.out.find("sweep.random.trials: expected at most 10000 trials, found 100000000") !=
        std::string::npos);
  const std::string good =
      dir.file("good.yaml", kTinyExperiment + "sweep:\n  grid: {optimizer.lr: [0.1, 0.2]}\n");
  // The trials it makes, counted.
  CHECK(run("validate " + good, true).out == "ok: a sweep of 2 trials (trainer sweep runs them)\n");
}

TEST_CASE("a sweep larger than the cap is refused up front with the count") {
  TempDir dir("sweep_cap");
  const std::string config = dir.file("tiny.yaml", kTinyExperiment);
  std::string values;
  for (int i = 1; i <= 1000; ++i) values += (i > 1 ? "," : "") + std::to_string(i);
  const auto r = run("sweep " + config + " --out " + dir.path("sw") + " --grid seed=" + values +
                         " --grid train.log_every=" + values,
                     true);
  CHECK(r.code == 2);
  CHECK(r.out.find("the sweep expands to 1000000 trials (1000 (seed) x 1000 (train.log_every)); "
                   "a sweep may have at most 10000") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.path("sw")));
}

TEST_CASE("a sweep directory holding another sweep is refused; the same sweep resumes") {
  TempDir dir("sweep_reuse");
  const std::string config = dir.file("tiny.yaml", kTinyExperiment);
  const std::string out = dir.path("sw");
  const std::string sweep = "sweep " + config + " --out " + out + " --grid optimizer.lr=";
  REQUIRE(run(sweep + "0.1,0.2").code == 0);
  const auto other = run(sweep + "0.3,0.4", true);
  CHECK(other.code == 2);
  CHECK(other.out.find("error: the sweep directory '" + out +
                       "' holds a different sweep (it recorded trial-000: [\"optimizer.lr=0.1\"], "
                       "this sweep has trial-000: [\"optimizer.lr=0.3\"])") == 0);
  CHECK(other.out.find("use a new --out directory") != std::string::npos);
  const auto more = run(sweep + "0.1,0.2,0.3", true);
  CHECK(more.code == 2);
  CHECK(more.out.find("it recorded (nothing), this sweep has trial-002") != std::string::npos);
  const auto same = run(sweep + "0.1,0.2 --parallel 2", true);
  CHECK(same.code == 0);
  CHECK(same.out.find("2 trials, 0 to run") != std::string::npos);
}

TEST_CASE("repeated --grid flags add values; a bracketed value is one value") {
  TempDir dir("sweep_grid");
  const std::string config = dir.file("tiny.yaml", kTinyExperiment);
  const auto r = run("sweep " + config + " --out " + dir.path("a") +
                         " --grid optimizer.lr=0.1 --grid optimizer.lr=0.2",
                     true);
  CHECK(r.code == 0);
  CHECK(r.out.find("sweep: 2 trials") != std::string::npos);
  const auto list = run("sweep " + config + " --out " + dir.path("b") +
                            " --grid 'model.layers=[{type: flatten},{type: linear, "
                            "out_features: 4}]'",
                        true);
  CHECK(list.code == 0);
  CHECK(list.out.find("sweep: 1 trials") != std::string::npos);
  // A --grid flag takes one KEY=VALUES: what follows it is an override (here
  // one the grid would replace, so refused).
  const auto after = run("sweep " + config + " --out " + dir.path("c") +
                             " --grid optimizer.lr=0.1,0.2 optimizer.lr=0.5",
                         true);
  CHECK(after.code == 2);
  CHECK(after.out.find("the sweep varies optimizer.lr (a --grid flag)") != std::string::npos);
}

TEST_CASE("a batchnorm with one value per channel to normalise is refused at the layer") {
  TempDir dir("batchnorm_one_value");
  const std::string config = dir.file("bn.yaml",
                                      "name: bn\n"
                                      "data:\n"
                                      "  train: {type: synthetic, shape: [3, 1, 1], classes: 4}\n"
                                      "model:\n"
                                      "  layers:\n"
                                      "    - {type: batchnorm}\n"
                                      "    - {type: flatten}\n"
                                      "    - {type: linear, out_features: 4}\n"
                                      "train: {max_steps: 5, batch_size: 1}\n");
  const auto r = run("validate " + config, true);
  CHECK(r.code == 2);
  CHECK(r.out.find(config + ":6:7: error: model: layer 'batchnorm1' (batchnorm): in training it "
                            "normalises each channel over the N x H x W values of its input, and "
                            "[1, 3, 1, 1] has one per channel") == 0);
  CHECK(run("run " + config + " --out " + dir.path("run"), true).code == 2);
  // Two values per channel, from the batch or the image, are enough.
  CHECK(run("validate " + config + " train.batch_size=2", true).out == "ok\n");
  CHECK(run("validate " + config + " 'data.train.shape=[3, 2, 1]'", true).out == "ok\n");
}

TEST_CASE("a short last micro-batch of 1 that meets a batchnorm is refused at data.drop_last") {
  TempDir dir("batchnorm_short_batch");
  const std::string config =
      dir.file("bn.yaml",
               "name: bn\n"
               "data:\n"
               "  train: {type: synthetic, shape: [8], classes: 4, size: 33}\n"
               "  drop_last: false\n"
               "model:\n"
               "  layers:\n"
               "    - {type: linear, out_features: 16}\n"
               "    - {type: batchnorm}\n"
               "    - {type: linear, out_features: 4}\n"
               "train: {max_steps: 5, batch_size: 8}\n");
  const auto r = run("validate " + config, true);
  CHECK(r.code == 2);
  CHECK(r.out.find(config + ":4:14: error: data.drop_last: false: the 33 training samples end each "
                            "epoch with a micro-batch of 1 sample (of 8), and layer 'batchnorm1' "
                            "(batchnorm): in training") == 0);
  CHECK(run("run " + config + " --out " + dir.path("run"), true).code == 2);
  // Dropped, or 2 left over: enough.
  CHECK(run("validate " + config + " data.drop_last=true", true).out == "ok\n");
  CHECK(run("validate " + config + " data.train.size=34", true).out == "ok\n");
  // Over two ranks each shard of 17 ends with 1 of 4: refused alike, unless synchronised.
  const auto ranks = run("validate " + config + " devices.world_size=2", true);
  CHECK(ranks.code == 2);
  CHECK(ranks.out.find("false: each rank's shard of 17 samples ends each epoch with a micro-batch "
                       "of 1 sample (of 4)") != std::string::npos);
  CHECK(run("validate " + config + " devices.world_size=2 model.layers[1].sync=true", true).out ==
        "ok\n");
}

TEST_CASE("trainer time with accumulation reports a micro-batch and the step it makes") {
  const auto r = run(
      "time " + kGood + "mlp.yaml train.micro_batch_size=0 train.accumulation=4 --steps 3", true);
  INFO(r.out);
  REQUIRE(r.code == 0);
  std::smatch one, full;
  REQUIRE(std::regex_search(r.out, one,
                            std::regex(R"(optimizer \(\w+\) ([\d.]+) ms; one micro-batch and the )"
                                       R"(update ([\d.]+) ms)")));
  REQUIRE(std::regex_search(r.out, full,
                            std::regex(R"(a step of 4 micro-batches: about ([\d.]+) ms)")));
  // The optimizer once, the rest four times (the printed figures are rounded). The two
  // figures are timed one after the other, so on a busy machine the optimizer alone can
  // take longer than a micro-batch with it: the rest then counts as nothing, not less.
  const double optimizer = std::stod(one[1]), micro = std::stod(one[2]);
  CHECK(std::stod(full[1]) ==
        Approx(4 * std::max(0.0, micro - optimizer) + optimizer).margin(0.004));
  CHECK(r.out.find("whole step ") == std::string::npos);
}

TEST_CASE("backend.threads: 0 takes OMP_NUM_THREADS when it is set, and the manifest says so") {
  TempDir dir("omp_threads");
  const auto threads_of = [&](const std::string& environment, const std::string& name) {
    const std::string out = dir.path(name);
    const auto r = trainer::testing::run_command(
        environment + " " + trainer::testing::trainer_binary() + " run " + kGood +
            "mlp.yaml backend.threads=0 "
            "train.max_steps=1 --out " +
            out,
        true);
    INFO(r.out);
    REQUIRE(r.code == 0);
    std::ifstream in(out + "/manifest.json");
    const std::string manifest((std::istreambuf_iterator<char>(in)), {});
    std::smatch m;
    REQUIRE(std::regex_search(manifest, m, std::regex(R"("threads": (\d+))")));
    return std::stoi(m[1]);
  };
  CHECK(threads_of("OMP_NUM_THREADS=1", "one") == 1);
  CHECK(threads_of("OMP_NUM_THREADS=3,2", "nested") == 3);  // the outermost level
  // Unset or not a number: every CPU this process may use.
  CHECK(threads_of("env -u OMP_NUM_THREADS", "unset") == threads_of("OMP_NUM_THREADS=x", "bad"));
}

TEST_CASE("an error at a section names the overrides that changed inside it") {
  const auto r = run("validate " + kGood + "mlp.yaml 'model.layers[3].out_features=5'", true);
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK(r.out.find("error: model.layers: the last layer gives 5 outputs") != std::string::npos);
  CHECK(r.out.find(" (override 1 'model.layers[3].out_features=5' changed it)") !=
        std::string::npos);
  // An override of another section is not named.
  const auto other =
      run("validate " + kGood + "mlp.yaml optimizer.lr=0.2 'model.layers[3].out_features=5'", true);
  CHECK(other.out.find("(override 2 'model.layers[3].out_features=5' changed it)") !=
        std::string::npos);
  CHECK(other.out.find("optimizer.lr=0.2") == std::string::npos);
  // A key missing from a layer an override gave another type: that override.
  const auto retyped = run("validate " + kGood + "mlp.yaml 'model.layers[1].type=conv2d'", true);
  INFO(retyped.out);
  CHECK(retyped.code == 2);
  CHECK(retyped.out.find("error: model.layers[1].out_channels: missing required key "
                         "'out_channels'") != std::string::npos);
  CHECK(retyped.out.find("(override 1 'model.layers[1].type=conv2d' set model.layers[1].type)") !=
        std::string::npos);
}

TEST_CASE("eval transforms: a shape they change is theirs; a random one is a warning") {
  const auto r = run(
      "validate " + kGood + "mlp.yaml 'data.eval_transforms=[{type: random_crop, size: 6}]'", true);
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK(r.out.find("<command line>:1:23: error: data.eval_transforms: they make the evaluation "
                   "samples [1, 6, 6], but data.transforms makes the training samples") == 0);
  CHECK(r.out.find("(in override 1 ") != std::string::npos);
  const auto flip =
      run("validate " + kGood + "mlp.yaml 'data.eval_transforms=[{type: random_flip}]'", true);
  INFO(flip.out);
  CHECK(flip.code == 0);
  CHECK(flip.out.find("warning: data.eval_transforms[0]: random_flip is random and acts only on "
                      "training batches") != std::string::npos);
}

TEST_CASE("a CSV without a header takes its columns by index, written as integers") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "trainer_test_cli_csv_index";
  fs::create_directories(dir);
  std::ofstream(dir / "plain.csv") << "1,2,0\n3,4,1\n5,6,0\n";
  std::ofstream(dir / "named.csv") << "a,b,y\n1,2,0\n3,4,1\n5,6,0\n";
  std::ofstream(dir / "exp.yaml")
      << "model:\n"
         "  layers: [{type: linear, out_features: 2}]\n"
         "data:\n"
         "  train: {type: csv, path: plain.csv, header: false, label: 2, "
         "features: [0, 1]}\n"
         "train: {batch_size: 3}\n";
  const std::string config = (dir / "exp.yaml").string();
  auto r = run("validate " + config, true);
  INFO(r.out);
  CHECK(r.code == 0);
  // With a header, columns go by name: an index is no name there.
  r = run("validate " + config + " data.train.path=" + (dir / "named.csv").string() +
              " data.train.header=true",
          true);
  INFO(r.out);
  CHECK(r.code == 2);
  CHECK(r.out.find("has no column '2'; columns: a, b, y (with a header, columns go by name; "
                   "header: false numbers them from 0)") != std::string::npos);
  CHECK(r.out.find("did you mean") == std::string::npos);  // no name is near a number
  // Without a header, a column number out of range: nothing offered either.
  r = run("validate " + config + " data.train.label=7", true);
  CHECK(r.code == 2);
  CHECK(r.out.find("has no column '7'; columns: 0, 1, 2") != std::string::npos);
  CHECK(r.out.find("did you mean") == std::string::npos);
  // A delimiter of two characters is an error at the delimiter.
  r = run("validate " + config + " 'data.train.delimiter=;;'", true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("<command line>:1:22: error: data.train.delimiter: ") &&
                        Catch::Contains("delimiter must be one character, got ';;'"));
  // A tab written as YAML reads it only in double quotes: how to write it.
  r = run("validate " + config + " 'data.train.delimiter=\\t'", true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("delimiter must be one character, got '\\t': a backslash and "
                                    "'t', as YAML reads an escape in double quotes only; write a "
                                    "tab as delimiter: \"\\t\" (on the command line in single "
                                    "quotes around the whole override: "
                                    "'...delimiter=\"\\t\"')"));
  CHECK(run("validate " + config + " 'data.train.delimiter=\"\\t\"'", true)
            .out.find("must be one character") == std::string::npos);
  // The quote character cannot be the delimiter.
  r = run("validate " + config + " \"data.train.delimiter='\\\"'\"", true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("error: data.train.delimiter: ") &&
                        Catch::Contains("cannot separate fields: it encloses quoted fields"));
  fs::remove_all(dir);
}

TEST_CASE("in one rank of a job, every line of an error says which rank wrote it") {
  // Not a run directory: the run command's own check.
  const trainer::testing::TempDir empty_dir("rank-marks");
  const std::string rank_one = "OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 ";
  // stderr alone: what each kind of error writes.
  const auto errors_of = [](const std::string& command) {
    const auto r = trainer::testing::run_command("{ " + command + " 2>&1 >/dev/null; }", false);
    CHECK(r.code == 2);
    return r.out;
  };
  for (const std::string& args : std::vector<std::string>{
           "validate " + kGood + "mlp.yaml optimizer.lr=abc",      // a config diagnostic
           "validate /nonexistent/x.yaml",                         // the command line
           "run " + kGood + "mlp.yaml --epochs 2",                 // an option meant as a key
           "runn " + kGood + "mlp.yaml",                           // a command misspelt
           "run --resume " + empty_dir.path().string(), "run"}) {  // a command's own check
    INFO(args);
    const std::string alone = errors_of(trainer::testing::trainer_binary() + " " + args);
    const std::string in_rank =
        errors_of(rank_one + trainer::testing::trainer_binary() + " " + args);
    CHECK(alone.find("[rank") == std::string::npos);
    std::string marked;
    std::istringstream lines(alone);
    for (std::string line; std::getline(lines, line);) marked += "[rank 1] " + line + "\n";
    CHECK(in_rank == marked);
    CHECK_FALSE(alone.empty());
  }
}

TEST_CASE("schedule settings the run's steps never reach are warned of at their keys") {
  const auto warned = [&](const std::string& schedule) {
    const auto r =
        run("validate " + kGood + "mlp.yaml train.max_steps=4 'schedule=" + schedule + "'", true);
    INFO(r.out);
    CHECK(r.code == 0);
    return r.out;
  };
  CHECK_THAT(warned("{type: cosine, warmup_steps: 4}"),
             Catch::Contains("warning: schedule.warmup_steps: 4 covers all the run's 4 steps: "
                             "the rate only rises, to 1 x optimizer.lr at the last step, and the "
                             "cosine schedule never acts\n    set schedule.warmup_steps below 4"));
  CHECK_THAT(warned("{type: constant, warmup_steps: 8}"),
             Catch::Contains("warning: schedule.warmup_steps: 8 covers all the run's 4 steps: "
                             "the rate only rises, to 0.5 x optimizer.lr at the last step\n"));
  CHECK_THAT(warned("{type: step, step_size: 3, warmup_steps: 1}"),
             Catch::Contains("warning: schedule.step_size: 3: the first decay would be at step 4 "
                             "(after the warm-up), past the run's 4 steps (steps 0 to 3): the "
                             "rate stays optimizer.lr\n    set schedule.step_size below 3"));
  CHECK_THAT(warned("{type: multistep, milestones: [2, 4, 10]}"),
             Catch::Contains("warning: schedule.milestones: 4, 10 are at or past the end of the "
                             "run's 4 steps (steps 0 to 3): they never apply"));
  // What the run reaches: no warning.
  for (const char* reached :
       {"{type: cosine, warmup_steps: 3}", "{type: constant, warmup_steps: 4}",
        "{type: step, step_size: 2, warmup_steps: 1}", "{type: multistep, milestones: [1, 3]}"}) {
    INFO(reached);
    CHECK(warned(reached) == "ok\n");
  }
}

TEST_CASE("a sweep that sets extends is refused at the swept key") {
  TempDir dir("sweep_extends");
  dir.file("base.yaml", kTinyExperiment);
  dir.file("other.yaml", "extends: base.yaml\nseed: 5\n");
  const std::string config =
      dir.file("swept.yaml", "extends: base.yaml\nsweep:\n  grid:\n    extends: [other.yaml]\n");
  for (const char* command : {"validate ", "sweep "}) {
    const auto r = run(command + config, true);
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Catch::StartsWith(config + ":4:5: error: sweep.grid.extends: extends is read "
                                                 "from the config file before any value is set, "
                                                 "so a sweep cannot set it"));
  }
}

TEST_CASE("validate warns of an output.dir where a file or a broken link stands") {
  TempDir dir("validate_output_dir");
  const std::string config = dir.file("tiny.yaml", kTinyExperiment);
  const std::string file = dir.file("afile", "");
  // The file itself, below it, and past it by '..' (the system stops at the file).
  for (const std::string& out : {file, file + "/below", file + "/../x"}) {
    const auto r = run("validate " + config + " output.dir=" + out, true);
    INFO(r.out);
    CHECK(r.code == 0);  // `trainer run --out DIR` would go elsewhere
    CHECK_THAT(r.out, Catch::Contains("warning: output.dir: '" + file +
                                      "' is a file, where the run directories") &&
                          Catch::Contains("`trainer run` without --out would stop there"));
  }
  std::filesystem::create_symlink(dir.path("nowhere"), dir.path("link"));
  const auto linked = run("validate " + config + " output.dir=" + dir.path("link"), true);
  CHECK_THAT(linked.out, Catch::Contains("is a link to nothing"));
  const auto fine = run("validate " + config + " output.dir=" + dir.path("new/folder"), true);
  CHECK(fine.code == 0);
  CHECK_THAT(fine.out, !Catch::Contains("warning"));
}

TEST_CASE("a sweep that sets output.dir is refused at the swept key") {
  TempDir dir("sweep_output_dir");
  const std::string config = dir.file(
      "swept.yaml", std::string(kTinyExperiment) + "sweep:\n  grid:\n    output.dir: [x, y]\n");
  for (const char* command : {"validate ", "sweep "}) {
    const auto r = run(command + config, true);
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Catch::Contains("error: sweep.grid.output.dir: every trial runs in the "
                                      "sweep's own directory"));
  }
}

TEST_CASE("a normalize for values in [0, 1] over bytes with no scale before it is a warning") {
  trainer::testing::TempDir dir("normalize_unscaled");
  const std::string csv = (dir.path() / "bytes.csv").string();
  std::ofstream(csv) << "a,b,y\n255,3,0\n10,20,1\n";
  const std::string config = (dir.path() / "bytes.yaml").string();
  std::ofstream(config) << "name: bytes\ndata:\n  train: {type: csv, path: " << csv
                        << "}\nmodel:\n  layers: [{type: linear, out_features: 2}]\n"
                           "train: {batch_size: 2}\n";
  const auto validate = [&](const std::string& transforms) {
    return run("validate " + config + " 'data.transforms=" + transforms + "'", true);
  };
  auto r = validate("[{type: normalize, mean: [0.5, 0.5], std: [0.25, 0.25]}]");
  CHECK(r.code == 0);
  CHECK(r.out.find("warning: data.transforms: normalize's mean and std are those of values in [0, "
                   "1], but the training samples reach it as stored, up to 255 (no scale before "
                   "it): it makes them up to 1018, and training may diverge\n    put {type: "
                   "scale} before it") != std::string::npos);
  // Scaled first, or statistics of the stored values themselves: nothing to say.
  for (const char* sound :
       {"[{type: scale}, {type: normalize, mean: [0.5, 0.5], std: [0.25, 0.25]}]",
        "[{type: normalize, mean: [90, 8], std: [100, 9]}]", "[{type: normalize}]"}) {
    r = validate(sound);
    INFO(sound << ": " << r.out);
    CHECK(r.code == 0);
    CHECK(r.out.find("normalize's mean") == std::string::npos);
  }
}

TEST_CASE("images reaching the model as stored bytes, neither scaled nor normalized, warn") {
  namespace fs = std::filesystem;
  const fs::path mlp = fs::path(TRAINER_TEST_DATA_DIR).parent_path().parent_path() /
                       "configs/fashion_mnist_mlp.yaml";
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    WARN("Fashion-MNIST is not installed: validate cannot open the MLP's data");
    return;
  }
  const std::string said =
      "warning: data.transforms: the training samples reach the model as "
      "stored, up to 255, with neither scale nor normalize";
  for (const char* transforms : {"[]", "[{type: random_flip}]"}) {
    const auto r = run("validate " + mlp.string() + " 'data.transforms=" + transforms + "'", true);
    INFO(transforms << ": " << r.out);
    CHECK(r.code == 0);
    CHECK(r.out.find(said) != std::string::npos);
    CHECK(r.out.find("add {type: scale}") != std::string::npos);
  }
  // Scaled (the shipped config), or normalized by the data's own statistics: nothing to say.
  for (const char* sound : {"[{type: scale}]", "[{type: normalize}]"}) {
    const auto r = run("validate " + mlp.string() + " 'data.transforms=" + sound + "'", true);
    INFO(sound << ": " << r.out);
    CHECK(r.code == 0);
    CHECK(r.out.find("reach the model as stored") == std::string::npos);
  }
}

TEST_CASE("channels-last NPY images that a convolution reads warn, with the transpose to apply") {
  using trainer::data::testing::npy_bytes;
  using trainer::data::testing::write_bytes;
  const trainer::testing::TempDir dir("channels-last");
  const std::vector<std::uint8_t> pixels(4 * 8 * 8 * 3, 7);
  write_bytes(dir / "hwc.npy", npy_bytes("|u1", "(4, 8, 8, 3)", pixels.data(), pixels.size()));
  write_bytes(dir / "chw.npy", npy_bytes("|u1", "(4, 3, 8, 8)", pixels.data(), pixels.size()));
  const std::vector<std::int64_t> labels = {0, 1, 0, 1};
  write_bytes(dir / "y.npy", npy_bytes("<i8", "(4,)", labels.data(), 8 * labels.size()));
  std::ofstream(dir / "exp.yaml") << "model:\n"
                                     "  layers:\n"
                                     "    - {type: conv2d, out_channels: 2, kernel: 3}\n"
                                     "    - {type: flatten}\n"
                                     "    - {type: linear, out_features: 2}\n"
                                     "data:\n"
                                     "  train: {type: npy, x: hwc.npy, y: y.npy}\n"
                                     "  transforms: [{type: scale}]\n"
                                     "train: {batch_size: 2}\n";
  auto r = run("validate " + (dir / "exp.yaml"), true);
  CHECK(r.code == 0);
  CHECK(r.out == dir / "exp.yaml" +
                     ":7:10: warning: data.train: conv2d1 (conv2d) reads the samples, [8, 8, 3], "
                     "as [C, H, W]: 8 channels of 8 x 3 pixels; they look channels-last [H, W, "
                     "C], as NumPy image arrays often are\n    store the NPY x array as [N, C, H, "
                     "W]: np.save(path, np.ascontiguousarray(x.transpose(0, 3, 1, 2)))\nok\n");
  // Stored channels first, or read by no convolution: nothing to say.
  r = run("validate " + (dir / "exp.yaml") + " data.train.x=" + (dir / "chw.npy"), true);
  CHECK(r.out == "ok\n");
  r = run("validate " + (dir / "exp.yaml") +
              " 'model.layers=[{type: flatten}, {type: linear, out_features: 2}]'",
          true);
  CHECK(r.out == "ok\n");
}

TEST_CASE("help shows a directory to create as DIR, one that must exist as TEXT:DIR") {
  const auto help = run("run --help");
  CHECK(help.out.find("  --out DIR ") != std::string::npos);
  CHECK(help.out.find("  --resume TEXT:DIR ") != std::string::npos);
  CHECK(run("run " + kGood + "minimal.yaml --out ''", true)
            .out.find("error: --out: an empty directory name") == 0);
}
