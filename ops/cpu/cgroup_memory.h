// The memory this process's control groups still let it use, as the kernel
// enforces it: the process's own cgroup is found in /proc/self/cgroup and the
// cgroup file systems in /proc/self/mountinfo. Honoured:
//  - cgroup v2: memory.max - memory.current of the process's cgroup and of
//    every ancestor up to the mount's root (the least of them: a nested
//    cgroup is held by its parents' limits too);
//  - cgroup v1: memory.limit_in_bytes - memory.usage_in_bytes of the memory
//    controller's cgroup and of its ancestors up to that mount's root.
// Both count the page cache as used; the part not used lately (memory.stat's
// inactive_file, v1's total_inactive_file) is taken off the usage, since the
// kernel reclaims it before it enforces a limit (a job that has read its data
// files has them in the cache).
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>

namespace trainer {

// The least room left under any limit found; nullopt when no cgroup limits
// this process (or none is readable). `root` is prefixed to every path read:
// "/" on a live system, a folder holding proc/self/... and the cgroup files in
// tests.
std::optional<std::size_t> cgroup_memory_room(const std::filesystem::path& root = "/");

}  // namespace trainer
