// How fast the configured training loader delivers batches on its own, with
// nothing consuming them: what `trainer time` sets against the step's rate,
// so that a starved loader shows before a run, not an hour into it.
#pragma once

#include <cstdint>

#include "ops/kernel.h"
#include "runner/train/session.h"

namespace trainer::train {

struct LoaderRate {
  double samples_per_s = 0;  // delivered after the first batch, wall time
  std::int64_t batches = 0;  // delivered in all, the first included
  double seconds = 0;        // from the loader's start to its last batch
  std::int64_t slots = 0;    // its ring: the batches built at once
};

// Takes the session's training batches (shuffled, its data.workers and
// data.prefetch, epoch after epoch) as fast as they come: at least twice the
// ring and a second's worth, at most `max_seconds` (and at least two
// batches). Throws the loader's error for a sample that cannot be read.
LoaderRate measure_loader_rate(const Session& session, Backend& backend, double max_seconds);

}  // namespace trainer::train
