// What a sweep directory records of the sweep it holds: sweep.yaml (config
// path and content hash, overrides, objective, every trial's overrides),
// config.yaml (the resolved config every trial starts from) and configs/
// (each trial's own resolved config, which it runs). Re-running the same
// sweep there resumes it; another sweep, the same config file with other
// content, or a directory holding anything else is refused, naming what
// differs.
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
// naming the first difference and what to do, or naming a folder where the
// sweep writes a file (or a file where it keeps a folder).
std::string reuse_conflict(const std::string& dir, const std::string& record,
                           const std::string& base_config);

// The sweep's record of its config path: absolute, "./" and "sub/../" spelt
// away (./sw.yaml, sw.yaml and sub/../sw.yaml are one sweep), links kept as
// links (a ".." after one is kept as spelt).
std::string recorded_config_path(const std::string& config_path);

// The config path a sweep.yaml's text records (as recorded_config_path
// spells it; "" when it records none).
std::string config_path_of_record(const std::string& sweep_yaml);

// "" when trial `trial_id` of the sweep in `dir` has not started, or its
// config there (what its run trained, else what an earlier invocation gave
// it) holds the values of `resolved`, this invocation's (the threads and GPU
// the sweep sets per launch aside); else the error naming the values that
// differ and what to do. A relative path read from another working
// directory, or a trial resumed by hand with overrides, makes one.
std::string trial_conflict(const std::string& dir, const std::string& trial_id,
                           const config::Node& resolved);

// Writes sweep.yaml and config.yaml into `dir` (each atomically).
void write_sweep_record(const std::string& dir, const std::string& record,
                        const std::string& base_config);

// The hash of what decides a sweep's trials (the config as they start from
// it, the config path and overrides, every trial's overrides): the same
// sweep with another objective, max_retries or --parallel has the same one.
std::string sweep_identity_hash(const std::string& record, const std::string& base_config);

// Writes DIR/configs/<trial_id>.yaml, the config the trial runs: `resolved`
// without its sweep section, headed by the config it was resolved from.
// Returns its path.
std::string write_trial_config(const std::string& dir, const std::string& trial_id,
                               const std::string& config_path, const config::Node& resolved);

}  // namespace trainer::sweep
