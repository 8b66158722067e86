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

TEST_CASE("the reference names the setting every conditional field depends on") {
  const std::string reference = trainer::config::config_reference_markdown();
  // The reference row of a field: from "| `name` |" to the end of the line,
  // the first one after the heading line `heading`.
  const auto row = [&](const std::string& heading, const std::string& name) {
    const std::size_t at = reference.find("| `" + name + "` |", reference.find(heading));
    REQUIRE(at != std::string::npos);
    return reference.substr(at, reference.find('\n', at) - at);
  };
  for (const auto& section : trainer::config::config_sections())
    for (const auto& f : section.fields) {
      const trainer::FieldSpec& spec = f.spec;
      INFO(section.path << "." << spec.name);
      const std::string text =
          row(section.path.empty() ? "## Top level\n" : "## `" + section.path + "`\n", spec.name);
      if (!spec.applies_when.empty())
        CHECK(text.find("acts only with " + spec.applies_when + ": ") != std::string::npos);
      if (!spec.applies_while_positive.empty())
        CHECK(text.find("acts only with " + spec.applies_while_positive + " above 0") !=
              std::string::npos);
    }
  // Settings that warn when the setting they act on is 0, and data-source
  // settings that another setting of the source refuses.
  CHECK(row("## `optimizer`\n", "nesterov").find("acts only with momentum above 0") !=
        std::string::npos);
  CHECK(row("## `train.early_stopping`\n", "mode")
            .find("one of min, max; acts only with patience "
                  "above 0") != std::string::npos);
  CHECK(row("### `csv`\n", "classes").find("only with regression: false (an error otherwise)") !=
        std::string::npos);
  CHECK(row("### `cifar`\n", "label").find("only with variant: cifar100 (an error otherwise)") !=
        std::string::npos);
}
