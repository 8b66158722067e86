// Decoding PNG (libpng) and JPEG (libjpeg-turbo) files into 8-bit pixels, and
// an antialiased bilinear resize into the float32 [C, H, W] layout of a sample.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainer::data {

struct Image {
  std::int64_t height = 0, width = 0, channels = 0;
  std::vector<std::uint8_t> pixels;  // [height, width, channels]
};

// The most pixels an image may declare (16384 x 16384): a corrupt size field
// in a header must not make the reader allocate gigabytes.
constexpr std::int64_t kMaxImagePixels = std::int64_t{1} << 28;

// Decodes `path` (PNG or JPEG, told apart by content) to `channels` 1 (grey) or
// 3 (RGB). Throws std::runtime_error naming the path when it cannot: corrupt
// or truncated data, or more than kMaxImagePixels pixels.
Image decode_image(const std::string& path, std::int64_t channels);

// Bilinear resize of `image` into `out`: [channels, height, width] floats with
// values 0..255, unrounded. Pixel centres are aligned and edges clamped; when
// shrinking, the triangle filter widens by the scale so that every input pixel
// counts (antialiased), as PIL's bilinear resize (torchvision's Resize on PIL
// images) does. Rows are resampled first, then columns.
void resize_to_chw(const Image& image, std::int64_t height, std::int64_t width, float* out);

}  // namespace trainer::data
