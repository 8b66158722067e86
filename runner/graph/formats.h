// The format pass: which activations stay in the backend's own format between
// ops instead of plain float32. On the CPU that is oneDNN's channel-blocked
// layout (nChw16c) for images and, under `precision: bf16`, bf16 storage:
// a run of conv2d -> batchnorm -> relu -> maxpool then passes its activations
// and gradients from kernel to kernel with no conversion, in half the bytes.
//
// A value takes the backend's format when the node that writes it and every
// node that reads it take any format (OpDef::formats); `same_as_input` ops
// (activations) tie their inputs and output to one format, `same_layout` ops
// (add, dropout: float32 loops) to one layout in float32. bf16 storage also
// needs a single reader (a value read twice has its gradients summed by a
// float32 `add`). Gradients get the format of their value (autodiff.h).
// Everything else, the batch, the logits and the parameters among it, stays
// plain float32.
#pragma once

#include <string>

#include "ops/kernel.h"
#include "runner/graph/ir.h"

namespace trainer::graph {

// Sets Value::dtype and Value::channel_block of the model's activations for a
// backend's `support` and the run's `precision.mode`.
void assign_formats(Graph& graph, const Backend::ActivationFormats& support,
                    const std::string& precision_mode);

// "f32", "bf16 nChw16c": a value's format as `trainer plan` prints it.
std::string format_name(const Value& value);

}  // namespace trainer::graph
