// The walk of a class folder: every folder below it listed once, images kept,
// images of formats the decoder lacks refused, other files ignored.
#include "data/image_listing.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <stdexcept>

namespace trainer::data {
namespace {

namespace fs = std::filesystem;

std::string lower_extension(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext;
}

bool is_decoded_image(const std::string& ext) {
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

// The name of the image format an extension stands for, when decode_image
// cannot read it; nullptr for a decodable image or a file that is no image.
const char* undecoded_format(const std::string& ext) {
  struct Format {
    const char* ext;
    const char* name;
  };
  static constexpr Format formats[] = {
      {".bmp", "BMP"},   {".dib", "BMP"},       {".gif", "GIF"},       {".webp", "WebP"},
      {".tif", "TIFF"},  {".tiff", "TIFF"},     {".ppm", "PPM"},       {".pgm", "PGM"},
      {".pbm", "PBM"},   {".pnm", "PNM"},       {".heic", "HEIF"},     {".heif", "HEIF"},
      {".avif", "AVIF"}, {".jp2", "JPEG 2000"}, {".j2k", "JPEG 2000"}, {".jxl", "JPEG XL"},
      {".ico", "ICO"},   {".tga", "TGA"},
  };
  for (const Format& f : formats)
    if (ext == f.ext) return f.name;
  return nullptr;
}

// Whether `path` is `base` or lies below it (both canonical).
bool is_within(const fs::path& path, const fs::path& base) {
  return std::mismatch(base.begin(), base.end(), path.begin(), path.end()).first == base.end();
}

// Refuses a link to a folder that would put images of other classes, or this
// class's again, under this class: one that leads into the image folder but
// out of `class_dir`, or up to a folder that holds the class folder. A link
// to a folder elsewhere (a shared disk) is followed.
void check_folder_link(const fs::path& link, const fs::path& class_dir) {
  std::error_code ec;
  const fs::path target = fs::canonical(link, ec);
  if (ec) return;  // a broken link: not a folder, skipped like other non-images
  const fs::path class_canonical = fs::canonical(class_dir, ec);
  if (ec) return;
  // The image folder as given holds the class folder (which may itself be a
  // link to a folder elsewhere).
  const fs::path root = fs::canonical(class_dir.parent_path(), ec);
  if (ec) return;
  const bool leads_up = is_within(class_canonical, target);
  if (is_within(target, class_canonical) || !(leads_up || is_within(target, root))) return;
  const std::string class_name = class_dir.filename().string();
  throw std::runtime_error(
      "folder link '" + link.string() + "' leads to '" + target.string() + "', " +
      (leads_up ? "which holds its class folder '" + class_name +
                      "': the images there (other classes', and this class's again)"
                : "inside the image folder but outside its class folder '" + class_name +
                      "': the images there (not this class's)") +
      " would be labelled '" + class_name +
      "'; remove the link, or copy the images into the class folder");
}

// One folder of the walk: its path, and the names of its images.
struct FolderImages {
  std::string path;
  std::vector<std::string> names;
};

}  // namespace

std::vector<fs::directory_entry> list_folder(const fs::path& dir, const std::string& what) {
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

std::vector<std::string> list_class_images(const fs::path& class_dir) {
  std::vector<FolderImages> folders;
  std::vector<std::string> undecoded;  // paths
  std::set<fs::path> visited;          // canonical paths: a link back up is walked once
  std::vector<fs::path> pending = {class_dir};
  while (!pending.empty()) {
    const fs::path dir = pending.back();
    pending.pop_back();
    std::error_code ec;
    const fs::path canonical = fs::canonical(dir, ec);
    if (!visited.insert(ec ? dir : canonical).second) continue;
    FolderImages folder{dir.string(), {}};
    for (const auto& entry : list_folder(dir, dir == class_dir ? "class folder" : "folder")) {
      if (entry.is_directory(ec)) {
        if (entry.is_symlink(ec)) check_folder_link(entry.path(), class_dir);
        pending.push_back(entry.path());
      } else if (entry.is_regular_file(ec)) {
        const std::string ext = lower_extension(entry.path());
        if (is_decoded_image(ext))
          folder.names.push_back(entry.path().filename().string());
        else if (undecoded_format(ext))
          undecoded.push_back(entry.path().string());
      } else if (entry.is_symlink(ec) && !entry.exists(ec) &&
                 is_decoded_image(lower_extension(entry.path()))) {
        // A missing file on a share or mirror: not a smaller dataset.
        throw std::runtime_error("image '" + entry.path().string() +
                                 "' is a broken symbolic link to '" +
                                 fs::read_symlink(entry.path(), ec).string() +
                                 "': restore the file it points to, or remove the link");
      }
    }
    folders.push_back(std::move(folder));
  }
  if (!undecoded.empty()) {
    std::sort(undecoded.begin(), undecoded.end());
    const fs::path first = undecoded.front();
    throw std::runtime_error(
        "image folder class '" + class_dir.string() + "' holds " +
        std::to_string(undecoded.size()) +
        " image file(s) in a format this reader cannot decode, " + "the first '" + first.string() +
        "' (" + undecoded_format(lower_extension(first)) +
        "): only PNG (.png) and JPEG (.jpg, .jpeg) images are read; convert them to PNG or JPEG, "
        "or move them out of the image folder");
  }
  std::sort(folders.begin(), folders.end(),
            [](const FolderImages& a, const FolderImages& b) { return a.path < b.path; });
  std::vector<std::string> images;
  for (auto& folder : folders) {
    std::sort(folder.names.begin(), folder.names.end());
    for (const auto& name : folder.names) images.push_back((fs::path(folder.path) / name).string());
  }
  return images;
}

}  // namespace trainer::data
