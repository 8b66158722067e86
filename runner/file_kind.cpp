// What a path names when it is not a plain file (file_kind.h).
#include "runner/file_kind.h"

#include <filesystem>

namespace trainer {

std::string not_a_regular_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  switch (status.type()) {
    case fs::file_type::regular:
    case fs::file_type::not_found:
      return "";
    case fs::file_type::directory:
      return "a directory";
    case fs::file_type::fifo:
      return "a FIFO";
    case fs::file_type::socket:
      return "a socket";
    case fs::file_type::block:
    case fs::file_type::character:
      return "a device";
    default:
      if (ec == std::errc::too_many_symbolic_link_levels)
        return "a link that leads nowhere it can follow (a loop)";
      return ec ? "something that cannot be looked at: " + ec.message() : "not a regular file";
  }
}

}  // namespace trainer
