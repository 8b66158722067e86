// OpDef: one op, defined once: its attribute schema, how many inputs it takes,
// its signature rule (output shape, parameters, FLOPs from input shapes and
// attributes) and what its backward rule reads. Kernels live per backend
// (ops/kernel.h); the graph compiler only ever reads OpDefs.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/field.h"
#include "ops/shape.h"

namespace trainer {

// Thrown by a signature rule when the inputs do not fit the op. The message says
// what the op needs and what it got ("conv2d needs input [N, C, H, W], got [128, 784]");
// the graph builder adds the layer name and its position in the YAML.
class ShapeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A parameter (or persistent state) an op instance owns.
struct ParamDecl {
  std::string name;  // "weight", "bias", "running_mean": the checkpoint key is "<layer>.<name>"
  Shape shape;
  std::string init;       // initializer name: kaiming_normal, kaiming_uniform, xavier_normal,
                          // xavier_uniform, uniform_fan_in, zeros, ones
  bool trainable = true;  // false: state (running statistics), no gradient, no optimizer
};

struct OpSignature {
  Shape output;
  std::vector<ParamDecl> params;
  double forward_flops = 0;  // multiply-add counted as 2
};

using SignatureRule =
    std::function<OpSignature(const std::vector<Shape>& inputs, const Attrs& attrs)>;

// Which forward values the backward rule reads; the memory planner keeps exactly
// these alive until the backward step has run.
struct BackwardReads {
  bool inputs = false;
  bool output = false;
};

// What an instance's backward reads when that depends on its attributes.
using BackwardReadsRule = std::function<BackwardReads(const Attrs& attrs)>;

// Which activation formats (TensorFormat) an op's kernels take, for the
// format pass (runner/graph/formats.h).
enum class FormatRule {
  plain,          // plain float32 in and out (losses, reshape, concat: own loops)
  per_argument,   // each input and the output in any format, converted inside the
                  // kernel where needed (conv2d, linear, batchnorm, window pooling,
                  // flatten)
  same_as_input,  // the output in the inputs' format, whatever it is (activations)
  same_layout,    // the output in the inputs' layout, plain or blocked, float32 only:
                  // element-wise own loops (add, dropout)
};

struct OpDef {
  std::string name;  // the YAML `type:` of a layer
  std::string doc;   // one line, for the reference
  std::vector<FieldSpec> attrs;
  int min_inputs = 1;
  int max_inputs = 1;  // -1: any number (add, concat)
  SignatureRule signature;
  BackwardReads backward_reads;
  BackwardReadsRule backward_reads_rule;       // set: replaces backward_reads per instance
  std::vector<int> non_differentiable_inputs;  // e.g. the labels of a loss
  bool is_loss = false;        // output is a scalar [1]; inputs are (prediction, target)
  bool inplace_ok = false;     // the kernel may write its output over input 0
  bool has_backward = true;    // false: gradients stop here
  bool stochastic = false;     // uses KernelArgs::seed (dropout); replays identically for a seed
  bool low_precision = false;  // matmul-like (conv, linear): computes in bf16/fp16 under
                               // mixed precision; everything else stays float32
  FormatRule formats = FormatRule::plain;

  // What the backward of an instance with these attributes reads.
  BackwardReads reads(const Attrs& instance) const {
    return backward_reads_rule ? backward_reads_rule(instance) : backward_reads;
  }
};

class OpRegistry {
 public:
  void add(OpDef def);
  const OpDef* find(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  const std::vector<OpDef>& all() const { return defs_; }

 private:
  std::vector<OpDef> defs_;
};

// The registry of every built-in op (ops/defs/), filled on first use.
const OpRegistry& op_registry();

}  // namespace trainer
