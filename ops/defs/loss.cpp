// Losses: softmax cross-entropy (label smoothing, ignore_index) and mean squared
// error. Both reduce to a scalar [1], averaged over the valid rows.
#include "ops/defs/def_helpers.h"
#include "ops/defs/families.h"

namespace trainer::defs {
namespace {

OpDef cross_entropy() {
  OpDef d;
  d.name = "cross_entropy";
  d.doc = "Softmax cross-entropy of logits [N, K] against int64 labels [N], mean over rows.";
  d.attrs = {
      field("label_smoothing", FieldType::number,
            "Mix the one-hot target with the uniform distribution: (1 - s) * onehot + s / K. "
            "Evaluations report this same loss, smoothed (eval.loss).")
          .def("0")
          .at_least(0)
          .at_most(1),
      field("ignore_index", FieldType::integer,
            "Rows with this label add nothing to the loss nor to the row count.")
          .def("-100"),
  };
  d.min_inputs = 2;
  d.max_inputs = 2;
  d.signature = [](const std::vector<Shape>& in, const Attrs&) {
    const Shape& logits = in.at(0);
    const Shape& labels = in.at(1);
    require_rank("cross_entropy", logits, 2, "logits [N, classes]",
                 logits.size() > 2 ? "add a flatten layer before the last linear layer" : "");
    if (labels.size() != 1 || labels[0] != logits[0])
      throw ShapeError("cross_entropy needs labels [N] = [" + std::to_string(logits[0]) +
                       "] for logits " + to_string(logits) + ", got " + to_string(labels));
    OpSignature s;
    s.output = {1};
    s.forward_flops = flops_of(logits, 4);
    return s;
  };
  d.backward_reads.inputs = true;
  d.non_differentiable_inputs = {1};
  d.is_loss = true;
  return d;
}

OpDef mse() {
  OpDef d;
  d.name = "mse";
  d.doc = "Mean squared error between prediction and float target of the same shape.";
  d.min_inputs = 2;
  d.max_inputs = 2;
  d.signature = [](const std::vector<Shape>& in, const Attrs&) {
    if (in.at(0) != in.at(1))
      throw ShapeError("mse needs prediction and target of the same shape, got " +
                       to_string(in[0]) + " and " + to_string(in[1]));
    if (in[0].empty()) throw ShapeError("mse needs inputs [N, ...] with a batch dimension, got []");
    OpSignature s;
    s.output = {1};
    s.forward_flops = flops_of(in[0], 3);
    return s;
  };
  d.backward_reads.inputs = true;
  d.non_differentiable_inputs = {1};
  d.is_loss = true;
  return d;
}

}  // namespace

void register_loss(OpRegistry& registry) {
  registry.add(cross_entropy());
  registry.add(mse());
}

}  // namespace trainer::defs
