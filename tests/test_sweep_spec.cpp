// labels: cpu
// parse_sweep / expand_trials: the `sweep:` section and --grid flags become
// trials; repeated grid keys add values, a key swept in two of the grid, the
// random search and the seeds is refused, bracketed values stay whole, and a sweep
// larger than the cap is refused before anything is expanded. An int range
// must have whole-number bounds; the objective's mode defaults to its
// metric's better way; each trial override knows where it was written; a
// quoted value reaches the trials (and sweep.yaml) as the string written; the
// file's grid takes lists of scalars as values, as --grid does; a misspelt
// key anywhere in the section is an error with a suggestion; the checks of a
// trial read of the optimizer only what plans memory.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "runner/config/diagnostics.h"
#include "runner/config/load.h"
#include "runner/config/overrides.h"
#include "runner/config/scalar.h"
#include "runner/config/yaml_reader.h"
#include "runner/sweep/sweep_dir.h"
#include "runner/sweep/sweep_spec.h"
#include "runner/sweep/trial_record.h"

using namespace trainer;
namespace fs = std::filesystem;

namespace {

config::Node yaml(const std::string& text) {
  config::Diagnostics d;
  config::Node n = config::parse_yaml(text, "s.yaml", d);
  REQUIRE(d.empty());
  return n;
}

// The formatted diagnostics parse_sweep throws, or "" when it accepts.
std::string errors_of(const config::Node& section, const std::vector<std::string>& flags = {}) {
  try {
    sweep::parse_sweep(section, flags, 0);
  } catch (const config::ConfigError& e) {
    return e.diagnostics().format_all();
  }
  return "";
}

std::vector<std::vector<std::string>> overrides_of(const std::vector<sweep::Trial>& trials) {
  std::vector<std::vector<std::string>> out;
  for (const auto& t : trials) out.push_back(t.overrides);
  return out;
}

}  // namespace

TEST_CASE("a --grid key given twice gets the values of both") {
  const auto spec = sweep::parse_sweep(config::Node{}, {"optimizer.lr=0.1", "optimizer.lr=0.2"}, 0);
  REQUIRE(spec.grid.size() == 1);
  CHECK(spec.grid[0].second == std::vector<std::string>{"0.1", "0.2"});
  CHECK(overrides_of(sweep::expand_trials(spec)) ==
        std::vector<std::vector<std::string>>{{"optimizer.lr=0.1"}, {"optimizer.lr=0.2"}});
  // Added to the file's grid for the same key, each value once.
  const auto merged =
      sweep::parse_sweep(yaml("{grid: {optimizer.lr: [0.1, 0.3]}}"), {"optimizer.lr=0.3,0.4"}, 0);
  REQUIRE(merged.grid.size() == 1);
  CHECK(merged.grid[0].second == std::vector<std::string>{"0.1", "0.3", "0.4"});
  // A value written twice in one list is one trial too, in a flag and in the file.
  for (const auto& twice :
       {sweep::parse_sweep(config::Node{}, {"optimizer.lr=0.1,0.2,0.1"}, 0),
        sweep::parse_sweep(yaml("{grid: {optimizer.lr: [0.1, 0.2, 0.1]}}"), {}, 0)}) {
    REQUIRE(twice.grid.size() == 1);
    CHECK(twice.grid[0].second == std::vector<std::string>{"0.1", "0.2"});
    CHECK(twice.grid_value_marks[0].size() == 2);
    CHECK(sweep::expand_trials(twice).size() == 2);
  }
}

