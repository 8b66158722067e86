// conv2d: 2-d convolution over NCHW input with stride, padding, dilation, groups and bias.
#include "ops/defs/def_helpers.h"
#include "ops/defs/families.h"

namespace trainer::defs {

void register_conv(OpRegistry& registry) {
  OpDef d;
  d.name = "conv2d";
  d.doc =
      "2-d convolution: input [N, C, H, W], weight [out, C/groups, kh, kw], output [N, out, Ho, "
      "Wo].";
  d.attrs = {
      field("out_channels", FieldType::integer, "Number of output channels.").req().at_least(1),
      field("kernel", FieldType::int_list, "Kernel size: k or [kh, kw].")
          .req()
          .at_least(1)
          .at_most(kMaxWindowExtent)
          .items(1, 2),
      field("stride", FieldType::int_list, "Stride: s or [sh, sw].")
          .def("1")
          .at_least(1)
          .at_most(kMaxWindowExtent)
          .items(1, 2),
      field("padding", FieldType::int_list, "Zero padding on each side: p or [ph, pw].")
          .def("0")
          .at_least(0)
          .at_most(kMaxWindowExtent)
          .items(1, 2),
      field("dilation", FieldType::int_list, "Dilation: d or [dh, dw].")
          .def("1")
          .at_least(1)
          .at_most(kMaxWindowExtent)
          .items(1, 2),
      field("groups", FieldType::integer, "Channel groups; C and out_channels must divide by it.")
          .def("1")
          .at_least(1),
      field("bias", FieldType::boolean, "Add a learned bias per output channel.").def("true"),
      init_field("init", "kaiming_uniform", "Initializer of the weight."),
      init_field("bias_init", "zeros", "Initializer of the bias."),
  };
  d.signature = [](const std::vector<Shape>& in, const Attrs& a) {
    const Shape& x = in.at(0);
    require_image_batch("conv2d", x);
    const auto [kh, kw] = hw_attr(a, "conv2d", "kernel");
    const auto [sh, sw] = hw_attr(a, "conv2d", "stride");
    const auto [ph, pw] = hw_attr(a, "conv2d", "padding");
    const auto [dh, dw] = hw_attr(a, "conv2d", "dilation");
    const std::int64_t out = a.get_int("out_channels");
    const std::int64_t groups = a.get_int("groups");
    const std::int64_t c = x[1];
    if (c % groups != 0 || out % groups != 0)
      throw ShapeError("conv2d groups (" + std::to_string(groups) +
                       ") must divide both the input channels (" + std::to_string(c) +
                       ") and out_channels (" + std::to_string(out) + ")");
    const std::int64_t ho = window_out("conv2d", "height", x[2], kh, sh, ph, dh);
    const std::int64_t wo = window_out("conv2d", "width", x[3], kw, sw, pw, dw);
    OpSignature s;
    s.output = {x[0], out, ho, wo};
    s.params.push_back({"weight", {out, c / groups, kh, kw}, a.get_string("init"), true});
    if (a.get_bool("bias")) s.params.push_back({"bias", {out}, a.get_string("bias_init"), true});
    s.forward_flops =
        2.0 * static_cast<double>(numel(s.output)) * static_cast<double>(c / groups * kh * kw);
    return s;
  };
  d.backward_reads.inputs = true;
  d.low_precision = true;
  d.formats = FormatRule::per_argument;
  registry.add(std::move(d));
}

}  // namespace trainer::defs
