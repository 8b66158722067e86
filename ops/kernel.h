// Kernel: one op instance compiled for one backend with fixed shapes. Created
// once at lowering (oneDNN primitives, cuDNN descriptors and algorithm choice
// happen in the constructor), then called every step with the same buffers.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ops/epilogue.h"
#include "ops/op.h"
#include "ops/out_of_memory.h"
#include "ops/step_values.h"
#include "ops/tensor.h"
#include "ops/update.h"

namespace trainer {

class Collective;

// What a kernel is compiled for.
struct KernelContext {
  const OpDef* op = nullptr;
  const Attrs* attrs = nullptr;
  std::vector<Shape> inputs;
  std::vector<TensorRef> param_decls;  // shapes/dtypes of the params (data is null)
  Shape output;
  DType dtype = DType::f32;    // compute/storage type of activations
  bool training = true;        // false: an eval-only program (no backward will be called)
  bool deterministic = false;  // only algorithms that give bit-identical results run to run
  bool autotune = false;       // time the candidate algorithms once (cudnn.benchmark) instead of
                               // taking the library's heuristic choice
  bool allow_tf32 = false;     // float32 GEMMs/convolutions may use TF32 tensor cores
  // Mixed precision: the type a matmul-like op (OpDef::low_precision) computes in.
  // Activations and gradients stay float32 in memory; the kernel converts its
  // inputs, weights and incoming gradient to this type as part of the layout
  // conversion it does anyway, and accumulates into float32 outputs.
  DType compute = DType::f32;
  // Training meets short batches (data.drop_last: false): rows at and after
  // StepValues::valid_rows are padding, which a kernel whose results depend on
  // the batch's other rows (batchnorm's statistics) must leave out. A backend
  // may pick another kernel for that (CUDA: own batchnorm kernels, not cuDNN's).
  bool short_batches = false;
  // The ranks whose batch statistics a synchronised batchnorm combines (null:
  // this process only).
  Collective* collective = nullptr;
  // The formats of the inputs and the output (and of their gradients), set by
  // the format pass for ops that take them (OpDef::formats); empty: plain float32.
  std::vector<TensorFormat> input_formats;
  TensorFormat output_format;
  TensorFormat input_format(std::size_t i) const {
    return i < input_formats.size() ? input_formats[i] : TensorFormat{};
  }
};

// The buffers of one call. Built once at lowering and reused every step.
// Backward semantics: every gradient output is OVERWRITTEN (never accumulated);
// a null grad_inputs[i]/grad_params[i] means "not wanted".
struct KernelArgs {
  std::vector<TensorRef> inputs;
  std::vector<TensorRef> params;  // in OpSignature::params order, state included
  TensorRef output;
  std::vector<void*> saved;   // buffers of saved_bytes(), alive from forward to backward
  void* workspace = nullptr;  // workspace_bytes(), scratch within one call
  TensorRef grad_output;
  std::vector<TensorRef> grad_inputs;
  std::vector<TensorRef> grad_params;
  bool training = true;      // batchnorm batch statistics, dropout active
  bool update_state = true;  // false: leave persistent state (running statistics) alone,
                             // as when a forward call is repeated to recompute activations
  // The step's seed and valid rows, in backend memory (null: seed 0, every row
  // valid). Kernels read them when they run, never when they are queued.
  const StepValues* step = nullptr;
  std::uint64_t seed_salt = 0;  // stochastic ops: this call's salt (call_seed)
};

// The step values a CPU kernel reads (its backend memory is host memory).
inline StepValues step_values_of(const KernelArgs& args) {
  return args.step ? *args.step : StepValues{};
}

class Kernel {
 public:
  virtual ~Kernel() = default;
  // Sizes of buffers the forward call fills for the backward call (pool indices,
  // batchnorm mean/variance, dropout mask).
  virtual std::vector<std::size_t> saved_bytes() const { return {}; }
  virtual std::size_t workspace_bytes() const { return 0; }
  virtual void forward(const KernelArgs& args) = 0;
  virtual void backward(const KernelArgs& args) = 0;
  // The implementation chosen ("onednn:jit:avx512_core", "cudnn:algo=1"), for the manifest.
  virtual std::string implementation() const { return "reference"; }
};

using KernelFactory = std::function<std::unique_ptr<Kernel>(const KernelContext&)>;

// Work a backend recorded once and replays as a whole (a CUDA graph): the same
// kernels on the same buffers, reading the buffers' contents at replay time.
class RecordedWork {
 public:
  virtual ~RecordedWork() = default;
  virtual void replay() = 0;
};

// Memory handed out by a backend's allocate() (0 when the backend does not count).
struct MemoryStats {
  std::size_t allocated = 0;  // now
  std::size_t peak = 0;       // the most at once since the process started
  std::size_t reserved = 0;   // what the process holds (CPU: resident set; GPU: device memory
                              // in use)
};

// A backend is a named table of kernel factories, one per op name.
class Backend {
 public:
  explicit Backend(std::string name) : name_(std::move(name)) {}
  virtual ~Backend() = default;
  const std::string& name() const { return name_; }
  void add_kernel(const std::string& op, KernelFactory factory) {
    kernels_[op] = std::move(factory);
  }
  bool has_kernel(const std::string& op) const { return kernels_.count(op) != 0; }
  // Whether this backend's matmul-like kernels compute in `type` (float32 always).
  virtual bool supports_compute(DType type) const { return type == DType::f32; }
  // Why it does not, and what to use instead (for the error).
  virtual std::string compute_refusal(DType) const { return "use precision: fp32 or tf32 on it"; }
  // The activation formats its kernels run fastest on (OpDef::formats ops):
  // the channel block of images (0: plain only) and whether activations may be
  // stored in bf16 under bf16 mixed precision.
  struct ActivationFormats {
    int channel_block = 0;
    bool bf16_storage = false;
  };
  virtual ActivationFormats activation_formats() const { return {}; }
  // Whether its kernel of `op` (linear, batchnorm, add: the ops with an
  // `activation` attribute) applies `activation` inside its own work (a GEMM
  // epilogue, a fused normalisation), so that the fusion pass folds the
  // activation layer after it into it. Every such kernel takes every
  // activation its op lists; this says which ones save work.
  virtual bool fuses_activation(const std::string& /*op*/, Epilogue) const { return false; }
  std::unique_ptr<Kernel> make_kernel(const KernelContext& ctx) const;

