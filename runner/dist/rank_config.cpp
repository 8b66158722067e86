// Per-rank config adjustments.
#include "runner/dist/rank_config.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "runner/config/diagnostics.h"
#include "runner/train/session.h"

namespace trainer::dist {

double lr_scale_factor(const std::string& scaling, int world) {
  if (scaling == "linear") return static_cast<double>(world);
  if (scaling == "sqrt") return std::sqrt(static_cast<double>(world));
  return 1.0;
}

config::Config rank_config(config::Config c, const RankPlace& place) {
  config::Diagnostics diags;
  if (c.devices.cpu || c.devices.gpus.empty()) {
    if (c.devices.world_size > 1 && c.devices.world_size != place.world)
      diags.add(train::mark_of(c, "devices.world_size"), "devices.world_size",
                "devices.world_size is " + std::to_string(c.devices.world_size) +
                    " but the launcher started " + std::to_string(place.world) + " ranks",
                "set devices.world_size: " + std::to_string(place.world) +
                    " (or leave it at 1 when mpirun/srun chooses the rank count)");
    c.devices.world_size = place.world;
    if (c.backend.threads == 0) {
      const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
      c.backend.threads = std::max(1, cores / std::max(1, place.local_world));
    }
  } else {
    // One rank per listed GPU: on one node the list covers the job; on several
    // nodes (the same list on each) it covers the ranks of one node.
    const auto gpus = static_cast<int>(c.devices.gpus.size());
    const bool one_node = gpus == place.world;
    const bool every_node = place.world > place.local_world && gpus == place.local_world;
    if (!one_node && !every_node) {
      diags.add(train::mark_of(c, "devices"), "devices.gpus",
                "devices lists " + std::to_string(gpus) + " GPUs but the launcher started " +
                    std::to_string(place.world) + " ranks, " + std::to_string(place.local_world) +
                    " on this node (one rank per listed GPU)",
                "start one rank per GPU in devices.gpus (on every node)");
    } else {
      // select_backend uses the first GPU of the list: this rank's
      std::rotate(c.devices.gpus.begin(), c.devices.gpus.begin() + (place.local_rank % gpus),
                  c.devices.gpus.end());
      c.devices.world_size = place.world;
      // Never a silently wrong batch split: the batch plan must count every rank.
      config::Diagnostics plan;
      const auto planned = train::plan_batches(c, plan).world;
      if (planned != place.world)
        diags.add(train::mark_of(c, "devices"), "devices.gpus",
                  "the batch plan splits train.batch_size over " + std::to_string(planned) +
                      " ranks (the listed GPUs), but the job has " + std::to_string(place.world) +
                      " ranks on several nodes: multi-node GPU jobs are not supported by this "
                      "build yet",
                  "run on one node, with one rank per listed GPU");
    }
  }
  diags.throw_if_any();
  const double factor = lr_scale_factor(c.optimizer.lr_scaling, place.world);
  c.optimizer.lr *= factor;
  c.schedule.max_lr *= factor;  // onecycle peak (0 stays "use optimizer.lr")
  return c;
}

}  // namespace trainer::dist
