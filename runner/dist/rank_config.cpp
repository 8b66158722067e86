// Per-rank config adjustments.
#include "runner/dist/rank_config.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "ops/cpu/onednn.h"
#include "runner/config/diagnostics.h"
#include "runner/train/session.h"

namespace trainer::dist {

double lr_scale_factor(const std::string& scaling, int world) {
  if (scaling == "linear") return static_cast<double>(world);
  if (scaling == "sqrt") return std::sqrt(static_cast<double>(world));
  return 1.0;
}

bool launcher_bound_gpu(const config::Config& c, const RankPlace& place) {
  return !c.devices.cpu && c.devices.gpus.size() > 1 && place.world > 1 && place.visible_gpus == 1;
}

config::Config rank_config(config::Config c, const RankPlace& place) {
  config::Diagnostics diags;
  if (c.devices.on_cpu()) {
    if (c.devices.world_size > 1 && c.devices.world_size != place.world)
      diags.add(train::mark_of(c, "devices.world_size"), "devices.world_size",
                "devices.world_size is " + std::to_string(c.devices.world_size) +
                    " but the launcher started " + std::to_string(place.world) + " ranks",
                "set devices.world_size: " + std::to_string(place.world) +
                    " (or leave it at 1 when mpirun/srun chooses the rank count)");
    c.devices.world_size = place.world;
    if (c.backend.threads == 0)  // OMP_NUM_THREADS per rank, or the node's CPUs shared
      c.backend.threads = cpu::omp_num_threads().value_or(
          std::max(1, cpu::usable_cpus() / std::max(1, place.local_world)));
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
      if (launcher_bound_gpu(c, place)) c.devices.gpus = {0};
      // The batch plan splits the batch over devices.world_size (the job's
      // ranks, on every node), never over fewer listed GPUs.
      c.devices.world_size = place.world;
    }
  }
  diags.throw_if_any();
  const double factor = lr_scale_factor(c.optimizer.lr_scaling, place.world);
  // The whole schedule scales, as model.lr_scale scales a group's: its base
  // rate, the floor of cosine and linear, the peak of onecycle and the end of
  // range_test (0 stays "use optimizer.lr").
  c.optimizer.lr *= factor;
  c.schedule.min_lr *= factor;
  c.schedule.max_lr *= factor;
  return c;
}

std::string overrides_keeping_rates(const config::Config& rank, double run_base_lr) {
  std::string out = fmt::format("optimizer.lr={}", run_base_lr);
  if (rank.optimizer.lr_scaling == "none") return out;
  const double ratio = run_base_lr / rank.optimizer.lr;
  if (rank.schedule.min_lr > 0)
    out += fmt::format(" schedule.min_lr={:.12g}", rank.schedule.min_lr * ratio);
  if (rank.schedule.max_lr > 0)
    out += fmt::format(" schedule.max_lr={:.12g}", rank.schedule.max_lr * ratio);
  return out + " optimizer.lr_scaling=none";
}

}  // namespace trainer::dist
