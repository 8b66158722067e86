// CIFAR-10 / CIFAR-100 binary batches: fixed-size records, label byte(s) then
// 3x32x32 pixel bytes (channel-major). Every file is read once into memory.
#include <stdexcept>

#include "data/array_dataset.h"
#include "data/file_bytes.h"
#include "data/sources.h"

namespace trainer::data {

std::shared_ptr<Dataset> open_cifar(const std::vector<std::string>& files, CifarVariant variant,
                                    bool fine_labels) {
  if (files.empty()) throw std::runtime_error("cifar source: `files` lists no batch files");
  if (variant == CifarVariant::cifar10 && !fine_labels) {
    throw SourceFieldError("label",
                           "CIFAR-10 has no coarse labels (label: coarse picks CIFAR-100's 20 "
                           "superclasses): remove label, or set variant: cifar100 for "
                           "CIFAR-100 batches");
  }
  constexpr std::size_t kPixels = 3 * 32 * 32;
  const std::size_t label_bytes = variant == CifarVariant::cifar100 ? 2 : 1;
  const std::size_t record = label_bytes + kPixels;
  const std::int64_t classes = variant == CifarVariant::cifar10 ? 10 : (fine_labels ? 100 : 20);
  const std::size_t label_offset = variant == CifarVariant::cifar100 && fine_labels ? 1 : 0;

  std::vector<std::uint8_t> pixels;
  ArrayData data;
  std::string names;
  for (const std::string& path : files) {
    const std::vector<std::uint8_t> bytes = read_file_bytes(path);
    const std::string kind = variant == CifarVariant::cifar10 ? "CIFAR-10" : "CIFAR-100";
    if (bytes.empty()) {
      throw std::runtime_error("CIFAR file '" + path + "' is empty (0 bytes), expected " + kind +
                               " records of " + std::to_string(record) +
                               " bytes each; copy or download the batch file again");
    }
    if (bytes.size() % record != 0) {
      throw std::runtime_error("CIFAR file '" + path + "' is truncated or not a " + kind +
                               " binary batch: " + std::to_string(bytes.size()) +
                               " bytes is not a multiple of the " + std::to_string(record) +
                               "-byte record; the last record breaks off at byte offset " +
                               std::to_string(bytes.size() / record * record));
    }
    for (std::size_t at = 0; at < bytes.size(); at += record) {
      const std::int64_t label = bytes[at + label_offset];
      if (label >= classes) {
        throw std::runtime_error("CIFAR file '" + path + "': label " + std::to_string(label) +
                                 " at byte offset " + std::to_string(at + label_offset) +
                                 " is outside [0, " + std::to_string(classes) +
                                 ") (wrong variant?)");
      }
      data.labels.push_back(label);
      pixels.insert(pixels.end(), bytes.begin() + static_cast<std::ptrdiff_t>(at + label_bytes),
                    bytes.begin() + static_cast<std::ptrdiff_t>(at + record));
    }
    names += (names.empty() ? "'" : ", '") + path + "'";
  }
  data.sample_shape = {3, 32, 32};
  data.samples = std::move(pixels);
  data.num_classes = classes;
  data.description = "CIFAR files " + names;
  return std::make_shared<ArrayDataset>(std::move(data));
}

}  // namespace trainer::data
