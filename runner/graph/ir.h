// The graph IR: values (tensors with static shapes), nodes (an op instance with
// attributes, named inputs and its own parameters) and parameters. Built from
// the YAML model by builder.h, extended with gradient nodes by autodiff.h,
// placed in memory by memory_plan.h and lowered to kernels by program.h.
#pragma once

#include <string>
#include <vector>

#include "ops/dtype.h"
#include "ops/field.h"
#include "ops/op.h"
#include "ops/shape.h"
#include "ops/tensor.h"
#include "runner/config/node.h"

namespace trainer::graph {

using ValueId = int;
constexpr ValueId kNoValue = -1;

enum class ValueKind { input, labels, activation, gradient };

struct Value {
  std::string name;  // "conv1", "conv1.grad"
  Shape shape;
  DType dtype = DType::f32;
  ValueKind kind = ValueKind::activation;
  int producer = -1;      // index of the node that writes it in the forward pass; -1: fed
  int channel_block = 0;  // blocked image layout (formats.h); 0: plain
  TensorFormat format() const { return {dtype, channel_block}; }
};

struct Param {
  std::string name;  // checkpoint key: "stage2.block1.conv1.weight"
  Shape shape;
  std::string init;
  bool trainable = true;
  bool frozen = false;       // trainable by its op, but model.freeze names its layer
  bool weight_decay = true;  // false for biases and normalisation parameters, unless
                             // optimizer.weight_decay_params is all
  double lr_scale = 1.0;     // model.lr_scale: its learning rate is the optimizer's times this
  int node = -1;
  double fan_in = 1, fan_out = 1;
};

struct Node {
  std::string name;  // the layer's name from the YAML, or generated ("relu3")
  const OpDef* op = nullptr;
  Attrs attrs;
  std::vector<ValueId> inputs;
  ValueId output = kNoValue;
  std::vector<int> params;  // indices into Graph::params, in OpSignature::params order
  double forward_flops = 0;
  config::Mark mark;           // where the layer is written
  bool recompute = false;      // activation checkpointing: recompute the output for backward
  DType compute = DType::f32;  // the type the node computes in (precision.h)
};

struct Graph {
  std::vector<Value> values;
  std::vector<Node> nodes;  // in a valid execution order (topological)
  std::vector<Param> params;
  ValueId input = kNoValue;   // the batch of samples
  ValueId labels = kNoValue;  // the batch of labels / targets
  ValueId logits = kNoValue;  // the model's output (input 0 of the loss)
  ValueId loss = kNoValue;    // scalar [1]

  ValueId add_value(Value v) {
    values.push_back(std::move(v));
    return static_cast<ValueId>(values.size() - 1);
  }
  std::int64_t parameter_count(bool trainable_only = true) const;
  std::int64_t frozen_parameter_count() const;  // held as they are by model.freeze
};

}  // namespace trainer::graph