  // Memory of this backend (host memory for CPU, device memory for CUDA).
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void release(void* ptr) = 0;
  virtual void copy_to_device(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, std::size_t bytes) = 0;
  // The next step's input: like copy_to_device, but the transfer may overlap
  // the work already queued (CUDA: it lands in a staging buffer at once and
  // moves to `dst` in order with compute). Returns once `src` may be reused.
  virtual void copy_input_to_device(void* dst, const void* src, std::size_t bytes) {
    copy_to_device(dst, src, bytes);
  }
  virtual void synchronize() {}
  virtual MemoryStats memory_stats() const { return {}; }
  // What more could be allocated (CPU: the least of MemAvailable, the cgroup's
  // and ulimit -v's room; GPU: free memory); 0 when unknown. Reads system
  // files: for planning, not for every log line.
  virtual std::size_t available_memory() const { return 0; }
  // The part of that the processes on this machine share (CPU: not a
  // process's own ulimit -v room), which ranks on one machine divide.
  virtual std::size_t shared_available_memory() const { return available_memory(); }
  // Host memory this backend copies from fastest (page-locked on CUDA, for the
  // loader's batch ring when data.pin_memory is on); 64-byte aligned malloc here.
  virtual void* allocate_host(std::size_t bytes);
  virtual void release_host(void* ptr);
  // Whole-model vector work of the training step (optimizer, norms, accumulation).
  virtual VectorOps& vector_ops() = 0;
  // Records the work `queue_work` queues on this backend without running it,
  // for replay. Null, with the reason in `why_not`, when this backend does not
  // record (the CPU runs kernels as they are called) or the recording failed;
  // the caller then runs the work directly.
  virtual std::unique_ptr<RecordedWork> record(const std::function<void()>& queue_work,
                                               std::string& why_not);
  // Milliseconds the work `queue_work` queues takes to run, once what was
  // queued before has finished: on the CPU the clock around the call (its
  // kernels run as they are called); on a GPU the device's time from the first
  // of that work to the last, without the host's time launching it, which a
  // recorded step's replay does not spend either.
  virtual double time_work_ms(const std::function<void()>& queue_work);

 private:
  std::string name_;
  std::map<std::string, KernelFactory> kernels_;
};

// The CPU backend (always built).
Backend& cpu_backend();

}  // namespace trainer
