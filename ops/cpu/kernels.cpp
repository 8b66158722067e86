// The list of CPU kernel families. Adding a family adds one line here.
#include "ops/cpu/kernels.h"

#include "ops/cpu/families.h"

namespace trainer {

void register_cpu_kernels(Backend& backend) {
  cpu::register_linear_kernels(backend);
  cpu::register_conv_kernels(backend);
  cpu::register_norm_kernels(backend);
  cpu::register_activation_kernels(backend);
  cpu::register_pool_kernels(backend);
  cpu::register_shape_kernels(backend);
  cpu::register_dropout_kernels(backend);
  cpu::register_loss_kernels(backend);
}

}  // namespace trainer
