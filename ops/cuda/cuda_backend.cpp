// The CUDA backend: cudaMalloc memory, host-to-device copies on a copy stream
// ordered before compute by events (the next batch through a staging buffer,
// overlapping the running step), the table of CUDA kernels, and recording of
// work as CUDA graphs.
#include "ops/cuda/cuda_backend.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "ops/allocation_counter.h"
#include "ops/cuda/check.h"
#include "ops/cuda/context.h"
#include "ops/cuda/device_buffer.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/recorded_graph.h"
#include "ops/cuda/vector_ops.h"
#include "ops/cuda/work_timer.h"

namespace trainer {
namespace cuda {

void require_visible_device(int device) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string visible_note =
      visible ? std::string(" (CUDA_VISIBLE_DEVICES=") + visible + ")" : std::string();
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  int driver = 0;
  if (status != cudaSuccess) {
    cudaGetLastError();
    ignore_status(cudaDriverGetVersion(&driver));
  }
  // Driver version 0 is "no driver" whatever the count call said (a stub
  // libcuda answers cudaErrorStubLibrary), as `trainer doctor` reports it.
  if (status != cudaSuccess && driver == 0)
    throw std::runtime_error("cannot use GPU " + std::to_string(device) +
                             ": no NVIDIA driver is installed on this machine (driver version 0); "
                             "run on a machine with an NVIDIA GPU and driver, or use devices: cpu");
  if (status == cudaErrorInsufficientDriver || status == cudaErrorNoDevice) {
    if (status == cudaErrorNoDevice)
      throw std::runtime_error(
          "cannot use GPU " + std::to_string(device) + ": the NVIDIA driver reports no GPU" +
          visible_note + "; use devices: cpu" + (visible ? ", or unset CUDA_VISIBLE_DEVICES" : ""));
    throw std::runtime_error("cannot use GPU " + std::to_string(device) +
                             ": the NVIDIA driver (version " + std::to_string(driver) +
                             ") is older than this build's CUDA runtime; update the driver");
  }
  check(status, "cudaGetDeviceCount");
  if (device < 0 || device >= count)
    throw std::runtime_error("GPU " + std::to_string(device) +
                             " does not exist: " + std::to_string(count) + " GPU(s) visible" +
                             visible_note + "; valid indices are 0.." + std::to_string(count - 1));
}

void require_device(int device) {
  require_visible_device(device);
  // Creating the device's context is where a GPU held by another process shows.
  cudaError_t opened = cudaSetDevice(device);
  if (opened == cudaSuccess) opened = cudaFree(nullptr);
  if (opened == cudaSuccess) return;
  cudaGetLastError();
  if (opened == cudaErrorDevicesUnavailable)
    throw std::runtime_error(
        "GPU " + std::to_string(device) +
        " is busy: another process holds it and its compute mode admits only one "
        "(nvidia-smi -q -d COMPUTE); wait for it, or choose another GPU with devices: [i]");
  throw std::runtime_error("cannot open GPU " + std::to_string(device) + ": " +
                           cudaGetErrorName(opened) + ": " + cudaGetErrorString(opened));
}

namespace {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device)
      : Backend("cuda:" + std::to_string(device)),
        ctx_(device),
        vector_ops_(make_vector_ops(ctx_)) {
    register_cuda_kernels(*this, ctx_);
    check(cudaDeviceGetAttribute(&major_, cudaDevAttrComputeCapabilityMajor, device),
          "cudaDeviceGetAttribute(compute capability)");
    check(cudaDeviceGetAttribute(&minor_, cudaDevAttrComputeCapabilityMinor, device),
          "cudaDeviceGetAttribute(compute capability)");
  }

  // bf16 tensor cores came with sm_80, fp16 ones with sm_70.
  bool supports_compute(DType type) const override {
    if (type == DType::bf16) return major_ >= 8;
    if (type == DType::f16) return major_ >= 7;
    return type == DType::f32;
  }
  std::string compute_refusal(DType type) const override {
    const std::string sm = "sm_" + std::to_string(major_) + std::to_string(minor_);
    if (type == DType::bf16)
      return name() + " is " + sm + "; bf16 needs sm_80 or newer: use precision: fp16 or fp32";
    if (type == DType::f16)
      return name() + " is " + sm + "; fp16 needs sm_70 or newer: use precision: fp32";
    return "use precision: fp32 or tf32 on it";
  }
  // cuBLASLt's RELU_BIAS and GELU_AUX_BIAS epilogues (its GELU is the tanh
  // form), and relu inside add's element-wise kernel. batchnorm would run its
  // relu as a kernel of its own either way.
  bool fuses_activation(const std::string& op, Epilogue activation) const override {
    if (op == "add") return activation == Epilogue::relu;
    return op == "linear" && (activation == Epilogue::relu || activation == Epilogue::gelu_tanh);
  }

