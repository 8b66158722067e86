// Shared helpers of the op definitions (see def_helpers.h).
#include "ops/defs/def_helpers.h"

namespace trainer::defs {

const std::vector<std::string>& initializer_names() {
  static const std::vector<std::string> names = {
      "kaiming_normal", "kaiming_uniform", "xavier_normal", "xavier_uniform",
      "uniform_fan_in", "zeros",           "ones"};
  return names;
}

FieldSpec init_field(const std::string& name, const std::string& default_init,
                     const std::string& doc) {
  return field(name, FieldType::enumeration, doc).def(default_init).one_of(initializer_names());
}

std::pair<std::int64_t, std::int64_t> hw_attr(const Attrs& attrs, const std::string& op,
                                              const std::string& name) {
  const auto v = attrs.get_ints(name, 2);
  if (v.size() != 2)
    throw ShapeError(op + " " + name + " needs one integer or a list of two [height, width], got " +
                     std::to_string(v.size()) + " entries");
  return {v[0], v[1]};
}

void require_rank(const std::string& op, const Shape& shape, std::size_t rank,
                  const std::string& what, const std::string& hint) {
  if (shape.size() == rank) return;
  std::string msg = op + " needs " + what + ", got " + to_string(shape);
  if (!hint.empty()) msg += ": " + hint;
  throw ShapeError(msg);
}

void require_image_batch(const std::string& op, const Shape& shape) {
  std::string hint;
  if (shape.size() == 2)
    hint = "add a reshape layer (shape: [C, H, W]) before it";
  else if (shape.size() == 3)
    hint = "one-channel images need their channel axis: add a reshape layer (shape: [1, " +
           std::to_string(shape[1]) + ", " + std::to_string(shape[2]) + "]) before it";
  require_rank(op, shape, 4, "input [N, C, H, W]", hint);
}

std::int64_t window_out(const std::string& op, const char* axis, std::int64_t in,
                        std::int64_t kernel, std::int64_t stride, std::int64_t pad,
                        std::int64_t dilation) {
  const std::int64_t span = dilation * (kernel - 1) + 1;
  const std::int64_t padded = in + 2 * pad;
  if (padded < span)
    throw ShapeError(op + " window of " + std::to_string(span) + " does not fit the " + axis + " " +
                     std::to_string(in) + " (padding " + std::to_string(pad) +
                     "): the input is too small for this kernel");
  return (padded - span) / stride + 1;
}

double flops_of(const Shape& shape, double per_element) {
  return static_cast<double>(numel(shape)) * per_element;
}

}  // namespace trainer::defs
