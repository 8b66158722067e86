// The batch a job takes against memory, as `trainer run` plans it and `time`
// and `validate` check it: micro_batch_size: auto chosen for the capacity, and
// the plan held to train.memory_limit_mib.
#pragma once

#include <string>

#include "ops/kernel.h"
#include "runner/train/session.h"

namespace trainer::train {

struct FittedBatch {
  Session session;   // `s`, or resized to the micro-batch auto chose
  std::string note;  // what auto chose, for the log; empty without auto
};

// With micro_batch_size: auto, the largest micro-batch that fits `capacity`
// (memory_capacity, or the smallest over a job's ranks; read only for auto).
// With train.memory_limit_mib, the plan must fit the limit. Throws a
// ConfigError at train.micro_batch_size when not even a micro-batch of 1
// fits, and at train.memory_limit_mib when the plan does not fit the limit.
FittedBatch fit_batch_to_memory(const Session& s, Backend& backend, double capacity);

}  // namespace trainer::train
