// The learning-rate range test's reading (lr_range.h). The smoothing and the
// divergence rule are the ones the range test is usually read with: a moving
// average of the loss with factor 0.98, corrected for its start at zero, and
// divergence once it exceeds 4 x its lowest value. The suggestion is the
// steepest fall of the smoothed loss against log(lr), by central differences,
// before the lowest smoothed loss.
#include "runner/train/lr_range.h"

#include <cmath>

#include <fmt/format.h>

namespace trainer::train {

RangeTestReading read_range_test(const std::vector<RangeTestPoint>& points) {
  constexpr double kBeta = 0.98, kDivergence = 4.0;
  RangeTestReading r;
  double average = 0, weight = 1;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const RangeTestPoint& p = points[i];
    if (!std::isfinite(p.loss)) {
      r.diverged_at = i;
      r.non_finite = true;
      break;
    }
    if (!r.points.empty() && !(p.lr > r.points.back().lr)) continue;
    average = kBeta * average + (1 - kBeta) * p.loss;
    weight *= kBeta;
    const double smoothed = average / (1 - weight);
    if (!r.smoothed.empty() && smoothed > kDivergence * r.smoothed[*r.lowest]) {
      r.diverged_at = i;
      break;
    }
    r.points.push_back(p);
    r.smoothed.push_back(smoothed);
    const std::size_t at = r.points.size() - 1;
    if (!r.lowest || smoothed < r.smoothed[*r.lowest]) r.lowest = at;
  }
  const std::size_t n = r.points.size();
  if (n < kMinSuggestionPoints) return r;
  // On the way down to the lowest loss: past it, a loss that rose and falls
  // again (batchnorm can pull a diverging network back) is no rate to train at.
  std::optional<double> steepest;
  for (std::size_t i = std::max<std::size_t>(1, n / 10); i + 1 < n && i < *r.lowest; ++i) {
    const double run = std::log(r.points[i + 1].lr) - std::log(r.points[i - 1].lr);
    if (!(run > 0)) continue;
    const double slope = (r.smoothed[i + 1] - r.smoothed[i - 1]) / run;
    if (slope < 0 && (!steepest || slope < *steepest)) {
      steepest = slope;
      r.suggested = i;
    }
  }
  return r;
}

std::string why_no_suggestion(const RangeTestReading& r) {
  if (r.suggested) return "";
  const std::size_t n = r.points.size();
  if (n < kMinSuggestionPoints && r.diverged_at)
    return fmt::format(
        "only {} step{} before the range diverged (after rate {:.3g}): its rates are too high from "
        "the start; lower --min-lr",
        n, n == 1 ? "" : "s", r.points.empty() ? 0.0 : r.points.back().lr);
  if (n < kMinSuggestionPoints)
    return fmt::format("only {} step{} to read; raise --steps", n, n == 1 ? "" : "s");
  if (r.lowest && *r.lowest == 0)
    return "the smoothed loss never fell; lower --min-lr, raise --steps, or check the model and "
           "data";
  // It fell, but only at the start: no stretch of falling loss to read a slope on.
  if (r.lowest)
    return fmt::format(
        "the smoothed loss was lowest at step {} of {} (rate {:.3g}), too early in the range to "
        "find where it falls fastest; lower --min-lr so the range starts further below that "
        "rate, or raise --steps",
        *r.lowest + 1, r.points.size(), r.points[*r.lowest].lr);
  return "the smoothed loss never fell; lower --min-lr, raise --steps, or check the model and "
         "data";
}

}  // namespace trainer::train
