// dropout: inverted dropout with a mask drawn from the per-step seed, identity in eval.
#include "ops/defs/def_helpers.h"
#include "ops/defs/families.h"

namespace trainer::defs {

void register_dropout(OpRegistry& registry) {
  OpDef d;
  d.name = "dropout";
  d.doc = "Zeroes each value with probability p and scales the rest by 1/(1-p); identity in eval.";
  d.attrs = {field("p", FieldType::number, "Probability of zeroing a value, 0 <= p < 1.")
                 .def("0.5")
                 .at_least(0)
                 .at_most(0.999999)};
  d.signature = [](const std::vector<Shape>& in, const Attrs& a) {
    const double p = a.get_number("p");
    if (p < 0 || p >= 1) throw ShapeError("dropout p must be in [0, 1), got " + std::to_string(p));
    OpSignature s;
    s.output = in.at(0);
    s.forward_flops = flops_of(in.at(0), 2);
    return s;
  };
  d.inplace_ok = true;
  d.stochastic = true;
  d.formats = FormatRule::same_layout;
  registry.add(std::move(d));
}

}  // namespace trainer::defs
