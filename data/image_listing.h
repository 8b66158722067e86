// Listing an image folder on disk: the entries of one folder, and the images
// of one class folder found at any depth below it, in a fixed order.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace trainer::data {

// The entries of `dir` (`what`: "image folder", "class folder"), unsorted.
// Throws std::runtime_error naming `dir` when it cannot be listed (no
// permission, too many open files).
std::vector<std::filesystem::directory_entry> list_folder(const std::filesystem::path& dir,
                                                          const std::string& what);

// The PNG and JPEG files (.png, .jpg, .jpeg, any case) in `class_dir` and in
// every folder below it (links to folders followed, each folder once), in the
// order torchvision's ImageFolder gives: folders by their path, and within one
// folder its files by name. Other files are ignored, except images of a format
// the decoder cannot read (.bmp, .gif, .webp, .tif ...): those throw
// std::runtime_error naming the first such file, how many there are, and what
// to do about them. So does a link to a folder of the image folder outside
// `class_dir`, or to a folder that holds it (other classes' images, labelled
// as this one's).
std::vector<std::string> list_class_images(const std::filesystem::path& class_dir);

}  // namespace trainer::data
