// What a sweep directory records of the sweep it holds: sweep.yaml (config
// path and content hash, overrides, objective, every trial's overrides) and
// config.yaml (the resolved config every trial starts from). Re-running the
// same sweep there resumes it; another sweep, or the same config file with
// other content, is refused, naming what differs.
#pragma once

#include <string>

#include "runner/sweep/sweep_runner.h"

namespace trainer::sweep {

// The resolved config's YAML without its `sweep:` section (the objective and
// max_retries may change on a resume; a changed grid changes the trials).
std::string trial_base_config(const config::Node& resolved);

// sweep.yaml's text for `job`, whose trials start from `base_config`.
std::string sweep_record(const SweepJob& job, const std::string& base_config);

// "" when `dir` holds no sweep or this one (the record and base config it
// wrote are the same in what decides the trials); else the error message,
// naming the first difference and what to do.
std::string reuse_conflict(const std::string& dir, const std::string& record,
                           const std::string& base_config);

// Writes sweep.yaml and config.yaml into `dir` (each atomically).
void write_sweep_record(const std::string& dir, const std::string& record,
                        const std::string& base_config);

}  // namespace trainer::sweep
