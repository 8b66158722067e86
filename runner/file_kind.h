// What a path names when it is not the plain file a reader expects. Opening
// a FIFO blocks until a writer comes, and a device may never end: readers of
// the run's own files (checkpoints, records, sweep state) ask first.
#pragma once

#include <string>

namespace trainer {

// "" when `path` is a regular file (through links) or names nothing; else
// what it is: "a directory", "a FIFO", "a socket", "a device", "a link that
// leads nowhere it can follow" (a loop), "something that cannot be looked at: <why>".
std::string not_a_regular_file(const std::string& path);

}  // namespace trainer
