// PNG through libpng's simplified API; JPEG through libjpeg with a setjmp
// error handler confined to one function without C++ objects of its own.
#include "data/image_decode.h"

#include <cstdio>  // before jpeglib.h, which uses FILE

#include <jpeglib.h>
#include <png.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstring>
#include <stdexcept>

#include "data/file_bytes.h"

namespace trainer::data {
namespace {

Image decode_png(const std::string& path, const std::vector<std::uint8_t>& bytes,
                 std::int64_t channels) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size())) {
    throw std::runtime_error("cannot decode PNG image '" + path + "': " + image.message);
  }
  image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  Image out;
  out.height = image.height;
  out.width = image.width;
  out.channels = channels;
  out.pixels.resize(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, out.pixels.data(), 0, nullptr)) {
    const std::string message = image.message;
    png_image_free(&image);
    throw std::runtime_error("cannot decode PNG image '" + path + "': " + message);
  }
  return out;
}

struct JpegError {
  jpeg_error_mgr manager;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_fail(j_common_ptr info) {
  auto* error = reinterpret_cast<JpegError*>(info->err);
  info->err->format_message(info, error->message);
  std::longjmp(error->jump, 1);
}

// Plain C-style decoding: no object with a destructor lives in this frame, so
// the longjmp out of libjpeg skips nothing. Returns false with `error` filled.
bool decode_jpeg_into(const std::uint8_t* data, std::size_t size, int channels,
                      std::vector<std::uint8_t>* pixels, long* height, long* width,
                      JpegError* error) {
  jpeg_decompress_struct info;
  info.err = jpeg_std_error(&error->manager);
  error->manager.error_exit = jpeg_fail;
  error->manager.output_message = [](j_common_ptr) {};  // warnings: the data decides, not stderr
  if (setjmp(error->jump)) {
    jpeg_destroy_decompress(&info);
    return false;
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, data, static_cast<unsigned long>(size));
  jpeg_read_header(&info, TRUE);
  info.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&info);
  *height = static_cast<long>(info.output_height);
  *width = static_cast<long>(info.output_width);
  const std::size_t stride = static_cast<std::size_t>(info.output_width) * channels;
  pixels->resize(stride * info.output_height);
  while (info.output_scanline < info.output_height) {
    JSAMPROW row = pixels->data() + stride * info.output_scanline;
    jpeg_read_scanlines(&info, &row, 1);
  }
  jpeg_finish_decompress(&info);
  jpeg_destroy_decompress(&info);
  return true;
}

Image decode_jpeg(const std::string& path, const std::vector<std::uint8_t>& bytes,
                  std::int64_t channels) {
  Image out;
  JpegError error{};
  long height = 0, width = 0;
  if (!decode_jpeg_into(bytes.data(), bytes.size(), static_cast<int>(channels), &out.pixels,
                        &height, &width, &error)) {
    throw std::runtime_error("cannot decode JPEG image '" + path + "': " + error.message);
  }
  out.height = height;
  out.width = width;
  out.channels = channels;
  return out;
}

}  // namespace

Image decode_image(const std::string& path, std::int64_t channels) {
  const std::vector<std::uint8_t> bytes = read_file_bytes(path);
  static const std::uint8_t png_magic[] = {0x89, 'P', 'N', 'G'};
  if (bytes.size() >= 4 && std::memcmp(bytes.data(), png_magic, 4) == 0) {
    return decode_png(path, bytes, channels);
  }
  if (bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) {
    return decode_jpeg(path, bytes, channels);
  }
  throw std::runtime_error("cannot decode image '" + path +
                           "': neither a PNG nor a JPEG file (unknown magic bytes)");
}

void resize_to_chw(const Image& image, std::int64_t height, std::int64_t width, float* out) {
  const std::int64_t c_count = image.channels;
  const double sy = double(image.height) / double(height);
  const double sx = double(image.width) / double(width);
  for (std::int64_t y = 0; y < height; ++y) {
    const double fy = std::clamp((double(y) + 0.5) * sy - 0.5, 0.0, double(image.height - 1));
    const auto y0 = static_cast<std::int64_t>(fy);
    const std::int64_t y1 = std::min(y0 + 1, image.height - 1);
    const float wy = float(fy - double(y0));
    for (std::int64_t x = 0; x < width; ++x) {
      const double fx = std::clamp((double(x) + 0.5) * sx - 0.5, 0.0, double(image.width - 1));
      const auto x0 = static_cast<std::int64_t>(fx);
      const std::int64_t x1 = std::min(x0 + 1, image.width - 1);
      const float wx = float(fx - double(x0));
      for (std::int64_t c = 0; c < c_count; ++c) {
        auto px = [&](std::int64_t yy, std::int64_t xx) {
          return float(
              image.pixels[static_cast<std::size_t>((yy * image.width + xx) * c_count + c)]);
        };
        const float top = px(y0, x0) + (px(y0, x1) - px(y0, x0)) * wx;
        const float bottom = px(y1, x0) + (px(y1, x1) - px(y1, x0)) * wx;
        out[(c * height + y) * width + x] = top + (bottom - top) * wy;
      }
    }
  }
}

}  // namespace trainer::data
