// Layout and combination ops: flatten, reshape, add (element-wise sum of
// several inputs) and concat (along one axis).
#include "ops/defs/def_helpers.h"
#include "ops/defs/families.h"
#include "ops/epilogue.h"

namespace trainer::defs {
namespace {

OpDef flatten() {
  OpDef d;
  d.name = "flatten";
  d.doc = "[N, d1, d2, ...] -> [N, d1 * d2 * ...].";
  d.signature = [](const std::vector<Shape>& in, const Attrs&) {
    const Shape& x = in.at(0);
    if (x.empty()) throw ShapeError("flatten needs an input with a batch dimension, got []");
    OpSignature s;
    s.output = {x[0], x[0] == 0 ? 0 : numel(x) / x[0]};
    return s;
  };
  d.inplace_ok = true;
  d.formats = FormatRule::per_argument;
  return d;
}

OpDef reshape() {
  OpDef d;
  d.name = "reshape";
  d.doc = "[N, ...] -> [N, shape...]; the batch dimension is kept, one entry may be -1.";
  d.attrs = {field("shape", FieldType::int_list,
                   "The new shape without the batch dimension, e.g. [1, 28, 28]; one -1 is "
                   "inferred.")
                 .req()
                 .at_least(-1)};
  d.signature = [](const std::vector<Shape>& in, const Attrs& a) {
    const Shape& x = in.at(0);
    if (x.empty()) throw ShapeError("reshape needs an input with a batch dimension, got []");
    const std::int64_t per_sample = x[0] == 0 ? 0 : numel(x) / x[0];
    Shape target = a.get_ints("shape", 1);
    std::int64_t known = 1;
    int inferred = -1;
    for (std::size_t i = 0; i < target.size(); ++i) {
      if (target[i] == -1) {
        if (inferred >= 0) throw ShapeError("reshape shape may hold at most one -1");
        inferred = static_cast<int>(i);
      } else if (target[i] <= 0) {
        throw ShapeError("reshape shape entries must be positive or -1, got " + to_string(target));
      } else if (__builtin_mul_overflow(known, target[i], &known)) {
        throw ShapeError("reshape shape " + to_string(target) +
                         " holds more values per sample than can be counted");
      }
    }
    if (inferred >= 0) {
      if (known == 0 || per_sample % known != 0)
        throw ShapeError("reshape cannot infer the -1 in " + to_string(target) + " from input " +
                         to_string(x) + " (" + std::to_string(per_sample) + " values per sample)");
      target[static_cast<std::size_t>(inferred)] = per_sample / known;
    } else if (known != per_sample) {
      throw ShapeError("reshape to " + to_string(target) + " needs " + std::to_string(known) +
                       " values per sample, input " + to_string(x) + " has " +
                       std::to_string(per_sample));
    }
    OpSignature s;
    s.output = {x[0]};
    s.output.insert(s.output.end(), target.begin(), target.end());
    return s;
  };
  d.inplace_ok = true;
  return d;
}

OpDef add() {
  OpDef d;
  d.name = "add";
  d.doc = "Element-wise sum of two or more inputs of identical shape (residual connections).";
  d.min_inputs = 2;
  d.max_inputs = -1;
  d.attrs = {field("activation", FieldType::enumeration,
                   "Activation applied to the sum in the same kernel: relu or none.")
                 .def("none")
                 .one_of({"none", "relu"})};
  d.signature = [](const std::vector<Shape>& in, const Attrs& a) {
    for (std::size_t i = 1; i < in.size(); ++i)
      if (in[i] != in[0])
        throw ShapeError("add needs inputs of identical shape, got " + to_string(in[0]) + " and " +
                         to_string(in[i]) + " (input " + std::to_string(i + 1) + ")");
    OpSignature s;
    s.output = in.at(0);
    const bool relu = epilogue_of(a) == Epilogue::relu;
    s.forward_flops = flops_of(in.at(0), static_cast<double>(in.size() - (relu ? 0 : 1)));
    return s;
  };
  // relu differentiates from the output.
  d.backward_reads_rule = [](const Attrs& a) {
    return BackwardReads{false, epilogue_reads_output(epilogue_of(a))};
  };
  d.inplace_ok = true;
  d.formats = FormatRule::same_layout;
  return d;
}

OpDef concat() {
  OpDef d;
  d.name = "concat";
  d.doc = "Concatenation of two or more inputs along `axis` (not the batch axis).";
  d.min_inputs = 2;
  d.max_inputs = -1;
  d.attrs = {field("axis", FieldType::integer,
                   "Axis to join along; 1 is channels/features, negative counts from the end.")
                 .def("1")};
  d.signature = [](const std::vector<Shape>& in, const Attrs& a) {
    const Shape& first = in.at(0);
    const auto rank = static_cast<std::int64_t>(first.size());
    std::int64_t axis = a.get_int("axis");
    if (axis < 0) axis += rank;
    if (axis < 1 || axis >= rank)
      throw ShapeError("concat axis " + std::to_string(a.get_int("axis")) +
                       " is out of range for inputs " + to_string(first) + " (allowed: 1 .. " +
                       std::to_string(rank - 1) +
                       ", or negative from the end; the batch axis 0 cannot be joined)");
    Shape out = first;
    for (std::size_t i = 1; i < in.size(); ++i) {
      bool fits = in[i].size() == first.size();
      for (std::int64_t k = 0; fits && k < rank; ++k)
        if (k != axis && in[i][static_cast<std::size_t>(k)] != first[static_cast<std::size_t>(k)])
          fits = false;
      if (!fits)
        throw ShapeError("concat along axis " + std::to_string(axis) +
                         " needs inputs equal in every other dimension, got " + to_string(first) +
                         " and " + to_string(in[i]) + " (input " + std::to_string(i + 1) + ")");
      out[static_cast<std::size_t>(axis)] += in[i][static_cast<std::size_t>(axis)];
    }
    OpSignature s;
    s.output = out;
    return s;
  };
  return d;
}

}  // namespace

void register_shape_ops(OpRegistry& registry) {
  registry.add(flatten());
  registry.add(reshape());
  registry.add(add());
  registry.add(concat());
}

}  // namespace trainer::defs