TEST_CASE("a key swept in two of the grid, the random search and the seeds is refused") {
  CHECK(errors_of(yaml("{grid: {optimizer.lr: [0.1, 0.01]},\n random: {trials: 2, params: "
                       "{optimizer.lr: {log_uniform: [0.001, 0.5]}}}}")) ==
        "s.yaml:2:31: error: sweep.random.params.optimizer.lr: optimizer.lr is swept by "
        "sweep.grid at s.yaml:1:9 too: every trial would set it twice, the last value replacing "
        "the other\n    sweep optimizer.lr in one place: drop it from sweep.random.params or "
        "from sweep.grid\n");
  // At the second place written, whichever part of the section comes first.
  CHECK(errors_of(yaml("{seeds: [1, 2], grid: {seed: [3, 4]}}")) ==
        "s.yaml:1:24: error: sweep.grid.seed: seed is swept by sweep.seeds at s.yaml:1:2 too: "
        "every trial would set it twice, the last value replacing the other\n"
        "    sweep seed in one place: drop it from sweep.grid or from sweep.seeds\n");
  CHECK(errors_of(yaml("{random: {trials: 2, params: {seed: {int: [0, 9]}}}, seeds: [1]}"))
            .find("s.yaml:1:54: error: sweep.seeds: seed is swept by sweep.random.params at "
                  "s.yaml:1:31 too") == 0);
  // A --grid flag against the file's random search or seeds.
  CHECK(errors_of(yaml("{random: {trials: 2, params: {optimizer.lr: {uniform: [0.1, 0.2]}}}}"),
                  {"train.epochs=1,2", "optimizer.lr=0.1,0.01"}) ==
        "--grid flag 2: error: sweep.grid.optimizer.lr: optimizer.lr is swept by "
        "sweep.random.params at s.yaml:1:31 too: every trial would set it twice, the last value "
        "replacing the other\n    sweep optimizer.lr in one place: drop it from --grid flag 2 "
        "or from sweep.random.params\n");
  CHECK(errors_of(yaml("{seeds: [1, 2]}"), {"seed=3"})
            .find("--grid flag 1: error: sweep.grid.seed: "
                  "seed is swept by sweep.seeds at "
                  "s.yaml:1:2 too") == 0);
}

TEST_CASE("--grid splits only at top-level commas") {
  CHECK(sweep::split_grid_values("0.1,0.2") == std::vector<std::string>{"0.1", "0.2"});
  CHECK(sweep::split_grid_values(" 0.1, 0.2 ") == std::vector<std::string>{"0.1", "0.2"});
  CHECK(sweep::split_grid_values("' a ', b") == std::vector<std::string>{"' a '", "b"});
  CHECK(sweep::split_grid_values("[0.1,0.2]") == std::vector<std::string>{"[0.1,0.2]"});
  CHECK(sweep::split_grid_values("[1,8,8],[3,8,8]") ==
        std::vector<std::string>{"[1,8,8]", "[3,8,8]"});
  CHECK(sweep::split_grid_values("{type: scale, factor: 2},x") ==
        std::vector<std::string>{"{type: scale, factor: 2}", "x"});
  CHECK(sweep::split_grid_values("'a,b',c") == std::vector<std::string>{"'a,b'", "c"});
  const auto spec = sweep::parse_sweep(config::Node{}, {"data.train.shape=[1,8,8],[3,8,8]"}, 0);
  REQUIRE(spec.grid.size() == 1);
  CHECK(spec.grid[0].second == std::vector<std::string>{"[1,8,8]", "[3,8,8]"});
}

TEST_CASE("the file's grid takes lists of scalars as values, as --grid does") {
  const auto spec = sweep::parse_sweep(yaml("{grid: {data.train.shape: [[1, 8, 8], [1, 4, 16]]},\n"
                                            " random: {trials: 1, params: {data.eval.shape: "
                                            "{choice: [[2, \"x #y\"]]}}}}"),
                                       {}, 0);
  REQUIRE(spec.grid.size() == 1);
  CHECK(spec.grid[0].second == std::vector<std::string>{"[1, 8, 8]", "[1, 4, 16]"});
  REQUIRE(spec.random.size() == 1);
  CHECK(spec.random[0].choices == std::vector<std::string>{"[2, \"x #y\"]"});
  // Each value is an override a trial config reads as the list written.
  const std::string base =
      "model: {layers: [{type: flatten}, {type: linear, out_features: 2}]}\n"
      "data: {train: {type: synthetic, shape: [2], classes: 2}}\n";
  const auto trials = sweep::expand_trials(
      sweep::parse_sweep(yaml("{grid: {data.train.shape: [[1, 8, 8], [1, 4, 16]]}}"), {}, 0));
  REQUIRE(trials.size() == 2);
  const auto shape = [&](const sweep::Trial& t) {
    const config::Config c = config::load_config_text(base, "t.yaml", t.overrides);
    const config::Node* node = c.resolved.find("data")->find("train")->find("shape");
    REQUIRE(node);
    std::vector<std::string> dims;
    for (const auto& d : node->items()) dims.push_back(d.text());
    return dims;
  };
  CHECK(shape(trials[0]) == std::vector<std::string>{"1", "8", "8"});
  CHECK(shape(trials[1]) == std::vector<std::string>{"1", "4", "16"});
  // A list of lists is no value.
  CHECK(errors_of(yaml("{grid: {data.train.shape: [[[1, 8]]]}}")) ==
        "s.yaml:1:28: error: sweep.grid.data.train.shape: expected scalar values (numbers, "
        "strings, booleans) or lists of them\n    a list value is written as a list inside the "
        "list: [[1, 8, 8], [1, 4, 16]]\n");
}

