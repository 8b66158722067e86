// Image folders: root/<class name>/<image>, classes in sorted order; images
// are listed at open time and decoded on the loader threads when read.
#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/image_decode.h"
#include "data/sources.h"

namespace trainer::data {
namespace {

bool is_image(const std::filesystem::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

// The entries of `dir` (`what`: "image folder", "class folder"), with our own
// error for one that cannot be listed (no permission, too many open files).
std::vector<std::filesystem::directory_entry> list_folder(const std::filesystem::path& dir,
                                                          const std::string& what) {
  namespace fs = std::filesystem;
  std::vector<fs::directory_entry> entries;
  std::error_code ec;
  const auto fail = [&] {
    throw std::runtime_error("cannot list the " + what + " '" + dir.string() +
                             "': " + ec.message() +
                             "; make it readable by the user running the trainer, or move it out "
                             "of the image folder");
  };
  fs::directory_iterator it(dir, ec);
  if (ec) fail();
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) fail();
    entries.push_back(*it);
  }
  if (ec) fail();
  return entries;
}

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

 private:
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
    class_names.push_back(class_dirs[c].filename().string());
    std::vector<std::string> images;
    for (const auto& entry : list_folder(class_dirs[c], "class folder")) {
      if (entry.is_regular_file(ec) && is_image(entry.path()))
        images.push_back(entry.path().string());
    }
    if (images.empty()) {
      throw std::runtime_error("image folder class '" + class_dirs[c].string() +
                               "' holds no .png, .jpg or .jpeg images");
    }
    std::sort(images.begin(), images.end());
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
