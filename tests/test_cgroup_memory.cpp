// labels: cpu
// links: trainer_ops
// The room a process's cgroups leave it, read from a fake /proc/self and
// cgroup tree: cgroup v1's memory controller (a hybrid host like this one),
// v2 nested under a limited parent, a container's namespaced v2 root, and no
// limit at all.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "ops/cpu/cgroup_memory.h"

namespace fs = std::filesystem;
using trainer::cgroup_memory_room;

namespace {

constexpr std::size_t kMiB = 1024 * 1024;

// A fresh fake root: proc/self/cgroup and proc/self/mountinfo hold `cgroup`
// and `mountinfo`.
fs::path fake_root(const std::string& name, const std::string& cgroup,
                   const std::string& mountinfo) {
  const fs::path root = fs::temp_directory_path() / "trainer_test_cgroup_memory" / name;
  fs::remove_all(root);
  fs::create_directories(root / "proc/self");
  std::ofstream(root / "proc/self/cgroup") << cgroup;
  std::ofstream(root / "proc/self/mountinfo") << mountinfo;
  return root;
}

void write(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text << "\n";
}

const char* kHybridMounts =
    "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

}  // namespace

TEST_CASE("cgroup v1: the memory controller's limit less its usage") {
  const fs::path root =
      fake_root("v1", "5:devices:/\n4:memory:/process_api/job7\n1:cpu:/\n0::/\n", kHybridMounts);
  const fs::path job = root / "sys/fs/cgroup/memory/process_api/job7";
  write(job / "memory.limit_in_bytes", std::to_string(400 * kMiB));
  write(job / "memory.usage_in_bytes", std::to_string(100 * kMiB));
  // The root of the hierarchy: unlimited (v1 writes a huge number).
  write(root / "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712");
  write(root / "sys/fs/cgroup/memory/memory.usage_in_bytes", std::to_string(9000 * kMiB));
  // v2's root on a hybrid host has no memory files: nothing to read there.
  CHECK(cgroup_memory_room(root) == 300 * kMiB);
  // A parent with less room left holds the job too.
  write(root / "sys/fs/cgroup/memory/process_api/memory.limit_in_bytes",
        std::to_string(1000 * kMiB));
  write(root / "sys/fs/cgroup/memory/process_api/memory.usage_in_bytes",
        std::to_string(900 * kMiB));
  CHECK(cgroup_memory_room(root) == 100 * kMiB);
  // Page cache not used lately counts as room (hierarchical total_ key in v1).
  write(root / "sys/fs/cgroup/memory/process_api/memory.stat",
        "cache 500\ninactive_file 1\ntotal_inactive_file " + std::to_string(300 * kMiB));
  CHECK(cgroup_memory_room(root) == 300 * kMiB);  // the job's own room is the least now
  write(job / "memory.stat", "total_inactive_file " + std::to_string(500 * kMiB));
  CHECK(cgroup_memory_room(root) == 400 * kMiB);  // more cache than usage: the whole limit
}

TEST_CASE("cgroup v2: a nested cgroup is held by its parents' memory.max") {
  const fs::path root = fake_root(
      "v2_nested", "0::/user.slice/job/inner\n",
      "25 1 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw\n");
  const fs::path top = root / "sys/fs/cgroup";
  write(top / "user.slice/memory.max", "max");
  write(top / "user.slice/memory.current", std::to_string(5000 * kMiB));
  write(top / "user.slice/job/memory.max", std::to_string(1024 * kMiB));
  write(top / "user.slice/job/memory.current", std::to_string(200 * kMiB));
  write(top / "user.slice/job/inner/memory.max", "max");
  write(top / "user.slice/job/inner/memory.current", std::to_string(150 * kMiB));
  CHECK(cgroup_memory_room(root) == 824 * kMiB);
  // Its own limit, when it leaves less.
  write(top / "user.slice/job/inner/memory.max", std::to_string(250 * kMiB));
  CHECK(cgroup_memory_room(root) == 100 * kMiB);
  // Usage over the limit leaves nothing.
  write(top / "user.slice/job/inner/memory.current", std::to_string(300 * kMiB));
  CHECK(cgroup_memory_room(root) == 0);
  // Of 150 MiB in use, 60 are page cache not used lately: room too.
  write(top / "user.slice/job/inner/memory.current", std::to_string(150 * kMiB));
  write(top / "user.slice/job/inner/memory.stat",
        "anon 94371840\nfile 62914560\ninactive_file " + std::to_string(60 * kMiB));
  CHECK(cgroup_memory_room(root) == 160 * kMiB);
}

TEST_CASE("cgroup v2 in a container: its cgroup is the mount's root") {
  // A cgroup namespace: /proc/self/cgroup says "/", the mount's root is the
  // host's path of the container's cgroup.
  const fs::path root = fake_root(
      "v2_container", "0::/\n",
      "1021 1012 0:26 /system.slice/docker-1.scope /sys/fs/cgroup ro - cgroup2 cgroup rw\n");
  write(root / "sys/fs/cgroup/memory.max", std::to_string(512 * kMiB));
  write(root / "sys/fs/cgroup/memory.current", std::to_string(12 * kMiB));
  CHECK(cgroup_memory_room(root) == 500 * kMiB);
}

TEST_CASE("a mount point with a space, escaped in mountinfo") {
  const fs::path root =
      fake_root("escaped", "0::/a\n", "25 1 0:22 / /my\\040cgroups rw - cgroup2 cgroup2 rw\n");
  write(root / "my cgroups/a/memory.max", std::to_string(64 * kMiB));
  write(root / "my cgroups/a/memory.current", std::to_string(0));
  CHECK(cgroup_memory_room(root) == 64 * kMiB);
}

TEST_CASE("no limit: nothing to report") {
  const fs::path root = fake_root(
      "unlimited", "0::/user.slice\n",
      "25 1 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw\n");
  write(root / "sys/fs/cgroup/user.slice/memory.max", "max");
  write(root / "sys/fs/cgroup/user.slice/memory.current", std::to_string(10 * kMiB));
  CHECK_FALSE(cgroup_memory_room(root).has_value());
  const fs::path empty = fake_root("no_files", "", "");
  CHECK_FALSE(cgroup_memory_room(empty).has_value());
}
