// What a data file's first bytes show it to be, so that a reader of one
// format given a file of another (an NPY array named as a CSV source, a CSV
// named as NPY) says which source reads it, rather than what it found wrong
// inside.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace trainer::data {

struct FileSignature {
  std::string what;    // "an NPY array", "a PNG image", "text"
  std::string source;  // the source type that reads it ("npy"); "" for none
  std::string advice;  // "read it with a source of type: npy (x: ..., y: ...)"
};

// The format `head` (a file's first bytes, decompressed) begins as: NPY, IDX,
// a ZIP archive (.npz, .xlsx), PNG, JPEG, or text (the first 512 bytes
// printable UTF-8 holding a line end or a comma); nullopt when none.
std::optional<FileSignature> recognise_file(std::span<const std::uint8_t> head);

// " (it is an NPY array: read it with a source of type: npy (x: ..., y: ...))"
// when `head` is recognised as a format that the source type `own` ("csv",
// "npy", "idx") does not read; "" otherwise.
std::string other_format_note(std::span<const std::uint8_t> head, const std::string& own);

}  // namespace trainer::data
