// labels: gpu
// Checking the GPUs a config lists opens no CUDA context on them: the process
// that starts one rank per GPU holds no memory (and, in an exclusive compute
// mode, no claim) on the GPUs its ranks open; the backend opens its own.
// Contexts are seen through the driver's own API, loaded at run time. Skipped
// with the reason on a machine without a GPU.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <string>

#include "gpu_skip.h"
#include "runner/config/load.h"
#include "runner/train/devices.h"

#ifdef TRAINER_WITH_CUDA
namespace {

// Whether the primary context of GPU `ordinal` is active, from libcuda
// itself (a runtime call could open the context it asks about).
class PrimaryContexts {
 public:
  PrimaryContexts() : library_(dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    if (!library_) return;
    init_ = reinterpret_cast<Init>(dlsym(library_, "cuInit"));
    device_get_ = reinterpret_cast<DeviceGet>(dlsym(library_, "cuDeviceGet"));
    state_ = reinterpret_cast<State>(dlsym(library_, "cuDevicePrimaryCtxGetState"));
  }
  ~PrimaryContexts() {
    if (library_) dlclose(library_);
  }
  PrimaryContexts(const PrimaryContexts&) = delete;
  PrimaryContexts& operator=(const PrimaryContexts&) = delete;

  bool loaded() const { return init_ && device_get_ && state_ && init_(0) == 0; }

  bool active(int ordinal) const {
    int device = 0, is_active = 0;
    unsigned flags = 0;
    REQUIRE(device_get_(&device, ordinal) == 0);
    REQUIRE(state_(device, &flags, &is_active) == 0);
    return is_active != 0;
  }

 private:
  using Init = int (*)(unsigned);
  using DeviceGet = int (*)(int*, int);
  using State = int (*)(int, unsigned*, int*);
  void* library_;
  Init init_ = nullptr;
  DeviceGet device_get_ = nullptr;
  State state_ = nullptr;
};

}  // namespace

TEST_CASE("checking the listed GPUs opens no context on them; the backend opens its own") {
  const PrimaryContexts contexts;
  REQUIRE(contexts.loaded());
  REQUIRE_FALSE(contexts.active(0));  // nothing in this process has used GPU 0 yet

  const trainer::config::Config config = trainer::config::load_config_text(
      "data:\n"
      "  train: {type: synthetic, shape: [4], classes: 2}\n"
      "model:\n"
      "  layers: [{type: linear, out_features: 2}]\n"
      "  loss: {type: cross_entropy}\n"
      "devices: [0]\n",
      "gpu.yaml");
  trainer::config::Diagnostics diags;
  trainer::train::check_devices(config, diags);
  CHECK(diags.empty());
  CHECK_FALSE(contexts.active(0));

  trainer::train::select_backend(config);  // the device this process trains on
  CHECK(contexts.active(0));
}
#endif
