// The learning-rate range test's reading (`trainer lr-find`): the training
// loss of each step against that step's rate, rising exponentially, smoothed
// and cut where it diverges, and the rate to suggest.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace trainer::train {

struct RangeTestPoint {
  double lr = 0;
  double loss = 0;
};

struct RangeTestReading {
  std::vector<RangeTestPoint> points;  // up to where it diverged
  std::vector<double> smoothed;        // the losses' bias-corrected moving average (0.98)
  // Index into the points given where the loss went non-finite, or its
  // smoothed value passed 4 x the lowest: the range ends there (the point is
  // left out). `non_finite` says which.
  std::optional<std::size_t> diverged_at;
  bool non_finite = false;
  // Indices into `points` above: the lowest smoothed loss, and where the
  // smoothed loss falls fastest per log(lr).
  std::optional<std::size_t> lowest;
  std::optional<std::size_t> suggested;
};

// `points` in step order. A point whose rate does not rise above the last one
// read (a step fp16 loss scaling skipped holds the rate) is passed over. The
// suggestion lies before the lowest smoothed loss. None when the smoothed
// loss never falls there (past the first tenth of the points, which the
// moving average still settles in) or there are fewer than
// kMinSuggestionPoints points.
inline constexpr std::size_t kMinSuggestionPoints = 5;
RangeTestReading read_range_test(const std::vector<RangeTestPoint>& points);

// Why a reading has no suggestion, and what to change ("only 3 steps before
// the range diverged; ..."). Empty when it has one.
std::string why_no_suggestion(const RangeTestReading& reading);

}  // namespace trainer::train
