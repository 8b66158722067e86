// labels: cpu
// An independent JSON Schema validator (Ajv, draft 2020-12, from npm under
// tools/schema-check) accepts every good fixture and every shipped config in
// configs/, and rejects each bad fixture that a schema can catch. YAML files
// are converted to JSON with the loader's own YAML reading.
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "run_command.h"
#include "runner/config/json_schema.h"
#include "runner/config/to_json.h"
#include "runner/config/yaml_reader.h"

namespace fs = std::filesystem;

namespace {

const fs::path kSource = TRAINER_SOURCE_DIR;
const fs::path kCheckDir = kSource / "tools" / "schema-check";
const fs::path kConfigs = fs::path(TRAINER_TEST_DATA_DIR) / "configs";

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs the validator on every document at once; returns "valid ..." / "invalid ..." per file.
std::map<std::string, std::string> validate_all(const fs::path& schema,
                                                const std::vector<fs::path>& docs) {
  std::string cmd = "node " + (kCheckDir / "check.js").string() + " " + schema.string();
  for (const auto& d : docs) cmd += " " + d.string();
  const auto result = trainer::testing::run_command(cmd);
  const std::string& out = result.out;
  INFO(out);
  REQUIRE(result.code == 0);
  std::map<std::string, std::string> verdicts;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    const bool valid = line.rfind("valid ", 0) == 0;
    const std::size_t start = valid ? 6 : 8;
    const std::size_t end = line.find(".json", start);
    if (end == std::string::npos) continue;
    verdicts[line.substr(start, end + 5 - start)] = line;
  }
  return verdicts;
}

}  // namespace

TEST_CASE("the JSON Schema accepts good configs and rejects bad ones (Ajv)") {
  if (!fs::exists(kCheckDir / "node_modules" / "ajv" / "package.json"))
    FAIL(
        "the independent JSON Schema validator is not installed; run from the repository root:\n"
        "    npm ci --prefix tools/schema-check");

  const fs::path work = fs::temp_directory_path() / "trainer_test_schema_validator";
  fs::remove_all(work);
  fs::create_directories(work);
  const fs::path schema = work / "trainer.schema.json";
  std::ofstream(schema) << trainer::config::config_json_schema_text();

  std::vector<fs::path> yaml_files;
  std::vector<fs::path> expect_valid;
  for (const auto& dir : {kConfigs / "good", kSource / "configs"}) {
    if (!fs::exists(dir)) continue;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".yaml") expect_valid.push_back(e.path());
  }
  // The bad fixtures whose mistake is visible to a schema (not syntax, duplicates,
  // extends problems or cross-field rules).
  const std::vector<fs::path> expect_invalid = {
      kConfigs / "bad" / "typo_key.yaml",         kConfigs / "bad" / "wrong_type.yaml",
      kConfigs / "bad" / "out_of_range.yaml",     kConfigs / "bad" / "bad_enum.yaml",
      kConfigs / "bad" / "missing_required.yaml", kConfigs / "bad" / "several_errors.yaml"};

  // Where the schema and trainer once disagreed: each accepted by both, or
  // refused by both (trainer's `validate` verdict checked here too).
  const std::string base =
      "data:\n  train: {type: synthetic, shape: [1, 4, 4], classes: 4, size: 64}\n"
      "train: {max_steps: 1, batch_size: 8}\n";
  const std::map<std::string, std::string> agreed_good = {
      {"integer_names.yaml", base + "model:\n  layers:\n    - {type: flatten, name: 5}\n"
                                    "    - {type: linear, out_features: 4, inputs: [5]}\n"},
      {"loss_without_type.yaml",
       base + "model:\n  layers: [{type: flatten}, {type: linear, out_features: 4}]\n"
              "  loss: {label_smoothing: 0.1}\n"},
      {"empty_section.yaml",
       base + "model:\n  layers: [{type: flatten}, {type: linear, out_features: 4}]\n"
              "optimizer:\nprecision:\n"}};
  const std::string blocks =
      "model:\n  blocks: {b: {layers: [{type: relu}]}}\n"
      "  layers: [{type: flatten}, {block: b, repeat: REPEAT}, {type: linear, out_features: 4}]\n";
  const std::map<std::string, std::string> agreed_bad = {
      {"devices_integer.yaml",
       base + "model:\n  layers: [{type: flatten}, {type: linear, out_features: 4}]\n"
              "devices: 0\n"},
      {"repeat_zero.yaml", base + blocks.substr(0, blocks.find("REPEAT")) + "0" +
                               blocks.substr(blocks.find("REPEAT") + 6)},
      {"repeat_above_limit.yaml", base + blocks.substr(0, blocks.find("REPEAT")) + "10001" +
                                      blocks.substr(blocks.find("REPEAT") + 6)}};
  for (const auto& [name, text] : agreed_good) {
    std::ofstream(work / name) << text;
    expect_valid.push_back(work / name);
  }
  std::vector<fs::path> expect_invalid_here = expect_invalid;
  for (const auto& [name, text] : agreed_bad) {
    std::ofstream(work / name) << text;
    expect_invalid_here.push_back(work / name);
  }
  for (const auto& [name, text] : agreed_good) {
    const auto r = trainer::testing::run_command(trainer::testing::trainer_binary() + " validate " +
                                                 (work / name).string());
    INFO(name << ": " << r.out);
    CHECK(r.code == 0);
  }
  for (const auto& [name, text] : agreed_bad) {
    const auto r = trainer::testing::run_command(trainer::testing::trainer_binary() + " validate " +
                                                 (work / name).string());
    INFO(name << ": " << r.out);
    CHECK(r.code == 2);
  }

  std::map<std::string, fs::path> json_of;  // json path -> yaml path
  std::vector<fs::path> docs;
  auto convert = [&](const fs::path& yaml, const std::string& tag) {
    trainer::config::Diagnostics diags;
    const auto node = trainer::config::parse_yaml(read(yaml), yaml.string(), diags);
    INFO(diags.format_all());
    REQUIRE(diags.empty());
    const fs::path json = work / (tag + "_" + yaml.parent_path().filename().string() + "_" +
                                  yaml.stem().string() + ".json");
    std::ofstream(json) << trainer::config::to_json(node).dump(1);
    json_of[json.string()] = yaml;
    docs.push_back(json);
  };
  for (const auto& y : expect_valid) convert(y, "good");
  for (const auto& y : expect_invalid_here) convert(y, "bad");

  const auto verdicts = validate_all(schema, docs);
  for (const auto& [json, yaml] : json_of) {
    const bool should_be_valid = fs::path(json).filename().string().rfind("good_", 0) == 0;
    INFO(yaml.string());
    const auto it = verdicts.find(json);
    REQUIRE(it != verdicts.end());
    INFO(it->second);
    CHECK((it->second.rfind("valid ", 0) == 0) == should_be_valid);
  }
  fs::remove_all(work);
}
