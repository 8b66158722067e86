// What a path names when it is not the plain file a reader expects. Opening
// a FIFO blocks until a writer comes, and a device may never end: readers of
// data files and of the run's own files (checkpoints, records, sweep state)
// ask first.
#pragma once

#include <filesystem>
#include <string>

namespace trainer::data {

// What kind of file `status` is, when it is not a regular one: "a
// directory", "a FIFO (named pipe)", "a character device" ...
std::string file_kind(const std::filesystem::file_status& status);

// "" when `path` is a regular file (through links) or names nothing; else
// what it is (file_kind), "a link that leads nowhere it can follow (a loop)",
// or "something that cannot be looked at: <why>".
std::string not_a_regular_file(const std::string& path);

}  // namespace trainer::data
