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
    const auto gpus = static_cast<int>(c.devices.gpus.size());
    if (gpus != place.world)
      diags.add(train::mark_of(c, "devices"), "devices.gpus",
                "devices lists " + std::to_string(gpus) + " GPUs but the launcher started " +
                    std::to_string(place.world) + " ranks (one rank per listed GPU)",
                "start one rank per GPU in devices.gpus");
    else  // select_backend uses the first GPU of the list: this rank's
      std::rotate(c.devices.gpus.begin(), c.devices.gpus.begin() + (place.local_rank % gpus),
                  c.devices.gpus.end());
  }
  diags.throw_if_any();
  const double factor = lr_scale_factor(c.optimizer.lr_scaling, place.world);
  c.optimizer.lr *= factor;
  c.schedule.max_lr *= factor;  // onecycle peak (0 stays "use optimizer.lr")
  return c;
}

}  // namespace trainer::dist
