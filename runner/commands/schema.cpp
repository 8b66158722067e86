// `trainer schema [--out DIR]`: writes DIR/schemas/trainer.schema.json and
// DIR/docs/config-reference.md, both generated from the registries.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "runner/commands/config_commands.h"
#include "runner/config/json_schema.h"
#include "runner/config/reference.h"

namespace trainer {
namespace {

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw std::runtime_error("cannot write '" + path.string() + "'");
  std::printf("wrote %s\n", path.string().c_str());
}

}  // namespace

int command_schema(const std::string& out_dir) {
  const std::filesystem::path dir = out_dir.empty() ? "." : out_dir;
  write_file(dir / "schemas" / "trainer.schema.json", config::config_json_schema_text());
  write_file(dir / "docs" / "config-reference.md", config::config_reference_markdown());
  return 0;
}

}  // namespace trainer
