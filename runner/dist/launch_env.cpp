// Rank detection from the launcher's environment variables.
#include "runner/dist/launch_env.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace trainer::dist {
namespace {

int parse_count(const char* name, const char* text, int minimum) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < minimum || v > (1 << 24))
    throw std::runtime_error(std::string("the launcher set ") + name + "=\"" + text +
                             "\", which is not a valid rank or rank count");
  return static_cast<int>(v);
}

struct Names {
  const char* launcher;
  const char* rank;
  const char* world;
  const char* local_rank;   // may be absent
  const char* local_world;  // may be absent
  const char* required;     // must also be set (nullptr: none)
};

// OpenMPI's own variables first; then PMI (MPICH, Intel MPI); then srun. Inside
// an sbatch script SLURM_PROCID is set without srun: only a step (srun) counts.
constexpr Names kLaunchers[] = {
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", nullptr},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", nullptr},
    // srun's per-node counts are a list (SLURM_STEP_TASKS_PER_NODE), read below.
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr, "SLURM_STEP_ID"},
};

}  // namespace

int slurm_tasks_on_node(const std::string& tasks_per_node, int node) {
  std::vector<int> counts;
  std::stringstream entries(tasks_per_node);
  for (std::string entry; std::getline(entries, entry, ',');) {
    char* end = nullptr;
    const long count = std::strtol(entry.c_str(), &end, 10);
    if (end == entry.c_str() || count < 1 || count > (1 << 24)) return 0;
    long repeat = 1;
    if (*end == '(') {  // "N(xM)": M nodes with N tasks each
      if (end[1] != 'x') return 0;
      char* close = nullptr;
      repeat = std::strtol(end + 2, &close, 10);
      if (close == end + 2 || *close != ')' || close[1] != '\0' || repeat < 1 || repeat > (1 << 24))
        return 0;
    } else if (*end != '\0') {
      return 0;
    }
    if (counts.size() + static_cast<std::size_t>(repeat) > (1u << 24)) return 0;
    counts.insert(counts.end(), static_cast<std::size_t>(repeat), static_cast<int>(count));
  }
  if (counts.empty()) return 0;
  if (std::all_of(counts.begin(), counts.end(), [&](int c) { return c == counts.front(); }))
    return counts.front();
  return node >= 0 && node < static_cast<int>(counts.size())
             ? counts[static_cast<std::size_t>(node)]
             : 0;
}

std::optional<LaunchEnv> detect_launch_env(const std::function<const char*(const char*)>& get_env) {
  const auto get = [&](const char* name) -> const char* {
    return get_env ? get_env(name) : std::getenv(name);
  };
  for (const Names& n : kLaunchers) {
    const char* rank = get(n.rank);
    const char* world = get(n.world);
    if (!rank || !world) continue;
    if (n.required && !get(n.required)) continue;
    LaunchEnv env;
    env.launcher = n.launcher;
    env.world = parse_count(n.world, world, 1);
    env.rank = parse_count(n.rank, rank, 0);
    if (env.rank >= env.world)
      throw std::runtime_error(std::string("the launcher set ") + n.rank + "=" + rank + " but " +
                               n.world + "=" + world + ": the rank must be below the world size");
    const char* local = get(n.local_rank);
    env.local_rank = local ? parse_count(n.local_rank, local, 0) : env.rank;
    // Ranks on this node; when the launcher does not say, the whole job.
    env.local_world = env.world;
    if (const char* local_world = n.local_world ? get(n.local_world) : nullptr) {
      env.local_world = parse_count(n.local_world, local_world, 1);
      env.local_world_known = true;
    } else if (const char* per_node = get("SLURM_STEP_TASKS_PER_NODE");
               per_node && env.launcher == "slurm") {
      const char* node = get("SLURM_NODEID");
      const int count = slurm_tasks_on_node(per_node, node ? std::atoi(node) : -1);
      if (count > 0) {
        env.local_world = count;
        env.local_world_known = true;
      }
    }
    return env;
  }
  return std::nullopt;
}

std::string rank_mark() {
  try {
    if (const auto env = detect_launch_env(); env && env->world > 1)
      return "[rank " + std::to_string(env->rank) + "] ";
  } catch (const std::exception&) {  // a bad launcher variable: reported where it matters
  }
  return "";
}

}  // namespace trainer::dist