TEST_CASE("a sweep of more trials than the cap is refused with the count, at the key") {
  CHECK(errors_of(yaml("{random: {trials: 100000000, params: {seed: {int: [0, 9]}}}}")) ==
        "s.yaml:1:19: error: sweep.random.trials: expected at most 10000 trials, found "
        "100000000\n    a sweep may have at most 10000 trials\n");
  std::string values;
  for (int i = 0; i < 1000; ++i) values += (i ? "," : "") + std::to_string(i);
  CHECK(errors_of(config::Node{}, {"seed=" + values, "train.log_every=" + values}) ==
        "--grid flag 1: error: sweep.grid.seed: the sweep expands to 1000000 trials (1000 (seed) "
        "x 1000 (train.log_every)); a sweep may have at most 10000\n"
        "    sweep fewer values, or split the search into several sweeps\n");
  CHECK(errors_of(yaml("{grid: {seed: [1, 2]}, random: {trials: 10000, params: {optimizer.lr: "
                       "{uniform: [0.1, 0.2]}}}}"))
            .find("s.yaml:1:41: error: sweep.random.trials: the sweep expands to 20000 trials (2 "
                  "(seed) x 10000 (random.trials))") == 0);
  // Exactly the cap is fine.
  const auto spec = sweep::parse_sweep(
      yaml("{random: {trials: 10000, params: {optimizer.lr: {uniform: [0.1, 0.2]}}}}"), {}, 0);
  CHECK(sweep::trial_count(spec) == 10000);
  CHECK(sweep::expand_trials(spec).size() == 10000);
}

TEST_CASE("a nested map in the grid says grid keys are dotted") {
  CHECK(errors_of(yaml("{grid: {optimizer: {lr: [0.1, 0.2]}}}")) ==
        "s.yaml:1:20: error: sweep.grid.optimizer: expected a list of values, found a map: grid "
        "keys are dotted config keys\n"
        "    write `optimizer.lr: [...]` directly under sweep.grid\n");
  // From an override, whose path cannot hold the dotted key: --grid can.
  config::Diagnostics d;
  config::Node tree = yaml("name: x\n");
  config::apply_overrides(tree, {"sweep.grid.optimizer.lr=[0.3, 0.2]"}, d);
  REQUIRE(d.empty());
  CHECK_THAT(errors_of(*tree.find("sweep")),
             Catch::Contains("<command line>:1:") &&
                 Catch::Contains("give the grid as a map: 'sweep.grid={optimizer.lr: [...]}' "
                                 "(trainer sweep also takes --grid optimizer.lr=V1,V2,...)"));
}

TEST_CASE("an override of a key the sweep varies, or of a part of it, is named with the key") {
  const auto spec = sweep::parse_sweep(
      yaml("{grid: {data.train.shape: [[1, 4, 4], [1, 2, 8]], optimizer.lr: [0.1, 0.2]}}"), {}, 0);
  const auto diags =
      sweep::overrides_of_swept_keys({"data.train.shape[0]=2", "optimizer.lr=0.3",
                                      "optimizer.lr_scaling=none", "data.train.shapes=1"},
                                     spec);
  REQUIRE(diags.list().size() == 2);
  CHECK(diags.list()[0].message.starts_with(
      "the sweep varies data.train.shape (at s.yaml:1:9), so every trial would replace this "
      "value with its own data.train.shape"));
  CHECK(
      diags.list()[1].message.starts_with("the sweep varies optimizer.lr (at s.yaml:1:51), so "
                                          "every trial would replace this value"));
}

