// Small helpers shared by the op definitions: attribute builders used by many
// ops, shape checks that throw ShapeError with a readable message, and the
// output-size arithmetic of windowed ops (convolution, pooling).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ops/field.h"
#include "ops/op.h"

namespace trainer::defs {

// The largest kernel, stride, padding or dilation of a convolution or a
// pooling window: far beyond any image, and within what the libraries'
// 32-bit descriptors take.
constexpr double kMaxWindowExtent = 65536;

// The initializer names every ParamDecl::init may take.
const std::vector<std::string>& initializer_names();

// An enumeration attribute choosing an initializer.
FieldSpec init_field(const std::string& name, const std::string& default_init,
                     const std::string& doc);

// A two-entry window attribute (kernel, stride, padding, dilation) given as one
// integer or a list of one or two; throws ShapeError when the list is longer.
std::pair<std::int64_t, std::int64_t> hw_attr(const Attrs& attrs, const std::string& op,
                                              const std::string& name);

// Throws ShapeError unless `shape` has `rank` dimensions; `what` says what the op needs,
// e.g. "input [N, C, H, W]"; `hint` tells how to fix it.
void require_rank(const std::string& op, const Shape& shape, std::size_t rank,
                  const std::string& what, const std::string& hint = "");

// Throws unless `shape` is an image batch [N, C, H, W], for `op` (conv2d, the
// pools), with the reshape layer that gives a flat [N, C*H*W] or a
// one-channel [N, H, W] input its channel axis.
void require_image_batch(const std::string& op, const Shape& shape);

// Output extent of a window of `kernel` (dilated) sliding with `stride` over an
// input of `in` padded by `pad` on both sides; throws ShapeError when it is < 1.
std::int64_t window_out(const std::string& op, const char* axis, std::int64_t in,
                        std::int64_t kernel, std::int64_t stride, std::int64_t pad,
                        std::int64_t dilation);

double flops_of(const Shape& shape, double per_element);

}  // namespace trainer::defs
