// labels: cpu
// LossLog: per-step losses kept in backend memory and read back together, in
// order, also when more steps are recorded than it has room for.
#include <catch2/catch.hpp>

#include <vector>

#include "ops/device_buffer.h"
#include "runner/train/loss_log.h"

using namespace trainer;

TEST_CASE("the loss log returns every recorded loss in order, once") {
  Backend& backend = cpu_backend();
  DeviceBuffer loss(backend, sizeof(float));
  const TensorRef loss_ref{loss.data(), {1}, DType::f32};
  train::LossLog log(backend, 4);
  std::vector<float> expected;
  for (int step = 0; step < 11; ++step) {  // the log fills twice on the way
    const float value = 0.5f * static_cast<float>(step) - 1.25f;
    backend.copy_to_device(loss.data(), &value, sizeof value);
    log.record(loss_ref);
    expected.push_back(value);
    if (step == 2) {
      CHECK(log.read() == expected);
      expected.clear();
    }
  }
  CHECK(log.read() == expected);
  CHECK(log.read().empty());
  // Slots are cleared after each read: a recorded loss is not added to an old one.
  const float value = 3.0f;
  backend.copy_to_device(loss.data(), &value, sizeof value);
  log.record(loss_ref);
  CHECK(log.read() == std::vector<float>{3.0f});
}