TEST_CASE("an int range must have whole-number bounds") {
  CHECK(errors_of(yaml("{random: {trials: 2, params: {x: {int: [16.5, 16.7]}}}}")) ==
        "s.yaml:1:40: error: sweep.random.params.x.int: expected whole-number bounds, found "
        "[16.5, 16.7]\n    it holds no whole number, or use {uniform: [low, high]} for a real "
        "number\n");
  CHECK(errors_of(yaml("{random: {trials: 2, params: {x: {int: [1.5, 4]}}}}")) ==
        "s.yaml:1:40: error: sweep.random.params.x.int: expected whole-number bounds, found "
        "[1.5, 4]\n    write [2, 4] (the whole numbers it holds), or use {uniform: [low, high]} "
        "for a real number\n");
  CHECK(errors_of(yaml("{random: {trials: 2, params: {x: {int: [0, 1.0e300]}}}}"))
            .find("expected bounds of at most 2^53") != std::string::npos);
  // Whole numbers, written as reals too: every sample within the range.
  const auto spec =
      sweep::parse_sweep(yaml("{random: {trials: 50, params: {x: {int: [16.0, 17]}}}}"), {}, 0);
  for (const auto& t : sweep::expand_trials(spec))
    CHECK((t.overrides[0] == "x=16" || t.overrides[0] == "x=17"));
}

TEST_CASE("the objective's mode defaults to its metric's better way") {
  const auto maximize = [](const std::string& metric) {
    return sweep::parse_sweep(yaml("{objective: {metric: " + metric + "}}"), {}, 0).maximize;
  };
  CHECK(maximize("eval.accuracy"));
  CHECK(maximize("eval.top5"));
  CHECK(maximize("train.samples_per_s"));
  CHECK_FALSE(maximize("eval.loss"));
  CHECK_FALSE(maximize("train.step_ms"));
  CHECK_FALSE(maximize("train.data_wait_pct"));
  CHECK_FALSE(maximize("train.memory_peak_mib"));
  CHECK(
      sweep::parse_sweep(yaml("{objective: {metric: train.step_ms, mode: max}}"), {}, 0).maximize);
  // A metric neither better larger nor smaller needs its mode.
  CHECK(errors_of(yaml("{objective: {metric: train.lr}}")) ==
        "s.yaml:1:22: error: sweep.objective.mode: train.lr is neither better larger nor "
        "smaller: say which to rank first\n    add mode: max or mode: min\n");
}

TEST_CASE("a misspelt key in the sweep section is an error with a suggestion") {
  CHECK(errors_of(yaml("{objective: {metric: eval.accuracy, mdoe: min}}")) ==
        "s.yaml:1:37: error: sweep.objective.mdoe: unknown key 'mdoe'\n"
        "    did you mean 'mode'?\n");
  CHECK(errors_of(yaml("{objective: {metrc: eval.loss}}")) ==
        "s.yaml:1:14: error: sweep.objective.metrc: unknown key 'metrc'\n"
        "    did you mean 'metric'?\n");
  CHECK(errors_of(yaml("{objective: {metric: eval.loss, goal: min}}")) ==
        "s.yaml:1:33: error: sweep.objective.goal: unknown key 'goal'\n"
        "    valid keys: metric, mode\n");
  CHECK(errors_of(yaml("{random: {trials: 2, sead: 3, params: {x: {int: [1, 4]}}}}")) ==
        "s.yaml:1:22: error: sweep.random.sead: unknown key 'sead'\n"
        "    did you mean 'seed'?\n");
  CHECK(errors_of(yaml("{random: {trials: 2, params: {x: {int: [1, 4], choise: [1]}}}}")) ==
        "s.yaml:1:48: error: sweep.random.params.x: unknown distribution 'choise'\n"
        "    did you mean 'choice'?\n");
  CHECK(errors_of(yaml("{seeds: [1], objectiv: {metric: eval.loss}}")) ==
        "s.yaml:1:14: error: sweep.objectiv: unknown key 'objectiv'\n"
        "    did you mean 'objective'?\n");
}

TEST_CASE("each trial override knows whether the sweep section or a --grid flag set it") {
  const auto spec = sweep::parse_sweep(
      yaml("{grid: {optimizer.lr: [0.1]}, seeds: [1],\n random: {trials: 1, params: {x: {choice: "
           "[a]}}}}"),
      {"optimizer.lr=0.2"}, 0);
  const auto trials = sweep::expand_trials(spec);
  REQUIRE(trials.size() == 2);
  REQUIRE(trials[0].sources.size() == 3);
  CHECK(trials[0].overrides == std::vector<std::string>{"optimizer.lr=0.1", "x=a", "seed=1"});
  CHECK(config::to_string(trials[0].sources[0].mark) == "s.yaml:1:9");
  CHECK(trials[0].sources[0].key_path == "sweep.grid.optimizer.lr");
  CHECK(trials[0].sources[1].key_path == "sweep.random.params.x");
  CHECK(config::to_string(trials[0].sources[2].mark) == "s.yaml:1:31");
  CHECK(trials[0].sources[2].key_path == "sweep.seeds");
  CHECK(sweep::from_sweep_section(trials[0].sources[0]));
  CHECK(trials[1].overrides[0] == "optimizer.lr=0.2");
  CHECK(config::to_string(trials[1].sources[0].mark) == "--grid flag 1");
  CHECK_FALSE(sweep::from_sweep_section(trials[1].sources[0]));
}

