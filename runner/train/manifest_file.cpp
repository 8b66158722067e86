// manifest.json of a run directory: read (with what is wrong with a damaged
// one) and written whole, atomically.
#include "runner/train/manifest_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "data/file_kind.h"
#include "runner/checkpoint/durable_file.h"
#include "runner/json_text.h"

namespace trainer::train {
namespace fs = std::filesystem;
namespace {

// The deepest nesting read from manifest.json (the trainer writes 4 levels):
// deeper, writing or printing it would recurse that deep.
constexpr int kMaxManifestDepth = 64;

// Whether `j` nests deeper than `levels` levels.
bool nests_deeper(const nlohmann::json& j, int levels) {
  if (!j.is_structured()) return false;
  if (levels <= 0) return true;
  for (const auto& [key, value] : j.items())
    if (nests_deeper(value, levels - 1)) return true;
  return false;
}

}  // namespace

nlohmann::json parse_manifest(const fs::path& dir, std::string& problem) {
  const fs::path path = dir / "manifest.json";
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (status.type() == fs::file_type::not_found) return nlohmann::json::object();
  if (const std::string what = data::not_a_regular_file(path.string()); !what.empty()) {
    problem = "it is " + what + ", not a file";
    return nlohmann::json::object();
  }
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.is_open() || in.bad()) {
    problem = std::string("it cannot be read (") + std::strerror(errno ? errno : EIO) + ")";
    return nlohmann::json::object();
  }
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    problem = text.empty()           ? "it is empty"
              : e.byte > text.size() ? "it is not valid JSON: it ends early, after " +
                                           std::to_string(text.size()) + " bytes (truncated)"
                                     : "it is not valid JSON (at byte " + std::to_string(e.byte) +
                                           " of " + std::to_string(text.size()) + ")";
    return nlohmann::json::object();
  } catch (const nlohmann::json::exception& e) {  // a number beyond a double's range
    const std::string what = e.what();
    problem = "it holds what no JSON reader here can: " + what.substr(what.find("] ") + 2);
    return nlohmann::json::object();
  }
  if (!manifest.is_object()) {
    problem = "it holds " + std::string(manifest.type_name()) + ", not a JSON object";
    return nlohmann::json::object();
  }
  if (nests_deeper(manifest, kMaxManifestDepth)) {
    problem = "it nests deeper than " + std::to_string(kMaxManifestDepth) + " levels";
    return nlohmann::json::object();
  }
  return manifest;
}

nlohmann::json read_manifest(const fs::path& dir) {
  std::string problem;
  return parse_manifest(dir, problem);
}

void write_manifest(const fs::path& dir, const nlohmann::json& manifest) {
  checkpoint::write_file_atomically((dir / "manifest.json").string(),
                                    json_text(manifest, 2) + "\n");
}

}  // namespace trainer::train
