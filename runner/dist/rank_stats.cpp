// The straggler check.
#include "runner/dist/rank_stats.h"

#include <algorithm>

#include <fmt/format.h>

namespace trainer::dist {

std::optional<Straggler> find_straggler(const std::vector<RankWindow>& ranks, double threshold,
                                        double min_gap_ms) {
  if (ranks.size() < 2) return std::nullopt;
  std::vector<double> busy;
  for (const auto& r : ranks) busy.push_back(r.busy_ms_per_step());
  std::vector<double> sorted = busy;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  const double median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  // With two ranks the median is their mean: compare the slower with the faster one.
  const double reference = n == 2 ? sorted[0] : median;
  const auto slowest = std::max_element(busy.begin(), busy.end());
  const double gap = *slowest - reference;
  if (gap < min_gap_ms || gap <= threshold * reference) return std::nullopt;
  Straggler s;
  s.rank = static_cast<int>(slowest - busy.begin());
  s.busy_ms = *slowest;
  s.median_busy_ms = reference;
  s.data_ms = ranks[static_cast<std::size_t>(s.rank)].data_ms_per_step();
  return s;
}

std::string describe(const Straggler& s) {
  const double pct = s.median_busy_ms > 0 ? 100.0 * (s.busy_ms / s.median_busy_ms - 1.0) : 0.0;
  std::string text = fmt::format(
      "straggler: rank {} needs {:.1f} ms per step before the gradient all-reduce, {:.0f}% more "
      "than the "
      "other ranks ({:.1f} ms); they wait for it",
      s.rank, s.busy_ms, pct, s.median_busy_ms);
  if (s.data_ms > 0.5 * (s.busy_ms - s.median_busy_ms))
    text += fmt::format(
        ". It waits {:.1f} ms per step for data: raise data.workers or check its node's disk/CPU",
        s.data_ms);
  else
    text += ". Check its node for other load (CPU threads, thermal throttling, a slower device)";
  return text;
}

}  // namespace trainer::dist