TEST_CASE(
    "values that mean the same are one trial: numbers by value, booleans by truth, strings quoted "
    "or not") {
  const auto spec = sweep::parse_sweep(
      yaml("{grid: {optimizer.lr: [0.1, 0.10, 1e-1, 0.2], schedule.type: [cosine, \"cosine\"], "
           "data.train.shape: [[1, 4, 4], [1, 4, +4]]}, seeds: [3, 3, 4]}"),
      {"optimizer.lr=0.2,2e-1,0.3"}, 0);
  REQUIRE(spec.grid.size() == 3);
  CHECK(spec.grid[0].second == std::vector<std::string>{"0.1", "0.2", "0.3"});
  CHECK(spec.grid[1].second == std::vector<std::string>{"cosine"});
  CHECK(spec.grid[2].second.size() == 1);
  CHECK(spec.seeds == std::vector<std::string>{"3", "4"});
  CHECK(sweep::expand_trials(spec).size() == 3 * 1 * 1 * 2);
  // -0.0 is 0.0; a boolean is its truth however capitalised: each set of
  // these is one trial. An integer stays apart from a decimal of its value,
  // in either order (an integer setting refuses the decimal: checked, not
  // dropped).
  const auto same = sweep::parse_sweep(
      yaml("{grid: {optimizer.lr: [1, 1.0, 1e0], optimizer.weight_decay: [0.0, 0e0, -0.0], "
           "backend.autotune: [true, True, TRUE, false], train.batch_size: [16.0, 16]}}"),
      {}, 0);
  CHECK(same.grid[0].second == std::vector<std::string>{"1", "1.0"});
  CHECK(same.grid[1].second == std::vector<std::string>{"0.0"});
  CHECK(same.grid[2].second == std::vector<std::string>{"true", "false"});
  CHECK(same.grid[3].second == std::vector<std::string>{"16.0", "16"});
  // A quoted number is a string (a number field refuses it): not the number.
  CHECK(sweep::parse_sweep(yaml("{grid: {name: [2, \"2\"]}}"), {}, 0).grid[0].second.size() == 2);
  // Integers by their exact value, beyond a double's 2^53; 0x10 is no number
  // to the config (a string), so not 16.
  CHECK(sweep::parse_sweep(yaml("{seeds: [9007199254740993, 9007199254740992]}"), {}, 0)
            .seeds.size() == 2);
  CHECK(sweep::parse_sweep(yaml("{grid: {train.batch_size: [16, 0x10]}}"), {}, 0)
            .grid[0]
            .second.size() == 2);
}

TEST_CASE("the sweep's own settings cannot be swept, and its counts are bounded") {
  for (const std::string section :
       {"{grid: {sweep.max_retries: [0, 1]}}",
        "{random: {trials: 2, params: {sweep.objective.mode: {choice: [min, max]}}}}"}) {
    INFO(section);
    CHECK_THAT(errors_of(yaml(section)),
               Catch::Contains("is a setting of the sweep, not of its trials"));
  }
  CHECK_THAT(errors_of(config::Node{}, {"sweep.seeds=1,2"}),
             Catch::Contains("sweep.seeds is a setting of the sweep"));
  // Written as a nested map (as sweep.grid.sweep.max_retries=[0,1] makes it):
  // no other way to write it is suggested, as none would be taken.
  const std::string nested = errors_of(yaml("{grid: {sweep: {max_retries: [0, 1]}}}"));
  CHECK_THAT(nested, Catch::Contains("sweep.max_retries is a setting of the sweep") &&
                         !Catch::Contains("write `sweep.max_retries: [...]`"));
  CHECK_THAT(errors_of(yaml("{max_retries: 9223372036854775807}")),
             Catch::Contains("s.yaml:1:15: error: sweep.max_retries: expected an integer from 0 "
                             "to 1000, found integer 9223372036854775807"));
  CHECK(errors_of(yaml("{max_retries: 1000}")).empty());
  CHECK_THAT(errors_of(yaml("{max_retries: [1]}")),
             Catch::Contains("expected an integer from 0 to 1000, found a list"));
  CHECK_THAT(errors_of(yaml("{random: {trials: 1, seed: 1e19, params: {seed: {int: [0, 9]}}}}")),
             Catch::Contains("sweep.random.seed: expected an integer from 0 to 2^53"));
  // One past 2^53 reads as 2^53 through a double; as an integer it is refused.
  CHECK_THAT(errors_of(yaml("{random: {trials: 1, seed: 9007199254740993, params: {seed: {int: "
                            "[0, 9]}}}}")),
             Catch::Contains("found integer 9007199254740993"));
  CHECK(errors_of(yaml("{random: {trials: 1, seed: 9007199254740992, params: {seed: {int: "
                       "[0, 9]}}}}"))
            .empty());
}

