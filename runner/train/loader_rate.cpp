// The training loader timed alone, and the data wait a run would see.
#include "runner/train/loader_rate.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "data/loader.h"
#include "runner/train/trainer.h"

namespace trainer::train {

LoaderRate measure_loader_rate(const Session& session, Backend& backend, double max_seconds) {
  using Clock = std::chrono::steady_clock;
  data::Loader loader(session.train_data, session.train_pipeline,
                      loader_options(session, true, backend));
  LoaderRate rate;
  rate.slots = loader.ring_size();
  const std::int64_t enough_batches = std::max<std::int64_t>(2, 2 * rate.slots);
  const auto start = Clock::now();
  Clock::time_point first;
  std::int64_t rows_after_first = 0;
  std::int64_t epoch = 0, in_epoch = 0;
  loader.start_epoch(epoch);
  for (;;) {
    const data::Batch* batch = loader.next();
    if (!batch) {
      if (in_epoch == 0) throw std::logic_error("the loader's epoch holds no batch");
      loader.start_epoch(++epoch);
      in_epoch = 0;
      continue;
    }
    ++in_epoch;
    const auto now = Clock::now();
    if (rate.batches++ == 0)
      first = now;
    else
      rows_after_first += batch->rows;
    const double seconds = std::chrono::duration<double>(now - start).count();
    if (rate.batches >= 2 &&
        ((rate.batches >= enough_batches && seconds >= 1.0) || seconds >= max_seconds)) {
      rate.seconds = seconds;
      const double timed = std::chrono::duration<double>(now - first).count();
      rate.samples_per_s = timed > 0 ? static_cast<double>(rows_after_first) / timed : 0;
      return rate;
    }
  }
}

}  // namespace trainer::train
