// Placeholder until the CUDA backend lands: proves the CUDA toolkit links.
#include <cuda_runtime_api.h>

namespace trainer::cuda {

int runtime_version() {
  int v = 0;
  cudaRuntimeGetVersion(&v);
  return v;
}

}  // namespace trainer::cuda
