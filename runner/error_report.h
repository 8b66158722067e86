// Error reports on the console (stderr): each line written whole, in one
// call, so that the lines of ranks failing together do not interleave (on a
// pipe, lines up to PIPE_BUF, 4096 bytes, are written at once); in
// one rank of a job of several each line starts with "[rank N] ", so the
// job's output says which rank wrote it (as its log lines do).
#pragma once

#include <string_view>

namespace trainer {

// Writes `report` ("error: ...\n    advice\n") to stderr, line by line.
// Nothing is allocated but the rank mark (left out when even that fails:
// out of memory).
void print_error_report(std::string_view report);

}  // namespace trainer
