// Image folders: root/<class name>/.../<image>, classes in sorted order;
// images (at any depth in their class folder) are listed at open time and
// decoded on the loader threads when read.
#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/content_digest.h"
#include "data/image_decode.h"
#include "data/image_listing.h"
#include "data/sources.h"
#include "data/utf8.h"

namespace trainer::data {
namespace {

class ImageFolderDataset final : public Dataset {
 public:
  ImageFolderDataset(std::string root, std::vector<std::string> files,
                     std::vector<std::int64_t> labels, std::vector<std::string> class_names,
                     Shape shape)
      : root_(std::move(root)),
        files_(std::move(files)),
        labels_(std::move(labels)),
        class_names_(std::move(class_names)),
        classes_(static_cast<std::int64_t>(class_names_.size())),
        shape_(std::move(shape)) {}
  std::int64_t size() const override { return static_cast<std::int64_t>(files_.size()); }
  Shape sample_shape() const override { return shape_; }
  std::int64_t num_classes() const override { return classes_; }
  void read(std::int64_t index, float* sample, std::int64_t* label, float*) const override {
    if (index < 0 || index >= size()) {
      throw std::out_of_range(describe() + ": sample index " + std::to_string(index) +
                              " outside [0, " + std::to_string(size()) + ")");
    }
    const Image image = decode_image(files_[static_cast<std::size_t>(index)], shape_[0]);
    resize_to_chw(image, shape_[1], shape_[2], sample);
    if (label) *label = labels_[static_cast<std::size_t>(index)];
  }
  std::string describe() const override { return "image folder '" + root_ + "'"; }
  std::int64_t max_label() const override { return classes_ - 1; }
  std::vector<std::string> class_names() const override { return class_names_; }
  // Of the listing: each image's path below the root, size in bytes and
  // class (the pixels are not read); computed once, when first asked.
  std::uint64_t content_digest() const override {
    return digest_.get([this] {
      ContentDigest digest;
      for (const std::string& name : class_names_) digest.add(name);
      for (std::size_t i = 0; i < files_.size(); ++i) {
        // The path below the root however the root was written ("imgs",
        // "imgs/"): the listing spells every file as root + the rest.
        std::string_view below(files_[i]);
        if (below.starts_with(root_)) below.remove_prefix(root_.size());
        while (below.starts_with('/')) below.remove_prefix(1);
        digest.add(below);
        const std::string& file = files_[i];
        std::error_code ec;
        const std::uintmax_t bytes = std::filesystem::file_size(file, ec);
        // One that cannot be read now is reported when it is read.
        digest.add(ec ? ~std::uint64_t{0} : static_cast<std::uint64_t>(bytes));
        digest.add(static_cast<std::uint64_t>(labels_[i]));
      }
      return digest.value();
    });
  }

 private:
  CachedDigest digest_;
  std::string root_;
  std::vector<std::string> files_;
  std::vector<std::int64_t> labels_;
  std::vector<std::string> class_names_;
  std::int64_t classes_;
  Shape shape_;
};

}  // namespace

std::shared_ptr<Dataset> open_image_folder(const std::string& root, std::int64_t height,
                                           std::int64_t width, std::int64_t channels) {
  namespace fs = std::filesystem;
  if (channels != 1 && channels != 3) {
    throw SourceFieldError("channels", "an image folder gives 1 (grey) or 3 (RGB) channels, not " +
                                           std::to_string(channels));
  }
  if (height < 1 || width < 1) {
    throw SourceFieldError("size", "an image folder's size must be positive");
  }
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    if (ec == std::errc::too_many_symbolic_link_levels)
      throw std::runtime_error("image folder '" + root + "': " + ec.message() +
                               ": a symbolic link on that path leads back to itself; point it at "
                               "the folder");
    // A folder that cannot be reached (one above it without permission to
    // enter) is not a missing one.
    if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)
      throw std::runtime_error("image folder '" + root + "': " + ec.message() +
                               ": make it and the folders above it readable by the user running "
                               "the trainer");
    throw std::runtime_error("image folder '" + root + "' does not exist or is not a directory");
  }
  std::vector<fs::path> class_dirs;
  for (const auto& entry : list_folder(root, "image folder")) {
    if (entry.is_directory(ec)) class_dirs.push_back(entry.path());
  }
  std::sort(class_dirs.begin(), class_dirs.end());
  if (class_dirs.empty()) {
    throw std::runtime_error("image folder '" + root +
                             "' has no class sub-folders (expected root/<class>/<image>)");
  }
  std::vector<std::string> files, class_names;
  std::vector<std::int64_t> labels;
  for (std::size_t c = 0; c < class_dirs.size(); ++c) {
    // A folder named in another encoding keeps its bytes as \xNN: the class
    // names go into JSON records, which hold UTF-8 only.
    class_names.push_back(with_invalid_utf8_escaped(class_dirs[c].filename().string()));
    // Two folders whose names escape alike ('caf\xE9' written out, and in
    // Latin-1) would be one class to an evaluation folder matched by name.
    for (std::size_t earlier = 0; earlier < c; ++earlier)
      if (class_names[earlier] == class_names.back())
        throw std::runtime_error("image folder '" + root + "': class folders '" +
                                 class_dirs[earlier].filename().string() + "' and '" +
                                 class_dirs[c].filename().string() + "' give one class name, '" +
                                 class_names.back() +
                                 "', once bytes that are not UTF-8 are written as \\xNN: "
                                 "rename one");
    std::vector<std::string> images = list_class_images(class_dirs[c]);
    if (images.empty()) {
      throw std::runtime_error("image folder class '" + class_dirs[c].string() +
                               "' holds no .png, .jpg or .jpeg images (at any depth)");
    }
    for (auto& f : images) {
      files.push_back(std::move(f));
      labels.push_back(static_cast<std::int64_t>(c));
    }
  }
  return std::make_shared<ImageFolderDataset>(root, std::move(files), std::move(labels),
                                              std::move(class_names),
                                              Shape{channels, height, width});
}

}  // namespace trainer::data
