// `trainer schema [--out DIR]`: writes DIR/schemas/trainer.schema.json and
// DIR/docs/config-reference.md, both generated from the registries.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "runner/commands/config_commands.h"
#include "runner/config/json_schema.h"
#include "runner/config/reference.h"
#include "runner/usage_error.h"

namespace trainer {
namespace {

// Writes `text` to `path`, creating its folder; false (and a message naming
// the path and the reason) when that fails.
bool write_file(const std::filesystem::path& path, const std::string& text) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) {
    std::fprintf(stderr, "error: schema --out: cannot create the folder '%s': %s\n",
                 path.parent_path().string().c_str(), ec.message().c_str());
    return false;
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    std::fprintf(stderr, "error: schema --out: cannot write '%s': %s\n", path.string().c_str(),
                 std::strerror(errno));
    return false;
  }
  std::printf("wrote %s\n", path.string().c_str());
  return true;
}

}  // namespace

int command_schema(const std::string& out_dir) {
  // A --out folder that cannot be written: a usage error.
  const std::filesystem::path dir = out_dir.empty() ? "." : out_dir;
  if (!write_file(dir / "schemas" / "trainer.schema.json", config::config_json_schema_text()))
    return kUsageError;
  if (!write_file(dir / "docs" / "config-reference.md", config::config_reference_markdown()))
    return kUsageError;
  return 0;
}

}  // namespace trainer
