// The IDX format (MNIST, Fashion-MNIST): magic 0x000008DD (unsigned bytes, DD
// dimensions), DD big-endian extents, then the data.
#include <cstdio>
#include <optional>
#include <span>
#include <stdexcept>

#include "data/array_dataset.h"
#include "data/file_bytes.h"
#include "data/file_signature.h"
#include "data/sources.h"

namespace trainer::data {
namespace {

struct IdxArray {
  Shape shape;
  std::vector<std::uint8_t> bytes;  // whole file; data starts at `offset`
  std::size_t offset = 0;
};

// The extents of the IDX header at the start of `bytes` (checked: magic,
// element type), or nullopt when `bytes` ends inside it; `complete`: `bytes`
// is the whole file, so ending inside the header is an error.
std::optional<Shape> idx_header(const std::string& path, std::span<const std::uint8_t> bytes,
                                bool complete) {
  if (bytes.size() < 4) {
    if (!complete) return std::nullopt;
    throw std::runtime_error("IDX file '" + path +
                             "' is truncated: " + std::to_string(bytes.size()) +
                             " bytes, the 4-byte magic number is incomplete");
  }
  const std::uint32_t magic = read_be32(bytes, 0);
  const std::uint32_t type = (magic >> 8) & 0xFF;
  const std::uint32_t dims = magic & 0xFF;
  if ((magic >> 16) != 0 || dims == 0 || dims > 8) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%08X", magic);
    throw std::runtime_error("'" + path + "' is not an IDX file: magic number " + hex +
                             " at byte 0 (expected 0x00000801 for labels or 0x00000803 "
                             "for images)" +
                             other_format_note(bytes, "idx"));
  }
  if (type != 0x08) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", type);
    throw std::runtime_error("IDX file '" + path + "': element type " + hex +
                             " is not supported (only 0x08, unsigned bytes)");
  }
  const std::size_t header = 4 + 4 * std::size_t{dims};
  if (bytes.size() < header) {
    if (!complete) return std::nullopt;
    throw std::runtime_error("IDX file '" + path + "' is truncated at byte offset " +
                             std::to_string(bytes.size()) + ": the header needs " +
                             std::to_string(header) + " bytes");
  }
  Shape shape;
  for (std::uint32_t d = 0; d < dims; ++d) shape.push_back(read_be32(bytes, 4 + 4 * d));
  return shape;
}

// The file size the IDX header at the start of `bytes` declares (SIZE_MAX
// when more than can be counted), or nullopt when `bytes` ends inside it.
std::optional<std::size_t> idx_declared_size(const std::string& path,
                                             std::span<const std::uint8_t> bytes) {
  const std::optional<Shape> shape = idx_header(path, bytes, false);
  if (!shape) return std::nullopt;
  const std::size_t header = 4 + 4 * shape->size();
  const std::optional<std::size_t> count = element_count_within(*shape, SIZE_MAX - header);
  return count ? header + *count : SIZE_MAX;
}

IdxArray read_idx(const std::string& path) {
  IdxArray a;
  a.bytes = read_file_bytes(path, [&path](std::span<const std::uint8_t> prefix) {
    return idx_declared_size(path, prefix);
  });
  a.shape = *idx_header(path, a.bytes, true);
  const std::size_t header = 4 + 4 * a.shape.size();
  a.offset = header;
  const std::optional<std::size_t> data_bytes =
      element_count_within(a.shape, a.bytes.size() - header);
  if (!data_bytes) {
    throw std::runtime_error("IDX file '" + path + "' is truncated at byte offset " +
                             std::to_string(a.bytes.size()) + ": shape " + to_string(a.shape) +
                             " (extents at byte offsets 4 to " + std::to_string(header - 1) +
                             ") needs " + bytes_needed(a.shape, 1, header));
  }
  const std::size_t expected = *data_bytes;
  // IDX has no padding: bytes after the data mean a wrong extent (data read
  // misaligned) or a damaged file.
  if (a.bytes.size() > header + expected) {
    throw std::runtime_error(
        "IDX file '" + path + "' has " + std::to_string(a.bytes.size() - header - expected) +
        " bytes after the data, from byte offset " + std::to_string(header + expected) +
        ": shape " + to_string(a.shape) + " needs exactly " + std::to_string(header + expected) +
        " bytes (a wrong extent at byte offsets 4 to " + std::to_string(header - 1) + "?)");
  }
  return a;
}

}  // namespace

std::shared_ptr<Dataset> open_idx(const std::string& images, const std::string& labels,
                                  std::int64_t classes) {
  IdxArray image_array = read_idx(images);
  IdxArray label_array = read_idx(labels);
  if (image_array.shape.size() < 2) {
    throw std::runtime_error("IDX images '" + images + "' have shape " +
                             to_string(image_array.shape) + ", expected [N, H, W] or [N, ...]");
  }
  if (label_array.shape.size() != 1) {
    throw std::runtime_error("IDX labels '" + labels + "' have shape " +
                             to_string(label_array.shape) + ", expected [N]");
  }
  if (image_array.shape[0] != label_array.shape[0]) {
    throw std::runtime_error("IDX images '" + images + "' hold " +
                             std::to_string(image_array.shape[0]) + " samples but labels '" +
                             labels + "' hold " + std::to_string(label_array.shape[0]));
  }
  ArrayData data;
  data.sample_shape.assign(image_array.shape.begin() + 1, image_array.shape.end());
  if (data.sample_shape.size() == 2) data.sample_shape.insert(data.sample_shape.begin(), 1);
  const auto first = image_array.bytes.begin() + static_cast<std::ptrdiff_t>(image_array.offset);
  data.samples =
      std::vector<std::uint8_t>(first, first + image_array.shape[0] * numel(data.sample_shape));
  image_array.bytes = {};
  const std::uint8_t* label_bytes = label_array.bytes.data() + label_array.offset;
  data.labels.assign(label_bytes, label_bytes + label_array.shape[0]);
  data.label_origin = [labels, offset = label_array.offset](std::int64_t sample) {
    return "sample " + std::to_string(sample) + " of IDX labels '" + labels + "' (byte offset " +
           std::to_string(offset + static_cast<std::size_t>(sample)) + ")";
  };
  data.num_classes = classes;
  data.description = "IDX images '" + images + "' with labels '" + labels + "'";
  return std::make_shared<ArrayDataset>(std::move(data));
}

}  // namespace trainer::data
