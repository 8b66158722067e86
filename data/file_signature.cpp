// Recognising a data file's format by its first bytes (file_signature.h).
#include "data/file_signature.h"

#include <algorithm>
#include <cstring>

#include "data/utf8.h"

namespace trainer::data {
namespace {

bool starts_with(std::span<const std::uint8_t> head, const char* magic, std::size_t size) {
  return head.size() >= size && std::memcmp(head.data(), magic, size) == 0;
}

// IDX: two zero bytes, an element type (0x08 unsigned byte .. 0x0E double)
// and 1 to 8 dimensions.
bool is_idx(std::span<const std::uint8_t> head) {
  if (head.size() < 4 || head[0] != 0 || head[1] != 0) return false;
  const std::uint8_t type = head[2];
  const bool known_type = type == 0x08 || type == 0x09 || (type >= 0x0B && type <= 0x0E);
  return known_type && head[3] >= 1 && head[3] <= 8;
}

// Printable UTF-8 (tabs and line ends allowed) with a line end or a comma.
bool is_text(std::span<const std::uint8_t> head) {
  const std::span<const std::uint8_t> start = head.first(std::min<std::size_t>(head.size(), 512));
  if (start.empty()) return false;
  const std::string_view text(reinterpret_cast<const char*>(start.data()), start.size());
  // A character cut at the 512th byte is not a fault of the file.
  const std::size_t bad = invalid_utf8_at(text);
  if (bad != std::string_view::npos && bad + 4 < text.size()) return false;
  const bool control =
      std::any_of(text.begin(), text.begin() + std::min(bad, text.size()), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u < 0x20 && c != '\t' && c != '\n' && c != '\r';
      });
  return !control && text.find_first_of(",\n") != std::string_view::npos;
}

}  // namespace

std::optional<FileSignature> recognise_file(std::span<const std::uint8_t> head) {
  const std::string images =
      "read images with a source of type: image_folder (root: a folder of "
      "class folders)";
  if (starts_with(head, "\x93NUMPY", 6))
    return FileSignature{"an NPY array", "npy",
                         "read it with a source of type: npy (x: ..., y: ...)"};
  if (starts_with(head, "PK\x03\x04", 4))
    return FileSignature{"a zip archive (numpy.savez's .npz, or an Excel .xlsx?)", "",
                         "save each array with numpy.save (type: npy), or the table as CSV "
                         "text (type: csv)"};
  if (starts_with(head, "\x89PNG\r\n\x1a\n", 8))
    return FileSignature{"a PNG image", "image_folder", images};
  if (starts_with(head, "\xFF\xD8\xFF", 3))
    return FileSignature{"a JPEG image", "image_folder", images};
  if (is_idx(head))
    return FileSignature{"an IDX file", "idx",
                         "read it with a source of type: idx (images: ..., labels: ...)"};
  if (is_text(head))
    return FileSignature{"text", "csv", "read it with a source of type: csv (path: ...)"};
  return std::nullopt;
}

std::string other_format_note(std::span<const std::uint8_t> head, const std::string& own) {
  const auto found = recognise_file(head);
  if (!found || found->source == own) return "";
  return " (it is " + found->what + ": " + found->advice + ")";
}

}  // namespace trainer::data