  void* allocate(std::size_t bytes) override {
    ctx_.device.activate();
    void* p = device_malloc(bytes);
    counter_.added(p, bytes);
    return p;
  }
  // Called from destructors, so it never throws: after a device fault every
  // cudaFree fails with that fault, which the first error already reported.
  void release(void* ptr) override {
    if (!ptr) return;
    const std::size_t bytes = counter_.removed(ptr);
    // The staging buffers of inputs inside the block go with it.
    const auto inside = [&](const auto& entry) {
      const auto* at = static_cast<const char*>(entry.first);
      return at >= static_cast<const char*>(ptr) && at < static_cast<const char*>(ptr) + bytes;
    };
    std::erase_if(staging_, inside);
    ignore_status(cudaFree(ptr));
  }
  MemoryStats memory_stats() const override {
    MemoryStats stats = counter_.stats();
    std::size_t free = 0, total = 0;
    ctx_.device.activate();
    const cudaError_t status = cudaMemGetInfo(&free, &total);
    if (status == cudaSuccess) stats.reserved = total - free;
    ignore_status(status);
    return stats;
  }
  cudaStream_t compute_stream() const { return ctx_.compute.get(); }
  std::size_t available_memory() const override {
    std::size_t free = 0, total = 0;
    ctx_.device.activate();
    const cudaError_t status = cudaMemGetInfo(&free, &total);
    ignore_status(status);
    return status == cudaSuccess ? free : 0;
  }
  // The copy waits for the compute work queued so far (it may overwrite a
  // buffer that work reads) and compute work queued later waits for the copy.
  // Small ones (a step's values) go through the pinned ring: the host does
  // not wait for the GPU.
  void copy_to_device(void* dst, const void* src, std::size_t bytes) override {
    ctx_.device.activate();
    refuse_inside_recording(ctx_.compute.get(), "a copy to the device");
    ctx_.compute_done.record(ctx_.compute.get());
    ctx_.compute_done.make_wait(ctx_.copy.get());
    ctx_.uploads.upload(dst, src, bytes, ctx_.copy.get(), "cudaMemcpyAsync(host to device)");
    ctx_.copy_done.record(ctx_.copy.get());
    ctx_.copy_done.make_wait(ctx_.compute.get());
  }
  // The copy stream fills a staging buffer as soon as the previous input has
  // left it (no wait for the running step), and the compute stream moves it
  // into place when it gets there. Waiting for the staging copy here keeps
  // `src` (the loader's batch slot) alive until it has been read.
  void copy_input_to_device(void* dst, const void* src, std::size_t bytes) override {
    ctx_.device.activate();
    refuse_inside_recording(ctx_.compute.get(), "an input copy to the device");
    Staging& s = staging_[dst];
    if (s.buffer.bytes() < bytes) {
      synchronize();  // the old buffer may still be read
      s.buffer = DeviceBuffer(bytes);
      s.used = false;
    }
    if (s.used) s.free.make_wait(ctx_.copy.get());
    check(cudaMemcpyAsync(s.buffer.data(), src, bytes, cudaMemcpyHostToDevice, ctx_.copy.get()),
          "cudaMemcpyAsync(input to staging)");
    s.staged.record(ctx_.copy.get());
    s.staged.make_wait(ctx_.compute.get());
    check(
        cudaMemcpyAsync(dst, s.buffer.data(), bytes, cudaMemcpyDeviceToDevice, ctx_.compute.get()),
        "cudaMemcpyAsync(staging to input)");
    s.free.record(ctx_.compute.get());
    s.used = true;
    s.staged.synchronize();
  }
  // Returns once the data is on the host (after the compute work queued so far).
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    ctx_.device.activate();
    refuse_inside_recording(ctx_.compute.get(), "a copy to the host");
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx_.compute.get()),
          "cudaMemcpyAsync(device to host)");
    ctx_.compute.synchronize();
  }
  void synchronize() override {
    ctx_.device.activate();
    ctx_.copy.synchronize();
    ctx_.compute.synchronize();
  }
  VectorOps& vector_ops() override { return *vector_ops_; }
  // Every kernel queues on the compute stream, so a capture of it holds the step.
  std::unique_ptr<RecordedWork> record(const std::function<void()>& queue_work,
                                       std::string& why_not) override {
    ctx_.device.activate();
    return record_graph(ctx_.compute.get(), queue_work, why_not);
  }
  // Every kernel queues on the compute stream: its device time, not the launches'.
  double time_work_ms(const std::function<void()>& queue_work) override {
    ctx_.device.activate();
    ctx_.copy.synchronize();
    if (!timer_) timer_ = std::make_unique<WorkTimer>();
    return timer_->time_ms(ctx_.compute.get(), queue_work);
  }

  // Pinned memory belongs to a context: this device's, not one opened on
  // GPU 0 by a thread that never chose a device.
  void* allocate_host(std::size_t bytes) override {
    ctx_.device.activate();
    void* p = nullptr;
    check(cudaHostAlloc(&p, bytes, cudaHostAllocDefault), "cudaHostAlloc");
    return p;
  }
  void release_host(void* ptr) override {  // from destructors: nothing thrown
    ignore_status(cudaSetDevice(ctx_.device.index));
    ignore_status(cudaFreeHost(ptr));
  }

 private:
  // A staging buffer per input destination (the batch and its labels).
  struct Staging {
    DeviceBuffer buffer;
    Event staged;  // on the copy stream: the input is in `buffer`
    Event free;    // on the compute stream: `buffer` has been moved into place
    bool used = false;
  };

  CudaContext ctx_;
  std::map<void*, Staging> staging_;
  std::unique_ptr<VectorOps> vector_ops_;
  std::unique_ptr<WorkTimer> timer_;  // made by the first timing
  AllocationCounter counter_;
  int major_ = 0, minor_ = 0;  // compute capability
};

}  // namespace
}  // namespace cuda

Backend& cuda_backend(int device) {
  static std::mutex mutex;
  // Never destroyed: at exit the CUDA runtime and cuDNN may be torn down
  // before static destructors run, and destroying handles then can crash. The
  // process's end releases the device.
  static auto* backends = new std::map<int, std::unique_ptr<cuda::CudaBackend>>;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = (*backends)[device];
  if (!slot) {
    cuda::require_device(device);
    slot = std::make_unique<cuda::CudaBackend>(device);
  }
  return *slot;
}

cudaStream_t cuda_compute_stream(int device) {
  return static_cast<cuda::CudaBackend&>(cuda_backend(device)).compute_stream();
}

}  // namespace trainer
