// Pooling: maxpool2d, avgpool2d (padding left out of the average unless
// count_include_pad) and global_avgpool.
#include "ops/defs/def_helpers.h"
#include "ops/defs/families.h"

namespace trainer::defs {
namespace {

OpDef window_pool(const std::string& name, const std::string& doc) {
  OpDef d;
  d.name = name;
  d.doc = doc;
  d.attrs = {
      field("kernel", FieldType::int_list, "Window size: k or [kh, kw].")
          .req()
          .at_least(1)
          .at_most(kMaxWindowExtent)
          .items(1, 2),
      field("stride", FieldType::int_list, "Stride: s or [sh, sw]; 0 means equal to the kernel.")
          .def("0")
          .at_least(0)
          .at_most(kMaxWindowExtent)
          .items(1, 2),
      field("padding", FieldType::int_list,
            "Implicit padding on each side: p or [ph, pw], at most half the kernel.")
          .def("0")
          .at_least(0)
          .at_most(kMaxWindowExtent)
          .items(1, 2),
  };
  d.signature = [name](const std::vector<Shape>& in, const Attrs& a) {
    const Shape& x = in.at(0);
    require_image_batch(name, x);
    const auto [kh, kw] = hw_attr(a, name, "kernel");
    auto [sh, sw] = hw_attr(a, name, "stride");
    const auto [ph, pw] = hw_attr(a, name, "padding");
    if (sh == 0) sh = kh;
    if (sw == 0) sw = kw;
    if (2 * ph > kh || 2 * pw > kw)
      throw ShapeError(name + " padding must be at most half the kernel, got padding [" +
                       std::to_string(ph) + ", " + std::to_string(pw) + "] for kernel [" +
                       std::to_string(kh) + ", " + std::to_string(kw) + "]");
    OpSignature s;
    s.output = {x[0], x[1], window_out(name, "height", x[2], kh, sh, ph, 1),
                window_out(name, "width", x[3], kw, sw, pw, 1)};
    s.forward_flops = flops_of(s.output, static_cast<double>(kh * kw));
    return s;
  };
  d.formats = FormatRule::per_argument;
  return d;
}

}  // namespace

void register_pool(OpRegistry& registry) {
  registry.add(window_pool(
      "maxpool2d", "Max over each window; the backward routes the gradient to the argmax."));
  OpDef avg = window_pool(
      "avgpool2d",
      "Mean over each window; padded positions are not counted unless count_include_pad.");
  avg.attrs.push_back(
      field("count_include_pad", FieldType::boolean,
            "Divide by the whole window (kernel height x width), padded positions included, as "
            "PyTorch's AvgPool2d does by default; false: by the input positions it covers.")
          .def("false"));
  registry.add(std::move(avg));

  OpDef g;
  g.name = "global_avgpool";
  g.doc = "Mean over H and W: [N, C, H, W] -> [N, C].";
  g.signature = [](const std::vector<Shape>& in, const Attrs&) {
    const Shape& x = in.at(0);
    require_image_batch("global_avgpool", x);
    OpSignature s;
    s.output = {x[0], x[1]};
    s.forward_flops = flops_of(x, 1);
    return s;
  };
  g.formats = FormatRule::per_argument;
  registry.add(std::move(g));
}

}  // namespace trainer::defs