TEST_CASE("random samples keep the digits their range needs, and stay inside it") {
  const auto spec = sweep::parse_sweep(
      yaml("{random: {trials: 40, seed: 1, params: {optimizer.beta2: {uniform: [0.99999, "
           "0.999999]}, optimizer.lr: {log_uniform: [1e-5, 1e-1]}}}}"),
      {}, 0);
  std::set<std::string> betas;
  for (const auto& trial : sweep::expand_trials(spec))
    for (const auto& o : trial.overrides) {
      const std::string value = o.substr(o.find('=') + 1);
      const double v = std::stod(value);
      if (o.rfind("optimizer.beta2=", 0) == 0) {
        betas.insert(value);
        CHECK(v >= 0.99999);
        CHECK(v <= 0.999999);
      } else {
        CHECK(v >= 1e-5);
        CHECK(v <= 1e-1);
        CHECK(value.size() <= 12);  // six digits suffice on a wide range
      }
    }
  CHECK(betas.size() == 40);  // six significant digits would leave about ten
}

TEST_CASE(
    "a config path is recorded absolute, with ./ and sub/../ spelt away but not after a link") {
  const fs::path dir =
      fs::temp_directory_path() / ("trainer_test_recorded_path_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "sub");
  fs::create_directories(dir / "elsewhere/deep");
  fs::create_directory_symlink(dir / "elsewhere/deep", dir / "link");
  const std::string plain = (dir / "sw.yaml").string();
  CHECK(sweep::recorded_config_path(dir / "sw.yaml") == plain);
  CHECK(sweep::recorded_config_path((dir / "sub/../sw.yaml").string()) == plain);
  CHECK(sweep::recorded_config_path((dir / "./sub/./../sw.yaml").string()) == plain);
  // link/.. is dir/elsewhere, not dir: kept as spelt.
  CHECK(sweep::recorded_config_path((dir / "link/../sw.yaml").string()) ==
        (dir / "link/../sw.yaml").string());
  fs::remove_all(dir);
}

TEST_CASE("a quoted grid or choice value reaches its trials as the string written") {
  const std::string base =
      "model: {layers: [{type: flatten}]}\ndata: {train: {type: synthetic, shape: [2]}}\n";
  // The resolved trees of the trials: the base config with each trial's overrides.
  const auto names_of = [&](const std::vector<sweep::Trial>& trials) {
    std::vector<config::Node> names;
    for (const auto& t : trials) {
      config::Node tree = yaml(base);
      config::Diagnostics d;
      config::apply_overrides(tree, t.overrides, d);
      INFO(d.format_all());
      REQUIRE(d.empty());
      REQUIRE(tree.find("name"));
      names.push_back(*tree.find("name"));
    }
    return names;
  };
  const auto grid =
      sweep::expand_trials(sweep::parse_sweep(yaml("{grid: {name: [\"x #y\", \"z\"]}}"), {}, 0));
  const auto grid_names = names_of(grid);
  REQUIRE(grid_names.size() == 2);
  CHECK(grid_names[0].text() == "x #y");
  CHECK(config::classify(grid_names[0]) == config::ScalarKind::string);
  CHECK(grid_names[1].text() == "z");

  const auto numeric = sweep::expand_trials(
      sweep::parse_sweep(yaml("{grid: {name: [\"1\", b]}, seeds: [7]}"), {}, 0));
  const auto numeric_names = names_of(numeric);
  REQUIRE(numeric_names.size() == 2);
  CHECK(numeric_names[0].text() == "1");
  CHECK(config::classify(numeric_names[0]) == config::ScalarKind::string);
  // The whole trial config validates: the name is the string "1", not an integer.
  CHECK(config::load_config_text(base, "t.yaml", numeric[0].overrides).name == "1");

  const auto chosen = sweep::expand_trials(
      sweep::parse_sweep(yaml("{random: {trials: 1, params: {name: {choice: ['x #y']}}}}"), {}, 0));
  const auto chosen_names = names_of(chosen);
  REQUIRE(chosen_names.size() == 1);
  CHECK(chosen_names[0].text() == "x #y");
}

TEST_CASE("sweep.yaml records a quoted value as the string written") {
  sweep::SweepJob job;
  job.config_path = "c.yaml";
  job.spec = sweep::parse_sweep(yaml("{grid: {name: [\"x #y\", \"1\"]}}"), {}, 0);
  job.trials = sweep::expand_trials(job.spec);
  const config::Node record = yaml(sweep::sweep_record(job, ""));
  const config::Node* trials = record.find("trials");
  REQUIRE(trials);
  REQUIRE(trials->size() == 2);
  config::Node tree = yaml("{}");
  config::Diagnostics d;
  config::apply_overrides(tree, {trials->value_at(0).items().at(0).text()}, d);
  REQUIRE(d.empty());
  CHECK(tree.find("name")->text() == "x #y");
  config::Node other = yaml("{}");
  config::apply_overrides(other, {trials->value_at(1).items().at(0).text()}, d);
  REQUIRE(d.empty());
  CHECK(config::classify(*other.find("name")) == config::ScalarKind::string);
}

TEST_CASE("the tables show a swept string's value, not its YAML quoting") {
  sweep::TrialRecord quoted;
  quoted.trial.id = "trial-000";
  quoted.trial.overrides = {"data.train.path=\"data/with,comma.csv\"", "optimizer.lr=0.10",
                            "model.layers[1].kernel=[3, 3]"};
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("trainer-trials-" + std::to_string(::getpid()) + ".csv"))
                               .string();
  sweep::write_trials_csv(path, {quoted});
  std::ifstream in(path);
  const std::string csv((std::istreambuf_iterator<char>(in)), {});
  std::remove(path.c_str());
  INFO(csv);
  // CSV-quoted once for its comma; a number as written; a list as written.
  CHECK(csv.find(",\"data/with,comma.csv\",0.10,\"[3, 3]\",") != std::string::npos);
}

