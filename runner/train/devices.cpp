// Device selection.
#include "runner/train/devices.h"

#include <thread>

#include "ops/cpu/onednn.h"
#include "runner/config/diagnostics.h"
#include "runner/train/session.h"
#ifdef TRAINER_WITH_CUDA
#include "ops/cuda/cuda_backend.h"
#endif

namespace trainer::train {

Backend& select_backend(const config::Config& config) {
  const int threads = config.backend.threads > 0
                          ? static_cast<int>(config.backend.threads)
                          : static_cast<int>(std::thread::hardware_concurrency());
  cpu::set_cpu_threads(threads);
  if (config.devices.cpu || config.devices.gpus.empty()) return cpu_backend();
#ifdef TRAINER_WITH_CUDA
  return cuda_backend(static_cast<int>(config.devices.gpus.front()));
#else
  config::Diagnostics d;
  d.add(mark_of(config, "devices"), "devices",
        "this build of trainer has no CUDA backend, so GPUs cannot be used",
        "use `devices: cpu`, or rebuild with the CUDA toolkit, cuDNN and NCCL installed");
  throw config::ConfigError(d);
#endif
}

}  // namespace trainer::train
