// Per-rank load balance: what each rank did between two log points (time
// computing before the gradient all-reduce, time waiting in it, time waiting
// for data), and the straggler check over every rank's window.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trainer::dist {

struct RankWindow {
  double busy_s = 0;       // from the end of one gradient all-reduce to the start of the next
  double comm_wait_s = 0;  // inside the gradient all-reduce (waiting for the others)
  double data_wait_s = 0;  // waiting for the loader (part of busy_s)
  std::int64_t steps = 0;

  double busy_ms_per_step() const {
    return steps > 0 ? 1000.0 * busy_s / static_cast<double>(steps) : 0;
  }
  double comm_ms_per_step() const {
    return steps > 0 ? 1000.0 * comm_wait_s / static_cast<double>(steps) : 0;
  }
  double data_ms_per_step() const {
    return steps > 0 ? 1000.0 * data_wait_s / static_cast<double>(steps) : 0;
  }
};

struct Straggler {
  int rank = -1;
  double busy_ms = 0;         // its busy time per step
  double median_busy_ms = 0;  // the ranks' median
  double data_ms = 0;         // its data-wait per step
};

// The slowest rank when its busy time per step exceeds the median by more
// than `threshold` (0.2: 20%) and by at least `min_gap_ms`; nothing otherwise.
std::optional<Straggler> find_straggler(const std::vector<RankWindow>& ranks,
                                        double threshold = 0.2, double min_gap_ms = 1.0);

// "straggler: rank 1 computes 15.2 ms per step, 35% more than the median ..."
std::string describe(const Straggler& s);

}  // namespace trainer::dist
