// Choosing the backend a config's `devices:` asks for, and setting it up
// (CPU thread count; GPU index).
#pragma once

#include "ops/kernel.h"
#include "runner/config/config.h"

namespace trainer::train {

// The backend for the first device of the config. Throws config::ConfigError
// when the devices cannot be used here (no CUDA backend in this build).
Backend& select_backend(const config::Config& config);

}  // namespace trainer::train
