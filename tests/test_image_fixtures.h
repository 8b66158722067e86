// PNG and JPEG encoders for the data tests' image fixtures (in memory; write
// them with write_bytes from test_data_fixtures.h).
#pragma once

#include <catch2/catch.hpp>

#include <cstdio>  // before jpeglib.h, which uses FILE
#include <cstdlib>
#include <cstring>

#include <jpeglib.h>
#include <png.h>

#include <cstdint>
#include <vector>

namespace trainer::data::testing {

// `pixels`: [height, width, channels] with channels 1 (grey) or 3 (RGB).
inline std::vector<std::uint8_t> png_bytes(int width, int height, int channels,
                                           const std::vector<std::uint8_t>& pixels) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  REQUIRE(png_image_write_to_memory(&image, nullptr, &size, 0, pixels.data(), 0, nullptr));
  std::vector<std::uint8_t> out(size);
  REQUIRE(png_image_write_to_memory(&image, out.data(), &size, 0, pixels.data(), 0, nullptr));
  out.resize(size);
  return out;
}

// `pixels`: [height, width, components] in colour space `space`. Baseline,
// or progressive (several scans).
inline std::vector<std::uint8_t> encode_jpeg(int width, int height, int components,
                                             J_COLOR_SPACE space,
                                             const std::vector<std::uint8_t>& pixels, int quality,
                                             bool progressive) {
  jpeg_compress_struct info;
  jpeg_error_mgr err;
  info.err = jpeg_std_error(&err);
  jpeg_create_compress(&info);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&info, &buffer, &size);
  info.image_width = static_cast<JDIMENSION>(width);
  info.image_height = static_cast<JDIMENSION>(height);
  info.input_components = components;
  info.in_color_space = space;
  jpeg_set_defaults(&info);
  jpeg_set_quality(&info, quality, TRUE);
  if (progressive) jpeg_simple_progression(&info);
  jpeg_start_compress(&info, TRUE);
  while (info.next_scanline < info.image_height) {
    JSAMPROW row =
        const_cast<std::uint8_t*>(pixels.data()) + info.next_scanline * width * components;
    jpeg_write_scanlines(&info, &row, 1);
  }
  jpeg_finish_compress(&info);
  std::vector<std::uint8_t> out(buffer, buffer + size);
  jpeg_destroy_compress(&info);
  std::free(buffer);
  return out;
}

// `rgb`: [height, width, 3].
inline std::vector<std::uint8_t> jpeg_bytes(int width, int height,
                                            const std::vector<std::uint8_t>& rgb, int quality,
                                            bool progressive = false) {
  return encode_jpeg(width, height, 3, JCS_RGB, rgb, quality, progressive);
}

// A CMYK JPEG (as print workflows save them) of `width` x `height` pixels of
// one colour `cmyk` (4 values).
inline std::vector<std::uint8_t> cmyk_jpeg_bytes(int width, int height,
                                                 const std::vector<std::uint8_t>& cmyk) {
  std::vector<std::uint8_t> pixels;
  for (int i = 0; i < width * height; ++i) pixels.insert(pixels.end(), cmyk.begin(), cmyk.end());
  return encode_jpeg(width, height, 4, JCS_CMYK, pixels, 75, false);
}

}  // namespace trainer::data::testing
