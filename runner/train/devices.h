// Choosing the backend a config's `devices:` asks for, and setting it up
// (CPU thread count; GPU index).
#pragma once

#include "ops/kernel.h"
#include "runner/config/config.h"
#include "runner/config/diagnostics.h"

namespace trainer::train {

// Every GPU `devices:` lists can be used here: errors at `devices` naming the
// GPU and why not (no CUDA backend in this build, no driver, no such GPU).
// Opens no CUDA context. Nothing to check for `devices: cpu`.
void check_devices(const config::Config& config, config::Diagnostics& diags);

// The CPU compute threads the config asks for: backend.threads, or for 0
// cpu::default_cpu_threads() (OMP_NUM_THREADS, else the usable CPUs).
int cpu_compute_threads(const config::Config& config);

// The threads a training step computes on: cpu_compute_threads on the CPU,
// the one host thread that drives a GPU.
int step_compute_threads(const config::Config& config);

// The backend for the first device of the config. Throws config::ConfigError
// when the devices cannot be used here (check_devices).
Backend& select_backend(const config::Config& config);

}  // namespace trainer::train