TEST_CASE(
    "the checks of a trial read of the optimizer only what plans memory, of the seed the split") {
  using sweep::setting_read_by_checks;
  // Never read: the optimizer's scalars.
  for (const bool plans : {false, true}) {
    CHECK(setting_read_by_checks("optimizer.lr=0.1", {plans}).empty());
    CHECK(setting_read_by_checks("optimizer.weight_decay=0.01", {plans}).empty());
    // Anything outside the optimizer and the schedule: as written.
    CHECK(setting_read_by_checks("train.batch_size=64", {plans}) == "train.batch_size=64");
  }
  // The schedule's values: read (its steps against the run's length).
  for (const bool plans : {false, true}) {
    CHECK(setting_read_by_checks("schedule.warmup_steps=100", {plans}) ==
          "schedule.warmup_steps=100");
    CHECK(setting_read_by_checks("schedule.type=onecycle", {plans}) == "schedule.type=onecycle");
  }
  // Without a memory plan the rest of the optimizer is not read.
  CHECK(setting_read_by_checks("optimizer.type=adam", {false}).empty());
  // With one: the optimizer's type, and whether SGD has momentum.
  CHECK(setting_read_by_checks("optimizer.type=adam", {true}) == "optimizer.type=adam");
  CHECK(setting_read_by_checks("optimizer.momentum=0.9", {true}) ==
        setting_read_by_checks("optimizer.momentum=0.95", {true}));
  CHECK(setting_read_by_checks("optimizer.momentum=0", {true}) !=
        setting_read_by_checks("optimizer.momentum=0.9", {true}));
  CHECK(setting_read_by_checks("optimizer.momentum=0.0", {true}) ==
        setting_read_by_checks("optimizer.momentum=0", {true}));
  // The seed: read where it picks the samples data.split holds out.
  CHECK(setting_read_by_checks("seed=3", {true, false}).empty());
  CHECK(setting_read_by_checks("seed=3", {false, true}) == "seed=3");
}
