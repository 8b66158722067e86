// What a path names when it is not a plain file (file_kind.h).
#include "data/file_kind.h"

namespace trainer::data {

std::string file_kind(const std::filesystem::file_status& status) {
  namespace fs = std::filesystem;
  switch (status.type()) {
    case fs::file_type::directory:
      return "a directory";
    case fs::file_type::fifo:
      return "a FIFO (named pipe)";
    case fs::file_type::character:
      return "a character device";
    case fs::file_type::block:
      return "a block device";
    case fs::file_type::socket:
      return "a socket";
    default:
      return "not a file";
  }
}

std::string not_a_regular_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (status.type() == fs::file_type::regular || status.type() == fs::file_type::not_found)
    return "";
  if (status.type() == fs::file_type::none || status.type() == fs::file_type::unknown) {
    if (ec == std::errc::too_many_symbolic_link_levels)
      return "a link that leads nowhere it can follow (a loop)";
    return "something that cannot be looked at: " + ec.message();
  }
  return file_kind(status);
}

}  // namespace trainer::data
