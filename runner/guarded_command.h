// Runs a subcommand, turning what it throws into a report on the console and
// an exit code: 2 for a configuration or usage error, 1 for any other
// failure (out of memory, a file, the system, the training). An error found
// after loading (the model's checks, the data) that points into one of
// `overrides` quotes it, as the loader's own errors do.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace trainer {

int run_guarded(const std::function<int()>& command, const std::vector<std::string>& overrides);

}  // namespace trainer
