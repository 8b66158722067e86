// The config one rank trains with: the launcher's world size (in
// `devices.world_size`, CPU or GPU ranks), the learning rates scaled as
// `optimizer.lr_scaling` asks (the base rate and the schedule's), CPU threads
// split between the ranks of a node, and this rank's GPU first in
// `devices.gpus` (the list names one node's GPUs: all the job's, or, on
// several nodes, those of each node). A rank that sees a single GPU while the
// list names several was bound to it by its launcher (srun
// --gpus-per-task=1: CUDA_VISIBLE_DEVICES per task): it uses that one, CUDA
// index 0, and `devices.gpus` becomes [0].
#pragma once

#include <string>

#include "runner/config/config.h"

namespace trainer::dist {

// lr multiplier for `optimizer.lr_scaling` (none | linear | sqrt) over `world` ranks.
double lr_scale_factor(const std::string& scaling, int world);

struct RankPlace {
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  int local_world = 1;    // ranks on this node
  int visible_gpus = -1;  // GPUs this process sees (-1: not asked)
};

// Whether the launcher bound one GPU to this rank (see above).
bool launcher_bound_gpu(const config::Config& config, const RankPlace& place);

// Throws config::ConfigError (naming the key) when the config's devices do not
// match the job (`devices.world_size: 4` under `mpirun -np 2`).
config::Config rank_config(config::Config config, const RankPlace& place);

// The overrides with which a resume under `rank` (a rank's config) goes on at
// the rates of a run whose base rate was `run_base_lr`: the base rate, and,
// where optimizer.lr_scaling scaled them, the schedule's rates with it.
std::string overrides_keeping_rates(const config::Config& rank, double run_base_lr);

}  // namespace trainer::dist
