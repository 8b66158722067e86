// Registration of the CUDA kernel families, one function per file of ops/cuda/.
#pragma once

#include "ops/cuda/context.h"
#include "ops/kernel.h"

namespace trainer::cuda {

void register_activation_kernels(Backend& backend, CudaContext& ctx);
void register_add_kernels(Backend& backend, CudaContext& ctx);
void register_batchnorm_kernels(Backend& backend, CudaContext& ctx);
void register_conv_kernels(Backend& backend, CudaContext& ctx);
void register_copy_kernels(Backend& backend, CudaContext& ctx);
void register_dropout_kernels(Backend& backend, CudaContext& ctx);
void register_layernorm_kernels(Backend& backend, CudaContext& ctx);
void register_linear_kernels(Backend& backend, CudaContext& ctx);
void register_loss_kernels(Backend& backend, CudaContext& ctx);
void register_pool_kernels(Backend& backend, CudaContext& ctx);

inline void register_cuda_kernels(Backend& backend, CudaContext& ctx) {
  register_activation_kernels(backend, ctx);
  register_add_kernels(backend, ctx);
  register_batchnorm_kernels(backend, ctx);
  register_conv_kernels(backend, ctx);
  register_copy_kernels(backend, ctx);
  register_dropout_kernels(backend, ctx);
  register_layernorm_kernels(backend, ctx);
  register_linear_kernels(backend, ctx);
  register_loss_kernels(backend, ctx);
  register_pool_kernels(backend, ctx);
}

}  // namespace trainer::cuda
