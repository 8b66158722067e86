// Device selection.
#include "runner/train/devices.h"

#include <thread>

#include "ops/cpu/onednn.h"
#include "runner/config/diagnostics.h"
#include "runner/graph/precision.h"
#include "runner/train/session.h"
#ifdef TRAINER_WITH_CUDA
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/device_report.h"
#endif

namespace trainer::train {

namespace {

// The precision's compute type runs on `backend`, or a config error says why
// and what to use, at precision.mode, before any kernel is built.
Backend& with_precision_checked(Backend& backend, const config::Config& config) {
  const std::string& mode = config.precision.mode;
  const DType compute = graph::low_precision_type(mode).value_or(DType::f32);
  if (backend.supports_compute(compute)) return backend;
  config::Diagnostics d;
  d.add(mark_of(config, "precision.mode"), "precision.mode",
        mode + " is not available on the " + backend.name() +
            " backend: " + backend.compute_refusal(compute));
  throw config::ConfigError(d);
}

}  // namespace

void check_devices(const config::Config& config, config::Diagnostics& diags) {
  if (config.devices.on_cpu()) return;
#ifdef TRAINER_WITH_CUDA
  for (const std::int64_t gpu : config.devices.gpus)
    if (const std::string why = cuda::gpu_unavailable_reason(static_cast<int>(gpu)); !why.empty())
      diags.add(mark_of(config, "devices"), "devices", why);  // names the GPU and what to do
#else
  diags.add(mark_of(config, "devices"), "devices",
            "this build of trainer has no CUDA backend, so GPUs cannot be used",
            "use `devices: cpu`, or rebuild with the CUDA toolkit, cuDNN and NCCL installed");
#endif
}

int cpu_compute_threads(const config::Config& config) {
  return config.backend.threads > 0 ? static_cast<int>(config.backend.threads)
                                    : cpu::default_cpu_threads();
}

int step_compute_threads(const config::Config& config) {
  return config.devices.on_cpu() ? cpu_compute_threads(config) : 1;
}

Backend& select_backend(const config::Config& config) {
  cpu::set_cpu_threads(cpu_compute_threads(config));
  if (config.devices.on_cpu()) return with_precision_checked(cpu_backend(), config);
  config::Diagnostics d;
  check_devices(config, d);
  d.throw_if_any();
#ifdef TRAINER_WITH_CUDA
  return with_precision_checked(cuda_backend(static_cast<int>(config.devices.gpus.front())),
                                config);
#else
  throw std::logic_error("check_devices passed GPUs in a build without CUDA");
#endif
}

}  // namespace trainer::train
