// What to tell the user when the training step waits for data: which knob
// to turn depends on whether the loader is too slow, or fast enough but
// sharing the cores with the compute threads, or fast but bursty.
#pragma once

#include <cstdint>
#include <string>

namespace trainer::train {

struct InputWait {
  double wait_pct = 0;               // share of the window the step waited for a batch
  double loader_samples_per_s = 0;   // what the workers can fill, busy time only
  double model_samples_per_s = 0;    // what the step consumes, waiting excluded
  std::int64_t workers = 0;          // data.workers
  std::int64_t prefetch = 0;         // data.prefetch
  std::int64_t slots = 0;            // the loader's ring: prefetch + 1, or an epoch's batches
  std::int64_t compute_threads = 0;  // CPU threads the step computes on (1 on a GPU)
  std::int64_t cores = 0;            // the CPUs this process may use, its share under ranks
  // wait_pct is a prediction from the loader and the step timed apart
  // (`trainer time`), not a run's measurement.
  bool predicted = false;
};

// One warning line, starting "input-bound:" (or "data wait" when the loader
// is not the limit), ending with the setting to change.
std::string input_wait_advice(const InputWait& w);

// The share of a run's time its step would wait for data, in percent, from
// the loader's rate and the step's: batches built meanwhile by workers, or,
// without workers (`workers_build_ahead` false), between the steps.
double predicted_wait_pct(double loader_samples_per_s, double model_samples_per_s,
                          bool workers_build_ahead);

}  // namespace trainer::train
