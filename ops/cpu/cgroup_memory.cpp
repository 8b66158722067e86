// Room left under the process's cgroup memory limits, v1 and v2.
#include "ops/cpu/cgroup_memory.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace trainer {
namespace {

namespace fs = std::filesystem;

// A line of /proc/self/cgroup: "4:memory:/a/b" (v1) or "0::/a/b" (v2).
struct CgroupLine {
  std::string hierarchy, controllers, path;
};

std::vector<CgroupLine> read_cgroup_lines(const fs::path& file) {
  std::vector<CgroupLine> lines;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    const auto first = line.find(':');
    const auto second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    lines.push_back({line.substr(0, first), line.substr(first + 1, second - first - 1),
                     line.substr(second + 1)});
  }
  return lines;
}

// A mount of /proc/self/mountinfo: its root within the file system, where it
// is mounted, its type and its super options ("rw,memory").
struct Mount {
  std::string root, point, type, options;
};

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 3 < text.size() &&
        std::all_of(text.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                    text.begin() + static_cast<std::ptrdiff_t>(i) + 4,
                    [](char c) { return c >= '0' && c <= '7'; })) {
      out += static_cast<char>(std::stoi(text.substr(i + 1, 3), nullptr, 8));
      i += 3;
      continue;
    }
    out += text[i];
  }
  return out;
}

std::vector<Mount> read_cgroup_mounts(const fs::path& file) {
  std::vector<Mount> mounts;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    // id parent major:minor root point options [optional...] - type source super-options
    std::istringstream fields(line);
    std::string id, parent, device, root, point, options, field;
    if (!(fields >> id >> parent >> device >> root >> point >> options)) continue;
    while (fields >> field && field != "-") {
    }
    std::string type, source, super_options;
    if (!(fields >> type >> source >> super_options)) continue;
    if (type == "cgroup" || type == "cgroup2")
      mounts.push_back({unescape(root), unescape(point), type, super_options});
  }
  return mounts;
}

bool lists(const std::string& comma_separated, const std::string& item) {
  std::istringstream items(comma_separated);
  std::string each;
  while (std::getline(items, each, ','))
    if (each == item) return true;
  return false;
}

// The first number in a file; nullopt for "max" or an unreadable file.
std::optional<std::uint64_t> read_number(const fs::path& file) {
  std::ifstream in(file);
  std::uint64_t value = 0;
  if (!(in >> value)) return std::nullopt;
  return value;
}

// The value of `key` in a memory.stat file ("key value" lines); 0 when absent.
std::uint64_t stat_value(const fs::path& file, const std::string& key) {
  std::ifstream in(file);
  std::string name;
  std::uint64_t value = 0;
  while (in >> name >> value)
    if (name == key) return value;
  return 0;
}

// The files of a memory controller: its limit, its usage, and the memory.stat
// key of the page cache not used lately (the kernel reclaims it before it
// enforces the limit, so it is room too; container runtimes count the same).
struct MemoryFiles {
  const char* limit;
  const char* usage;
  const char* inactive_file;
};
constexpr MemoryFiles kCgroupV2{"memory.max", "memory.current", "inactive_file"};
constexpr MemoryFiles kCgroupV1{"memory.limit_in_bytes", "memory.usage_in_bytes",
                                "total_inactive_file"};

// The least of limit - (usage - inactive page cache) over the cgroup `path`
// of `mount` and its ancestors up to the mount's root.
std::optional<std::size_t> room_under(const fs::path& root, const Mount& mount,
                                      const std::string& path, const MemoryFiles& files) {
  // The cgroup's path relative to the mount's root (a container sees its own
  // cgroup as the root of a mount); a path outside that root: the mount's root.
  const bool inside = path.starts_with(mount.root) &&
                      (mount.root.ends_with('/') || path.size() == mount.root.size() ||
                       path[mount.root.size()] == '/');
  const std::string relative = inside ? path.substr(mount.root.size()) : "";
  // The cgroup's folder and each of its ancestors up to the mount's root.
  std::vector<fs::path> dirs = {root / fs::path(mount.point).relative_path()};
  for (const auto& part : fs::path(relative).relative_path())
    if (part != "." && part != ".." && !part.empty()) dirs.push_back(dirs.back() / part);
  std::optional<std::size_t> least;
  for (const fs::path& dir : dirs) {
    const auto limit = read_number(dir / files.limit);
    auto usage = read_number(dir / files.usage);
    if (!limit || !usage) continue;
    const std::uint64_t cache = stat_value(dir / "memory.stat", files.inactive_file);
    *usage -= std::min(*usage, cache);
    const std::size_t room = *limit > *usage ? static_cast<std::size_t>(*limit - *usage) : 0;
    least = least ? std::min(*least, room) : room;
  }
  return least;
}

}  // namespace

std::optional<std::size_t> cgroup_memory_room(const fs::path& root) {
  const auto lines = read_cgroup_lines(root / "proc/self/cgroup");
  const auto mounts = read_cgroup_mounts(root / "proc/self/mountinfo");
  std::optional<std::size_t> least;
  const auto consider = [&](std::optional<std::size_t> room) {
    if (room) least = least ? std::min(*least, *room) : *room;
  };
  for (const CgroupLine& line : lines) {
    const bool v2 = line.hierarchy == "0" && line.controllers.empty();
    for (const Mount& mount : mounts) {
      if (v2 && mount.type == "cgroup2")
        consider(room_under(root, mount, line.path, kCgroupV2));
      else if (!v2 && mount.type == "cgroup" && lists(line.controllers, "memory") &&
               lists(mount.options, "memory"))
        consider(room_under(root, mount, line.path, kCgroupV1));
    }
  }
  return least;
}

}  // namespace trainer
