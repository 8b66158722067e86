// Rank detection: whether this process is one rank of a job started by a
// launcher (mpirun / OpenMPI, a PMI launcher such as MPICH's or Intel's,
// Slurm's srun), and its rank, world size and rank on its node.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace trainer::dist {

struct LaunchEnv {
  std::string launcher;  // "openmpi", "pmi" or "slurm"
  int rank = 0;
  int world = 1;
  int local_rank = 0;              // rank among the ranks on this node (GPU choice)
  int local_world = 1;             // ranks on this node (threads per rank, GPU lists per node)
  bool local_world_known = false;  // the launcher said (else local_world is the whole job)
};

// The tasks srun starts on node `node` from its tasks-per-node list
// ("8(x2)", "2(x3),1"); 0 when the list cannot be read or has no such node.
// A list whose nodes all get the same count gives that count for any node.
int slurm_tasks_on_node(const std::string& tasks_per_node, int node);

// Reads the launcher's variables through `get` (std::getenv by default).
// Returns nothing when no launcher started this process. Throws
// std::runtime_error naming the variable when its value is not a valid rank.
std::optional<LaunchEnv> detect_launch_env(
    const std::function<const char*(const char*)>& get = nullptr);

// "[rank N] " in one rank of a job of several, else "": what starts each
// line this process writes about itself, so the job's console output says
// which rank wrote it (as its log lines do).
std::string rank_mark();

}  // namespace trainer::dist
