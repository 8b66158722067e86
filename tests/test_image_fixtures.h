// PNG and JPEG encoders for the data tests' image fixtures (in memory; write
// them with write_bytes from test_data_fixtures.h), and a small image folder
// with damaged images where asked.
#pragma once

#include <catch2/catch.hpp>

#include <cstdio>  // before jpeglib.h, which uses FILE
#include <cstdlib>
#include <cstring>

#include <jpeglib.h>
#include <png.h>

#include <cstdint>
#include <string>
#include <vector>

#include "test_data_fixtures.h"

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

// A PNG in any of libpng's forms: `color_type` PNG_COLOR_TYPE_*, `bit_depth`
// 8 or 16 (16-bit samples big-endian in `rows`, as PNG stores them), `rows`
// the packed rows one after another, a gAMA chunk when `gamma` > 0, Adam7
// interlacing when `interlaced`.
inline std::vector<std::uint8_t> png_stored_bytes(int width, int height, int color_type,
                                                  int bit_depth,
                                                  const std::vector<std::uint8_t>& rows,
                                                  double gamma = 0, bool interlaced = false) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  std::vector<std::uint8_t> out;
  png_set_write_fn(
      png, &out,
      [](png_structp p, png_bytep data, png_size_t n) {
        auto* bytes = static_cast<std::vector<std::uint8_t>*>(png_get_io_ptr(p));
        bytes->insert(bytes->end(), data, data + n);
      },
      nullptr);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height),
               bit_depth, color_type, interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (gamma > 0) png_set_gAMA(png, info, gamma);
  png_write_info(png, info);
  const int passes = png_set_interlace_handling(png);
  const std::size_t stride = rows.size() / static_cast<std::size_t>(height);
  for (int pass = 0; pass < passes; ++pass)
    for (int y = 0; y < height; ++y)
      png_write_row(png, rows.data() + stride * static_cast<std::size_t>(y));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
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

// root/<a|b>/<k>.png: `per_class` 3x3 RGB images in each of two classes;
// the images listed in `damaged` ("a/2.png") are cut to half their bytes.
inline void write_image_folder(const std::string& root, int per_class,
                               const std::vector<std::string>& damaged = {}) {
  const std::vector<std::uint8_t> pixels(27, 100);
  const std::vector<std::uint8_t> good = png_bytes(3, 3, 3, pixels);
  for (const std::string cls : {"a", "b"}) {
    for (int k = 0; k < per_class; ++k) {
      const std::string name = cls + "/" + std::to_string(k) + ".png";
      std::vector<std::uint8_t> bytes = good;
      for (const auto& d : damaged)
        if (d == name) bytes.resize(bytes.size() / 2);
      write_bytes(root + "/" + name, bytes);
    }
  }
}

// A config of a linear layer over the image folder `root` (write_image_folder's
// 3x3 images of two classes), then `rest` (a train: section, ...).
inline std::string linear_on_image_folder(const std::string& root, const std::string& rest) {
  return "model:\n  layers:\n    - {type: flatten}\n    - {type: linear, out_features: 2}\n"
         "data:\n  train: {type: image_folder, root: " +
         root + ", size: [3, 3]}\n" + rest;
}

// root/<name>/<k>.png: `count` 3x3 RGB images of one class, image k of brightness
// `value` + k % 7 (classes of well-apart values are easily told apart).
inline void write_image_class(const std::string& root, const std::string& name, int value,
                              int count) {
  for (int k = 0; k < count; ++k) {
    const std::vector<std::uint8_t> pixels(27, static_cast<std::uint8_t>(value + k % 7));
    write_bytes(root + "/" + name + "/" + std::to_string(k) + ".png", png_bytes(3, 3, 3, pixels));
  }
}

}  // namespace trainer::data::testing
