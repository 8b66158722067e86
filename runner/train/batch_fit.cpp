// The batch a job takes against memory: auto's choice and the limit's check.
#include "runner/train/batch_fit.h"

#include <cstdio>

#include "runner/train/memory_report.h"

namespace trainer::train {

FittedBatch fit_batch_to_memory(const Session& s, Backend& backend, double capacity) {
  FittedBatch fitted;
  if (s.config.train.micro_batch_auto) {
    MicroBatchChoice choice = fit_micro_batch(s, backend, capacity);
    refuse_unfit_micro_batch(s, choice);
    fitted.session = std::move(choice.session);
    char note[256];
    std::snprintf(note, sizeof note,
                  "micro_batch_size: auto: micro-batch %lld x accumulation %lld (predicted %.0f "
                  "MiB of %.0f MiB, %.0f%% kept free)",
                  static_cast<long long>(fitted.session.batch.micro),
                  static_cast<long long>(fitted.session.batch.accumulation),
                  mib(choice.estimate.total()), mib(choice.capacity),
                  100 * s.config.train.memory_headroom);
    fitted.note = note;
  } else {
    fitted.session = s;
  }
  if (s.config.train.memory_limit_mib > 0)
    enforce_memory_limit(fitted.session, backend);
  else if (!s.config.train.micro_batch_auto)
    refuse_beyond_available(fitted.session, backend);
  return fitted;
}

}  // namespace trainer::train
