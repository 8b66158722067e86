// Rank detection from the launcher's environment variables.
#include "runner/dist/launch_env.h"

#include <cstdlib>
#include <stdexcept>

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
  const char* local_rank;  // may be absent
  const char* required;    // must also be set (nullptr: none)
};

// OpenMPI's own variables first; then PMI (MPICH, Intel MPI); then srun. Inside
// an sbatch script SLURM_PROCID is set without srun: only a step (srun) counts.
constexpr Names kLaunchers[] = {
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     nullptr},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", nullptr},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_STEP_ID"},
};

}  // namespace

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
    return env;
  }
  return std::nullopt;
}

}  // namespace trainer::dist
