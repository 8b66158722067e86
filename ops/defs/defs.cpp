// The list of built-in op families. Adding an op family adds one line here.
#include "ops/defs/defs.h"

#include "ops/defs/families.h"

namespace trainer {

void register_builtin_ops(OpRegistry& registry) {
  defs::register_linear(registry);
  defs::register_conv(registry);
  defs::register_norm(registry);
  defs::register_activation(registry);
  defs::register_pool(registry);
  defs::register_shape_ops(registry);
  defs::register_dropout(registry);
  defs::register_loss(registry);
}

}  // namespace trainer
