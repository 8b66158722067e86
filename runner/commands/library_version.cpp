// check_library_version: compiled against loaded, as "major.minor.patch".
#include "runner/commands/library_version.h"

#include <array>
#include <cstdio>
#include <optional>

namespace trainer {
namespace {

std::optional<std::array<int, 3>> parse_version(const std::string& text) {
  std::array<int, 3> v{};
  int used = 0;
  if (std::sscanf(text.c_str(), "%d.%d.%d%n", &v[0], &v[1], &v[2], &used) != 3 ||
      used != static_cast<int>(text.size()))
    return std::nullopt;
  if (v == std::array<int, 3>{0, 0, 0}) return std::nullopt;  // not reported
  return v;
}

}  // namespace

LibraryVersionCheck check_library_version(const std::string& name, const std::string& compiled,
                                          const std::string& loaded) {
  const auto built = parse_version(compiled), found = parse_version(loaded);
  if (!built || !found) return {};
  if ((*found)[0] != (*built)[0])
    return {true, "the loaded " + name + " " + loaded + " is another major version than the " +
                      compiled + " this build was compiled against: put " + name + " " +
                      std::to_string((*built)[0]) + ".x on the library path (LD_LIBRARY_PATH)"};
  if (*found < *built)
    return {false, "older than compiled: not guaranteed to work; use " + name + " " + compiled +
                       " or newer if a GPU kernel fails"};
  return {};
}

}  // namespace trainer
