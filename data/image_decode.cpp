// PNG through libpng, JPEG through libjpeg, each with a setjmp error handler
// confined to one function without C++ objects of its own. Both give the
// stored samples as PIL's loader does (no colour management). Then the
// separable bilinear resize, antialiased when shrinking.
#include "data/image_decode.h"

#include <cstdio>  // before jpeglib.h, which uses FILE

#include <jerror.h>  // JWRN_JPEG_EOF
#include <jpeglib.h>
#include <png.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string_view>

#include "data/file_bytes.h"

namespace trainer::data {
namespace {

// The most bytes deflate makes of one (zlib's bound: 258-byte matches coded
// in 2 bits, about 1032:1).
constexpr std::uint64_t kMaxDeflateRatio = 1032;

// The message for an image of more than kMaxImagePixels (width, height, limit).
constexpr const char* kTooLarge =
    "%s gives %llu x %llu pixels, more than the %lld-pixel limit (a corrupt size field?)";

// What to do about an image the decoders reject.
constexpr const char* kReencode =
    "the file is damaged or uses a form this reader does not support: re-encode it as an 8-bit "
    "RGB or grayscale PNG or JPEG, or remove it from the folder";

// "cannot decode <kind> image '<path>' while <stage>: the decoder reports "<detail>"; <advice>".
[[noreturn]] void decode_failed(const std::string& kind, const std::string& path,
                                const std::string& stage, const std::string& detail,
                                const std::string& advice = kReencode) {
  throw std::runtime_error("cannot decode " + kind + " image '" + path + "' while " + stage +
                           ": the decoder reports \"" + detail + "\"; " + advice);
}

// libpng's state for one decode: where the bytes are, and why it failed.
struct PngRead {
  const std::uint8_t* data = nullptr;
  std::size_t size = 0, at = 0;
  std::jmp_buf jump;
  char message[200] = {};
  const char* stage = "reading its header chunks";
};

void png_fail(png_structp png, png_const_charp message) {
  auto* read = static_cast<PngRead*>(png_get_error_ptr(png));
  std::snprintf(read->message, sizeof read->message, "%s", message);
  std::longjmp(read->jump, 1);
}

void png_ignore_warning(png_structp, png_const_charp) {}

void png_read_bytes(png_structp png, png_bytep out, png_size_t count) {
  auto* read = static_cast<PngRead*>(png_get_io_ptr(png));
  if (count > read->size - read->at) png_error(png, "the file ends before the image does");
  std::memcpy(out, read->data + read->at, count);
  read->at += count;
}

// The stored samples as 8-bit grey or RGB, as PIL's convert() gives them:
// 16-bit samples keep their high byte, alpha is dropped (not composited), and
// gAMA / cHRM / iCCP / sRGB chunks are ignored (no colour conversion); colour
// to grey is done by the caller. Plain C-style: no object with a destructor
// lives in this frame, so a longjmp out of libpng skips nothing. Returns false
// with `read->message` filled, or with it empty when the image is too large.
bool decode_png_into(PngRead* read, bool grey, std::vector<std::uint8_t>* pixels, long* height,
                     long* width, bool* colour) {
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, read, png_fail, png_ignore_warning);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    std::snprintf(read->message, sizeof read->message, "out of memory");
    return false;
  }
  if (setjmp(read->jump)) {
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  png_set_read_fn(png, read, png_read_bytes);
  png_read_info(png, info);
  *width = static_cast<long>(png_get_image_width(png, info));
  *height = static_cast<long>(png_get_image_height(png, info));
  if (std::uint64_t(*width) * std::uint64_t(*height) > std::uint64_t{kMaxImagePixels}) {
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  // Deflate packs at most 1032 bytes into one: a size field that asks for
  // more than the file could hold is damaged, refused before the pixels are
  // allocated (a 68-byte file would otherwise ask for gigabytes).
  const std::uint64_t stored =
      std::uint64_t(*height) * (std::uint64_t{png_get_rowbytes(png, info)} + 1);
  if (stored > std::uint64_t{kMaxDeflateRatio} * read->size) {
    std::snprintf(read->message, sizeof read->message,
                  "the IHDR chunk at byte offset 8 gives %ld x %ld pixels, %llu bytes of image "
                  "data, more than the file's %llu bytes can hold even compressed %llu times",
                  *width, *height, static_cast<unsigned long long>(stored),
                  static_cast<unsigned long long>(read->size),
                  static_cast<unsigned long long>(kMaxDeflateRatio));
    read->stage = nullptr;  // a size the file cannot hold
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  const int color_type = png_get_color_type(png, info);
  *colour = (color_type & PNG_COLOR_MASK_COLOR) != 0;
  png_set_strip_16(png);
  png_set_strip_alpha(png);
  png_set_packing(png);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY) png_set_expand_gray_1_2_4_to_8(png);
  if (!*colour && !grey) png_set_gray_to_rgb(png);
  const int passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const std::size_t stride = png_get_rowbytes(png, info);
  read->stage = "decoding its pixel data";
  pixels->resize(stride * static_cast<std::size_t>(*height));
  for (int pass = 0; pass < passes; ++pass)
    for (long y = 0; y < *height; ++y)
      png_read_row(png, pixels->data() + stride * static_cast<std::size_t>(y), nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

// RGB to grey with the ITU-R 601 weights on the stored values, rounded, as
// PIL's convert("L") does (on a colour JPEG too: libjpeg's grayscale output
// is the stored luma plane, up to 23 levels away from it).
std::vector<std::uint8_t> rgb_to_grey(const std::vector<std::uint8_t>& rgb) {
  std::vector<std::uint8_t> grey(rgb.size() / 3);
  for (std::size_t i = 0; i < grey.size(); ++i) {
    const std::uint32_t r = rgb[3 * i], g = rgb[3 * i + 1], b = rgb[3 * i + 2];
    grey[i] = static_cast<std::uint8_t>((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16);
  }
  return grey;
}

Image decode_png(const std::string& path, const std::vector<std::uint8_t>& bytes,
                 std::int64_t channels) {
  PngRead read;
  read.data = bytes.data();
  read.size = bytes.size();
  Image out;
  long height = 0, width = 0;
  bool colour = false;
  if (!decode_png_into(&read, channels == 1, &out.pixels, &height, &width, &colour)) {
    if (read.stage == nullptr)
      throw std::runtime_error("cannot decode PNG image '" + path + "': " + read.message +
                               ": a damaged size field, or a file cut short; copy it again, or "
                               "remove it");
    if (read.message[0] == '\0') {
      char message[200];
      std::snprintf(message, sizeof message, kTooLarge, "the IHDR chunk at byte offset 8",
                    static_cast<unsigned long long>(width), static_cast<unsigned long long>(height),
                    static_cast<long long>(kMaxImagePixels));
      throw std::runtime_error("cannot decode PNG image '" + path + "': " + message);
    }
    decode_failed("PNG", path, read.stage, read.message);
  }
  if (channels == 1 && colour) out.pixels = rgb_to_grey(out.pixels);
  out.height = height;
  out.width = width;
  out.channels = channels;
  return out;
}

struct JpegError {
  jpeg_error_mgr manager;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  int code = 0;                              // libjpeg's message code
  const char* stage = "reading its header";  // what was being done, for the error
  J_COLOR_SPACE color_space = JCS_UNKNOWN;   // the file's, once the header is read
};

void jpeg_fail(j_common_ptr info) {
  auto* error = reinterpret_cast<JpegError*>(info->err);
  info->err->format_message(info, error->message);
  error->code = info->err->msg_code;
  std::longjmp(error->jump, 1);
}

// Warnings are dropped (the data decides, not stderr), except the end of the
// data before the end of the image, at the file's end or at a marker (a cut
// file closed again): libjpeg would fill the rest with grey.
void jpeg_warn(j_common_ptr info, int level) {
  if (level < 0 && (info->err->msg_code == JWRN_JPEG_EOF || info->err->msg_code == JWRN_HIT_MARKER))
    info->err->error_exit(info);
}

// Plain C-style decoding: no object with a destructor lives in this frame, so
// the longjmp out of libjpeg skips nothing. A colour image is decoded as RGB
// (`colour` set) even for one channel: the caller makes it grey. Returns false
// with `error` filled.
bool decode_jpeg_into(const std::uint8_t* data, std::size_t size, int channels,
                      std::vector<std::uint8_t>* pixels, long* height, long* width, bool* colour,
                      JpegError* error) {
  jpeg_decompress_struct info;
  info.err = jpeg_std_error(&error->manager);
  error->manager.error_exit = jpeg_fail;
  error->manager.emit_message = jpeg_warn;
  if (setjmp(error->jump)) {
    jpeg_destroy_decompress(&info);
    return false;
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, data, static_cast<unsigned long>(size));
  jpeg_read_header(&info, TRUE);
  error->color_space = info.jpeg_color_space;
  if (std::uint64_t{info.image_width} * info.image_height > std::uint64_t{kMaxImagePixels}) {
    std::snprintf(error->message, sizeof error->message, kTooLarge, "the frame header (SOF)",
                  static_cast<unsigned long long>(info.image_width),
                  static_cast<unsigned long long>(info.image_height),
                  static_cast<long long>(kMaxImagePixels));
    jpeg_destroy_decompress(&info);
    return false;
  }
  // Huffman coding spends at least a bit on every block's DC coefficient: a
  // frame header asking for more blocks than the file has bits is damaged,
  // refused before libjpeg allocates for it. (Arithmetic coding can spend
  // less: not checked.)
  std::uint64_t blocks = 0;
  for (int c = 0; c < info.num_components; ++c)
    blocks += std::uint64_t{info.comp_info[c].width_in_blocks} * info.comp_info[c].height_in_blocks;
  if (!info.arith_code && blocks > 8 * std::uint64_t{size}) {
    std::snprintf(error->message, sizeof error->message,
                  "the frame header (SOF) gives %u x %u pixels, %llu blocks of 8 x 8, more than "
                  "the file's %llu bytes can code (a bit a block at least)",
                  info.image_width, info.image_height, static_cast<unsigned long long>(blocks),
                  static_cast<unsigned long long>(size));
    error->stage = nullptr;  // a size the file cannot hold
    jpeg_destroy_decompress(&info);
    return false;
  }
  *colour = info.jpeg_color_space != JCS_GRAYSCALE;
  const bool grey = channels == 1 && !*colour;
  info.out_color_space = grey ? JCS_GRAYSCALE : JCS_RGB;
  const std::size_t components = grey ? 1 : 3;
  error->stage = "starting to decode it";
  jpeg_start_decompress(&info);
  error->stage = "decoding its scan data";
  *height = static_cast<long>(info.output_height);
  *width = static_cast<long>(info.output_width);
  const std::size_t stride = static_cast<std::size_t>(info.output_width) * components;
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
  bool colour = false;
  if (!decode_jpeg_into(bytes.data(), bytes.size(), static_cast<int>(channels), &out.pixels,
                        &height, &width, &colour, &error)) {
    if (error.stage == nullptr)
      throw std::runtime_error("cannot decode JPEG image '" + path + "': " + error.message +
                               ": a damaged size field, or a file cut short; copy it again, or "
                               "remove it");
    if (error.color_space == JCS_CMYK || error.color_space == JCS_YCCK) {
      decode_failed("JPEG", path, error.stage, error.message,
                    "it is a CMYK JPEG, and only grayscale and RGB JPEGs are read: re-encode it "
                    "as an RGB or grayscale JPEG or PNG");
    }
    if (error.code == JWRN_HIT_MARKER)
      decode_failed("JPEG", path, error.stage, error.message,
                    "its scan data stops before the end of the image, at a marker: the file was "
                    "cut short (and closed again) or damaged; copy it again or remove it from "
                    "the folder");
    if (error.code == JWRN_JPEG_EOF) {
      decode_failed("JPEG", path, error.stage, error.message,
                    "the data ends at byte offset " + std::to_string(bytes.size()) +
                        " before the end of the image: the file was cut short; copy it again "
                        "or remove it from the folder");
    }
    decode_failed("JPEG", path, error.stage, error.message);
  }
  if (channels == 1 && colour) out.pixels = rgb_to_grey(out.pixels);
  out.height = height;
  out.width = width;
  out.channels = channels;
  return out;
}

// The input pixels one output pixel of a resize takes along one axis, and
// their weights: input pixel `first + k` weighs `weights[k]`.
struct AxisTaps {
  std::int64_t first = 0;
  std::vector<double> weights;
};

// Bilinear resampling of `in` pixels to `out` along one axis: output pixel i
// is centred at input coordinate (i + 0.5) * in / out, and input pixel j (its
// centre at j + 0.5) weighs 1 - |j + 0.5 - centre| / support, or 0 when that is
// negative, with the weights normalised to sum 1. The support is 1 when
// enlarging (plain bilinear interpolation, edges clamped) and the scale in /
// out when shrinking, so that every input pixel counts (antialiasing), as
// PIL's bilinear resize does.
std::vector<AxisTaps> resize_taps(std::int64_t in, std::int64_t out) {
  const double scale = double(in) / double(out);
  const double support = std::max(scale, 1.0);
  std::vector<AxisTaps> taps(static_cast<std::size_t>(out));
  for (std::int64_t i = 0; i < out; ++i) {
    const double centre = (double(i) + 0.5) * scale;
    const auto first = std::max<std::int64_t>(0, std::int64_t(std::floor(centre - support - 0.5)));
    const auto last =
        std::min<std::int64_t>(in - 1, std::int64_t(std::ceil(centre + support - 0.5)));
    AxisTaps& t = taps[static_cast<std::size_t>(i)];
    t.first = first;
    double total = 0;
    for (std::int64_t j = first; j <= last; ++j) {
      const double w = std::max(0.0, 1.0 - std::abs((double(j) + 0.5 - centre) / support));
      t.weights.push_back(w);
      total += w;
    }
    for (double& w : t.weights) w /= total;  // > 0: the pixel under the centre weighs >= 1/2
  }
  return taps;
}

// What a file that is neither PNG nor JPEG holds, told by its first bytes
// (another image format, a web page saved in its place, unknown bytes), and
// what to do about it.
std::string not_png_or_jpeg(const std::vector<std::uint8_t>& bytes) {
  const auto starts_with = [&](std::string_view magic, std::size_t at = 0) {
    return bytes.size() >= at + magic.size() &&
           std::memcmp(bytes.data() + at, magic.data(), magic.size()) == 0;
  };
  const char* format =
      starts_with("GIF87a") || starts_with("GIF89a")  ? "a GIF"
      : starts_with("BM")                             ? "a BMP"
      : starts_with("RIFF") && starts_with("WEBP", 8) ? "a WebP"
      : starts_with(std::string_view("II*\0", 4)) || starts_with(std::string_view("MM\0*", 4))
          ? "a TIFF"
      : starts_with("ftyp", 4) &&
              (starts_with("hei", 8) || starts_with("hev", 8) || starts_with("mif1", 8) ||
               starts_with("msf1", 8) || starts_with("avi", 8))
          ? "an HEIF or AVIF"
          : nullptr;
  if (format)
    return std::string(format) +
           " image, not a PNG or JPEG one: only PNG and JPEG images are read; convert it to PNG, "
           "or remove it";
  if (starts_with("ftyp", 4))
    return "an MP4, MOV or other ISO media file (a video?), not an image: remove it";
  // Text (after a UTF-8 byte order mark, if any): an SVG, a web page or XML,
  // or other text.
  const std::size_t bom = starts_with("\xEF\xBB\xBF") ? 3 : 0;
  const std::size_t looked_at = std::min<std::size_t>(bytes.size(), bom + 512);
  // No control byte but white space (UTF-8's bytes above 0x7F pass).
  const auto texty = [](std::uint8_t b) {
    return (b >= 0x20 && b != 0x7F) || b == '\t' || b == '\n' || b == '\r' || b == '\f';
  };
  std::size_t text = bom;
  while (text < looked_at && texty(bytes[text])) ++text;
  if (text == looked_at) {
    const std::string_view head(reinterpret_cast<const char*>(bytes.data()) + bom, text - bom);
    if (head.find("<svg") != std::string_view::npos)
      return "an SVG (vector) image, not a PNG or JPEG one: only PNG and JPEG images are read; "
             "convert it to PNG (rsvg-convert FILE -o IMAGE.png), or remove it";
    const std::size_t first = head.find_first_not_of(" \t\r\n");
    if (first != std::string_view::npos && head[first] == '<')
      return "an HTML or XML text (a web page saved in the image's place?), not an image: copy "
             "or download it again, or remove it";
    return "a text file, not an image: copy or download it again, or remove it";
  }
  char hex[8];
  std::string shown;
  for (std::size_t i = 0; i < bytes.size() && i < 8; ++i) {
    std::snprintf(hex, sizeof hex, "%s%02X", i ? " " : "", bytes[i]);
    shown += hex;
  }
  return "neither a PNG nor a JPEG file (its first bytes are " + shown +
         "): only PNG and JPEG images are read; convert it to PNG, or remove it";
}

}  // namespace

Image decode_image(const std::string& path, std::int64_t channels) {
  const std::vector<std::uint8_t> bytes = read_raw_file_bytes(path);
  static const std::uint8_t png_magic[] = {0x89, 'P', 'N', 'G'};
  if (bytes.size() >= 4 && std::memcmp(bytes.data(), png_magic, 4) == 0) {
    return decode_png(path, bytes, channels);
  }
  if (bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) {
    return decode_jpeg(path, bytes, channels);
  }
  if (bytes.size() >= 2 && bytes[0] == 0x1F && bytes[1] == 0x8B)
    throw std::runtime_error("cannot decode image '" + path +
                             "': a gzip-compressed file, not a PNG or JPEG one: decompress it "
                             "(gunzip -c FILE > IMAGE)");
  if (bytes.empty())
    throw std::runtime_error("cannot decode image '" + path +
                             "': the file is empty (0 bytes), as an interrupted copy or download "
                             "leaves it: copy it again, or remove it");
  throw std::runtime_error("cannot decode image '" + path + "': " + not_png_or_jpeg(bytes));
}

void resize_to_chw(const Image& image, std::int64_t height, std::int64_t width, float* out) {
  const std::int64_t channels = image.channels;
  const std::vector<AxisTaps> across = resize_taps(image.width, width);
  const std::vector<AxisTaps> down = resize_taps(image.height, height);
  // Along each row first: [image.height, width, channels].
  std::vector<float> rows(static_cast<std::size_t>(image.height * width * channels));
  for (std::int64_t y = 0; y < image.height; ++y) {
    const std::uint8_t* in = image.pixels.data() + y * image.width * channels;
    float* row = rows.data() + y * width * channels;
    for (std::int64_t x = 0; x < width; ++x) {
      const AxisTaps& taps = across[static_cast<std::size_t>(x)];
      for (std::int64_t c = 0; c < channels; ++c) {
        double sum = 0;
        for (std::size_t k = 0; k < taps.weights.size(); ++k)
          sum += taps.weights[k] * in[(taps.first + std::int64_t(k)) * channels + c];
        row[x * channels + c] = static_cast<float>(sum);
      }
    }
  }
  // Then down the columns, into [channels, height, width].
  for (std::int64_t y = 0; y < height; ++y) {
    const AxisTaps& taps = down[static_cast<std::size_t>(y)];
    for (std::int64_t x = 0; x < width; ++x) {
      for (std::int64_t c = 0; c < channels; ++c) {
        double sum = 0;
        for (std::size_t k = 0; k < taps.weights.size(); ++k)
          sum +=
              taps.weights[k] * rows[static_cast<std::size_t>(
                                    ((taps.first + std::int64_t(k)) * width + x) * channels + c)];
        out[(c * height + y) * width + x] = static_cast<float>(sum);
      }
    }
  }
}

}  // namespace trainer::data
