// Normalization layers: batchnorm (batch statistics in training, running
// statistics in eval; `sync` takes them over all data-parallel ranks) and
// layernorm (over the last dimension).
#include "ops/defs/def_helpers.h"
#include "ops/defs/families.h"
#include "ops/epilogue.h"

namespace trainer::defs {
namespace {

OpDef batchnorm() {
  OpDef d;
  d.name = "batchnorm";
  d.doc = "Batch normalization over N (and H, W) per channel; running statistics for eval.";
  d.attrs = {
      field("momentum", FieldType::number,
            "running = (1 - momentum) * running + momentum * batch (unbiased variance).")
          .def("0.1")
          .at_least(0)
          .at_most(1),
      field("eps", FieldType::number, "Added to the variance before the square root.")
          .def("1e-5")
          .above(0)
          .in_float32(),
      field("sync", FieldType::boolean,
            "SyncBN: in training, the batch statistics (and the sums of the backward) are "
            "taken across all data-parallel ranks, over the micro-batch every rank runs at "
            "once (under train.accumulation each micro-batch is normalised apart, as without "
            "sync); the same as false on one rank.")
          .def("false"),
      field("activation", FieldType::enumeration,
            "Activation applied to the output in the same kernel: relu or none.")
          .def("none")
          .one_of({"none", "relu"}),
  };
  d.signature = [](const std::vector<Shape>& in, const Attrs& a) {
    const Shape& x = in.at(0);
    if (x.size() != 2 && x.size() != 4)
      throw ShapeError("batchnorm needs input [N, C] or [N, C, H, W], got " + to_string(x));
    const std::int64_t c = x[1];
    OpSignature s;
    s.output = x;
    s.params = {{"weight", {c}, "ones", true},
                {"bias", {c}, "zeros", true},
                {"running_mean", {c}, "zeros", false},
                {"running_var", {c}, "ones", false}};
    s.forward_flops = flops_of(x, epilogue_of(a) == Epilogue::relu ? 6 : 5);
    return s;
  };
  // relu differentiates from the output.
  d.backward_reads_rule = [](const Attrs& a) {
    return BackwardReads{true, epilogue_reads_output(epilogue_of(a))};
  };
  d.formats = FormatRule::per_argument;  // synchronised (`sync`): plain, see formats.cpp
  return d;
}

OpDef layernorm() {
  OpDef d;
  d.name = "layernorm";
  d.doc = "Layer normalization over the last dimension D, with a learned scale and shift [D].";
  d.attrs = {
      field("eps", FieldType::number, "Added to the variance before the square root.")
          .def("1e-5")
          .above(0)
          .in_float32(),
  };
  d.signature = [](const std::vector<Shape>& in, const Attrs&) {
    const Shape& x = in.at(0);
    if (x.size() < 2)
      throw ShapeError("layernorm needs input [N, ..., D] (at least 2-d), got " + to_string(x));
    const std::int64_t dim = x.back();
    OpSignature s;
    s.output = x;
    s.params = {{"weight", {dim}, "ones", true}, {"bias", {dim}, "zeros", true}};
    s.forward_flops = flops_of(x, 8);
    return s;
  };
  d.backward_reads.inputs = true;
  return d;
}

}  // namespace

void register_norm(OpRegistry& registry) {
  registry.add(batchnorm());
  registry.add(layernorm());
}

}  // namespace trainer::defs
