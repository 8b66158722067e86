// Epilogue: the activation an op with an `activation` attribute (linear,
// batchnorm, add) applies to its output in the same kernel. The graph's fusion pass
// folds a following activation layer into it when the backend applies that
// activation inside its own work (Backend::fuses_activation).
#pragma once

#include <optional>
#include <string>

#include "ops/field.h"

namespace trainer {

enum class Epilogue { none, relu, gelu, gelu_tanh };

// The epilogue an instance asks for (none when it has no `activation`).
Epilogue epilogue_of(const Attrs& attrs);

// The `activation` value of an epilogue: "none", "relu", "gelu", "gelu_tanh".
const char* epilogue_name(Epilogue epilogue);

// The epilogue that does what an activation layer (its op name and
// attributes) does, if there is one.
std::optional<Epilogue> epilogue_for_layer(const std::string& op, const Attrs& attrs);

// Whether the backward differentiates from the output (relu) rather than from
// the pre-activation the kernel keeps (the gelus).
inline bool epilogue_reads_output(Epilogue epilogue) {
  return epilogue == Epilogue::relu;
}

// Whether the kernel keeps the pre-activation from forward to backward.
inline bool epilogue_keeps_input(Epilogue epilogue) {
  return epilogue == Epilogue::gelu || epilogue == Epilogue::gelu_tanh;
}

}  // namespace trainer
