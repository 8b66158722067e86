// labels: gpu
// `trainer time` on a GPU reports each call's device time: what the host
// spends between launches (a cuDNN call's planning, the launches themselves)
// is left out, as a recorded step's replay leaves it out, and what the work
// takes on the device is in. Skipped with the reason on a machine without a GPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <thread>

#include "gpu_skip.h"
#include "ops/device_buffer.h"
#include "ops/kernel.h"
#include "ops/update.h"

#ifdef TRAINER_WITH_CUDA
#include "ops/cuda/cuda_backend.h"

using namespace trainer;

namespace {

// A float32 buffer of `count` values on `backend`, and the tensor over it.
struct DeviceFloats {
  DeviceFloats(Backend& backend, std::int64_t count)
      : buffer(backend, static_cast<std::size_t>(count) * sizeof(float)),
        ref{buffer.data(), {count}, DType::f32} {}
  DeviceBuffer buffer;
  TensorRef ref;
};

}  // namespace

TEST_CASE("CUDA work is timed on the device, without the host's time between launches") {
  Backend& gpu = cuda_backend(0);
  VectorOps& ops = gpu.vector_ops();
  DeviceFloats small(gpu, std::int64_t{16} << 20), large(gpu, std::int64_t{256} << 20);
  ops.fill(small.ref, 1.0f);  // loads the kernel: none may load while the stream is held
  gpu.synchronize();

  // Two fills of 64 MiB with 30 ms of the host between them: the device time
  // is the fills' (about 30 us on an H200), not the host's 30 ms.
  const double with_host_pause = gpu.time_work_ms([&] {
    ops.fill(small.ref, 2.0f);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    ops.fill(small.ref, 3.0f);
  });
  CHECK(with_host_pause > 0.0);
  CHECK(with_host_pause < 5.0);

  // The device's work is in it: 1 GiB filled takes longer than 64 MiB.
  double small_ms = 1e9, large_ms = 1e9;
  for (int i = 0; i < 5; ++i) {  // the fastest of five
    small_ms = std::min(small_ms, gpu.time_work_ms([&] { ops.fill(small.ref, 4.0f); }));
    large_ms = std::min(large_ms, gpu.time_work_ms([&] { ops.fill(large.ref, 4.0f); }));
  }
  INFO("64 MiB: " << small_ms << " ms, 1 GiB: " << large_ms << " ms");
  CHECK(large_ms > 4.0 * small_ms);

  // Work that throws while it is queued lets the stream go on.
  CHECK_THROWS_AS(gpu.time_work_ms([&] {
    ops.fill(small.ref, 5.0f);
    throw std::runtime_error("refused");
  }),
                  std::runtime_error);
  const auto start = std::chrono::steady_clock::now();
  gpu.synchronize();
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::milliseconds(500));
}
#endif
