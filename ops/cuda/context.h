// CudaContext: what every CUDA kernel of one device shares: the compute stream
// (all kernels run on it, in program order), the copy stream for host-to-device
// transfers, the pinned ring the small per-step uploads go through, and the
// cuDNN and cuBLASLt handles bound to the compute stream.
#pragma once

#include "ops/cuda/cublaslt.h"
#include "ops/cuda/cudnn_handle.h"
#include "ops/cuda/event.h"
#include "ops/cuda/pinned_uploads.h"
#include "ops/cuda/stream.h"

namespace trainer::cuda {

// Makes `device` current on construction (so the members after it are created on it).
struct CurrentDevice {
  explicit CurrentDevice(int device) : index(device) {
    check(cudaSetDevice(device), "cudaSetDevice");
  }
  void activate() const { check(cudaSetDevice(index), "cudaSetDevice"); }
  int index;
};

struct CudaContext {
  explicit CudaContext(int device) : device(device), cudnn(compute.get()) {}

  CurrentDevice device;
  Stream compute;
  Stream copy;
  Event copy_done;     // recorded on `copy` after a transfer; `compute` waits on it
  Event compute_done;  // recorded on `compute` before a transfer; `copy` waits on it
  PinnedUploads uploads;
  CudnnHandle cudnn;
  LtHandle lt;
};

// Throws a clear error when `device` is not a GPU of this machine (no
// driver, index out of range). Opens no CUDA context.
void require_visible_device(int device);

// require_visible_device, then opens the device's context and makes it the
// thread's current device: where a GPU held by another process shows (busy).
void require_device(int device);

}  // namespace trainer::cuda
