// labels: cpu
// The input-bound warning names the knob that helps: more workers when the
// loader is too slow, fewer threads when its workers share the cores with
// the compute threads, more prefetch when it is fast and has cores.
#include <catch2/catch.hpp>

#include "runner/train/input_advice.h"

using trainer::train::input_wait_advice;
using trainer::train::InputWait;

namespace {

InputWait waiting(double loader_rate, std::int64_t workers, std::int64_t threads,
                  std::int64_t cores, double wait_pct = 25) {
  InputWait w;
  w.wait_pct = wait_pct;
  w.loader_samples_per_s = loader_rate;
  w.model_samples_per_s = 10000;
  w.workers = workers;
  w.prefetch = 4;
  w.compute_threads = threads;
  w.cores = cores;
  return w;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("a loader slower than twice the model's rate: raise the workers") {
  const std::string advice = input_wait_advice(waiting(15000, 2, 2, 16));
  INFO(advice);
  CHECK(advice.rfind("input-bound: the step waited for data 25%", 0) == 0);
  CHECK(has(advice, "the loader delivers 15000 samples/s, the model consumes 10000"));
  // To twice the model's rate: 2 workers fill 15000, 3 fill 22500.
  CHECK(has(advice, "raise data.workers from 2 to 3"));
  CHECK(has(input_wait_advice(waiting(15000, 0, 2, 16)), "set data.workers"));
}

TEST_CASE("compute threads that wait most of the time leave their cores to more workers") {
  // 1 worker and 1 compute thread on 2 cores, the step waiting 94% of the
  // time: the second core is nearly idle (a second worker trained 1.7x).
  InputWait starved = waiting(4000, 1, 1, 2, 94);
  const std::string advice = input_wait_advice(starved);
  INFO(advice);
  CHECK(has(advice, "raise data.workers from 1 to 2"));
  // Without workers: as many as the cores the compute threads leave.
  CHECK(has(input_wait_advice(waiting(4000, 0, 2, 2, 95)),
            "set data.workers: 2 (the compute threads wait"));
  // Half the time waiting: half of the training thread's core is free.
  CHECK(has(input_wait_advice(waiting(4000, 1, 1, 2, 55)), "raise data.workers from 1 to 2"));
  // Workers beyond what data.prefetch lets build: the advice sets both.
  InputWait shallow = waiting(4000, 2, 1, 16, 90);
  shallow.prefetch = 1;
  const std::string both = input_wait_advice(shallow);
  INFO(both);
  CHECK(has(both, "raise data.workers from 2 to "));
  CHECK(has(both, " and data.prefetch: "));
  CHECK(has(input_wait_advice(waiting(4000, 0, 1, 16, 95)),
            "set data.workers: 16 and data.prefetch: 15"));
  // An epoch of 2 batches: both are built at once already.
  InputWait short_epoch = waiting(4000, 2, 1, 16, 90);
  short_epoch.slots = 2;
  const std::string capped_by_epoch = input_wait_advice(short_epoch);
  CHECK(has(capped_by_epoch, "an epoch has 2 batches, all of them being built at once"));
  CHECK_FALSE(has(capped_by_epoch, "raise"));
  // More workers than the ring builds at once (prefetch 2 ahead, and the
  // batch handed back): prefetch is the knob.
  InputWait capped = waiting(4000, 8, 1, 16);
  capped.prefetch = 2;
  CHECK(has(input_wait_advice(capped),
            "only 3 of its 8 workers build batches at once (data.prefetch: 2, and the batch the "
            "step hands back): raise data.prefetch from 2 to"));
}

TEST_CASE("a slow loader with every core busy: not more workers") {
  // Workers and compute threads share the cores: move cores to the loader.
  const std::string shared = input_wait_advice(waiting(15000, 2, 2, 4));
  INFO(shared);
  CHECK_FALSE(has(shared, "raise data.workers"));
  CHECK(has(shared,
            "its 2 workers and the 2 compute threads have all 4 cores: move cores from "
            "backend.threads to data.workers"));
  // The workers alone fill the machine (a GPU run: one compute thread).
  const std::string full = input_wait_advice(waiting(15000, 6, 1, 2));
  INFO(full);
  CHECK_FALSE(has(full, "raise data.workers"));
  CHECK(has(full,
            "its 6 workers already have all 2 cores, more would not help: make each "
            "sample cheaper to load"));
  // One worker and the one compute thread on 2 cores: each has its own.
  const std::string paired = input_wait_advice(waiting(15000, 1, 1, 2));
  INFO(paired);
  CHECK(has(paired,
            "its 1 worker and the training thread have all 2 cores: make each sample "
            "cheaper to load"));
}

TEST_CASE("a fast loader sharing the cores with the compute threads: fewer threads") {
  const std::string advice = input_wait_advice(waiting(500000, 2, 2, 2));
  INFO(advice);
  CHECK(has(advice, "50x the 10000 the model consumes"));
  CHECK(has(advice, "2 workers and the 2 compute threads share 2 cores"));
  CHECK_FALSE(has(advice, "raise data.workers"));
  CHECK(has(input_wait_advice(waiting(500000, 2, 8, 8)), "set backend.threads: 6"));
  // No core left for the compute threads: a quarter of the cores load.
  CHECK(has(advice, "set data.workers: 1 and backend.threads: 1"));
  CHECK(has(input_wait_advice(waiting(500000, 8, 8, 8)),
            "set data.workers: 2 and backend.threads: 6"));
  CHECK(has(input_wait_advice(waiting(500000, 1, 1, 1)), "set data.workers: 0"));
}

TEST_CASE("a fast loader with cores to spare: more prefetch") {
  const std::string advice = input_wait_advice(waiting(500000, 4, 1, 16));
  INFO(advice);
  CHECK(has(advice, "raise data.prefetch from 4"));
  CHECK_FALSE(has(advice, "workers"));
  // A deep ring already: the bursts come from elsewhere.
  InputWait deep = waiting(500000, 4, 1, 16);
  deep.prefetch = 64;
  CHECK_FALSE(has(input_wait_advice(deep), "raise data.prefetch"));
  CHECK(has(input_wait_advice(waiting(500000, 1, 1, 1)),
            "its 1 worker and the 1 compute thread share 1 core and"));
}

TEST_CASE("batches built on the training thread: workers, never more prefetch") {
  // A loader three times faster than the model still costs its build time
  // inside every step when it has no workers.
  const std::string spare = input_wait_advice(waiting(30000, 0, 1, 4));
  CHECK(has(spare, "data.workers: 0"));
  CHECK(has(spare, "set data.workers: 1 or more"));
  CHECK_FALSE(has(spare, "prefetch"));
  const std::string busy = input_wait_advice(waiting(30000, 0, 4, 4));
  CHECK(has(busy, "set data.workers: 1 and backend.threads: 3"));
  const std::string one = input_wait_advice(waiting(5000, 0, 1, 1));
  CHECK(has(one, "none for a loader worker"));
  CHECK_FALSE(has(one, "prefetch"));
}

TEST_CASE("trainer time's prediction: the wait from the two rates, said as what a run would see") {
  using trainer::train::predicted_wait_pct;
  // Workers build while the step runs: a loader at half the step's rate
  // leaves it waiting half the time; one as fast or faster, never.
  CHECK(predicted_wait_pct(5000, 10000, true) == Approx(50));
  CHECK(predicted_wait_pct(10000, 10000, true) == Approx(0));
  CHECK(predicted_wait_pct(40000, 10000, true) == Approx(0));
  // Without workers the batches are built between the steps: however fast.
  CHECK(predicted_wait_pct(10000, 10000, false) == Approx(50));
  CHECK(predicted_wait_pct(30000, 10000, false) == Approx(25));
  CHECK(predicted_wait_pct(0, 10000, true) == 0);  // nothing measured

  InputWait w = waiting(5000, 2, 2, 16, 50);
  w.predicted = true;
  const std::string advice = input_wait_advice(w);
  INFO(advice);
  CHECK(advice.rfind("input-bound: a run's step would wait for data about 50% of the time; ", 0) ==
        0);
  CHECK(has(advice, "raise data.workers from 2 to"));
  w.workers = 0;
  CHECK(input_wait_advice(w).rfind("input-bound: a run's step would wait for data about 50%", 0) ==
        0);
}
