// linear: y = act(x W^T + b) on a 2-d input [N, in_features], where `act` is
// none, or an activation applied in the GEMM's epilogue (written in the YAML,
// or folded in from a following activation layer by the fusion pass).
#include "ops/defs/def_helpers.h"
#include "ops/defs/families.h"
#include "ops/epilogue.h"

namespace trainer::defs {

void register_linear(OpRegistry& registry) {
  OpDef d;
  d.name = "linear";
  d.doc = "Fully connected layer: y = x W^T + b, input [N, in], output [N, out_features].";
  d.attrs = {
      field("out_features", FieldType::integer, "Number of output features.").req().at_least(1),
      field("bias", FieldType::boolean, "Add a learned bias.").def("true"),
      init_field("init", "kaiming_uniform", "Initializer of the weight."),
      init_field("bias_init", "zeros", "Initializer of the bias."),
      field("activation", FieldType::enumeration,
            "Activation applied to the output in the same kernel: relu, gelu (erf form), "
            "gelu_tanh (tanh approximation) or none.")
          .def("none")
          .one_of({"none", "relu", "gelu", "gelu_tanh"}),
  };
  d.signature = [](const std::vector<Shape>& in, const Attrs& a) {
    const Shape& x = in.at(0);
    require_rank("linear", x, 2, "a 2-d input [N, features]",
                 x.size() > 2 ? "add a flatten layer before it" : "");
    const std::int64_t out = a.get_int("out_features");
    OpSignature s;
    s.output = {x[0], out};
    s.params.push_back({"weight", {out, x[1]}, a.get_string("init"), true});
    if (a.get_bool("bias")) s.params.push_back({"bias", {out}, a.get_string("bias_init"), true});
    const Epilogue act = epilogue_of(a);
    const double act_flops = act == Epilogue::none ? 0 : act == Epilogue::relu ? 1 : 8;
    s.forward_flops =
        (2.0 * static_cast<double>(x[1]) + act_flops) * static_cast<double>(x[0] * out);
    return s;
  };
  // relu differentiates from the output; the gelus from the pre-activation,
  // which the kernel keeps in a saved buffer.
  d.backward_reads_rule = [](const Attrs& a) {
    return BackwardReads{true, epilogue_reads_output(epilogue_of(a))};
  };
  d.low_precision = true;
  d.formats = FormatRule::per_argument;
  registry.add(std::move(d));
}

}  // namespace trainer::defs
