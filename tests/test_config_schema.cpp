// labels: cpu
// The checked-in schemas/trainer.schema.json and docs/config-reference.md must
// be what the registries generate now; regenerate them with
//   build/trainer schema --out .
// from the repository root.
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "runner/config/json_schema.h"
#include "runner/config/reference.h"
#include "runner/config/registry.h"

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const std::string kRegenerate =
    " is stale (the field, op or data registry changed). Regenerate it from the repository "
    "root with:\n    build/trainer schema --out .\nand commit the result.";

}  // namespace

TEST_CASE("the checked-in JSON Schema is up to date") {
  const std::string path = std::string(TRAINER_SOURCE_DIR) + "/schemas/trainer.schema.json";
  const bool same = read(path) == trainer::config::config_json_schema_text();
  if (!same) FAIL(path + kRegenerate);
}

TEST_CASE("the checked-in configuration reference is up to date") {
  const std::string path = std::string(TRAINER_SOURCE_DIR) + "/docs/config-reference.md";
  const bool same = read(path) == trainer::config::config_reference_markdown();
  if (!same) FAIL(path + kRegenerate);
}

TEST_CASE("the schema and the reference cover every registered field") {
  const auto schema = trainer::config::config_json_schema();
  const std::string reference = trainer::config::config_reference_markdown();
  for (const auto& section : trainer::config::config_sections()) {
    auto props = schema["properties"];
    std::string path = section.path;
    while (!path.empty()) {
      const auto dot = path.find('.');
      auto node = props[path.substr(0, dot)];
      if (node.contains("anyOf")) node = node["anyOf"].back();  // shorthand forms
      props = node["properties"];
      path = dot == std::string::npos ? "" : path.substr(dot + 1);
    }
    for (const auto& f : section.fields) {
      INFO(section.path << "." << f.spec.name);
      CHECK(props.contains(f.spec.name));
      CHECK(reference.find("| `" + f.spec.name + "` |") != std::string::npos);
    }
  }
}
