// Element-wise activations: relu, leaky_relu, gelu (erf or tanh form), silu, sigmoid, tanh.
#include "ops/defs/def_helpers.h"
#include "ops/defs/families.h"

namespace trainer::defs {
namespace {

// `reads_output`: the backward rule is written in terms of y (relu, sigmoid,
// tanh), so the output may overwrite the input.
OpDef activation(const std::string& name, const std::string& doc, bool reads_output,
                 double flops_per_element) {
  OpDef d;
  d.name = name;
  d.doc = doc;
  d.signature = [flops_per_element](const std::vector<Shape>& in, const Attrs&) {
    OpSignature s;
    s.output = in.at(0);
    s.forward_flops = flops_of(in.at(0), flops_per_element);
    return s;
  };
  d.backward_reads.output = reads_output;
  d.backward_reads.inputs = !reads_output;
  d.inplace_ok = reads_output;
  d.formats = FormatRule::same_as_input;
  return d;
}

}  // namespace

void register_activation(OpRegistry& registry) {
  registry.add(activation("relu", "max(x, 0).", true, 1));
  registry.add(activation("sigmoid", "1 / (1 + exp(-x)).", true, 4));
  registry.add(activation("tanh", "Hyperbolic tangent.", true, 4));
  OpDef gelu = activation(
      "gelu", "x * Phi(x): the exact (erf) form like PyTorch's default, or its tanh approximation.",
      false, 8);
  gelu.attrs = {field("approximate", FieldType::enumeration,
                      "none: the erf form; tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).")
                    .def("none")
                    .one_of({"none", "tanh"})};
  registry.add(std::move(gelu));
  registry.add(activation("silu", "x * sigmoid(x) (swish).", false, 5));
  OpDef leaky = activation("leaky_relu", "x if x > 0 else slope * x.", false, 1);
  leaky.attrs = {field("slope", FieldType::number, "Slope for negative inputs.")
                     .def("0.01")
                     .at_least(0)
                     .in_float32()};
  registry.add(std::move(leaky));
}

}  // namespace trainer::defs
