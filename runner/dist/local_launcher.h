// The local launcher: `trainer run` with several ranks on this machine
// (`devices: cpu` with `devices.world_size: N`, or several GPUs) and no
// launcher around it re-executes itself as N ranks under OpenMPI's mpirun,
// like torchrun does with its workers; mpirun's exit code becomes ours and a
// rank that dies ends the others.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runner/commands.h"
#include "runner/config/config.h"

namespace trainer::dist {

// The ranks the config asks for on this machine.
int requested_ranks(const config::Config& config);

// The mpirun command line that starts `ranks` copies of `argv` (argv[0]: this executable).
std::vector<std::string> mpirun_command(int ranks, const std::vector<std::string>& argv,
                                        bool as_root);

// Nothing when this process should train itself (one rank, or already a rank
// of a job). Otherwise checks the batch split, then replaces this process by
// mpirun (it returns only by throwing: no mpirun on PATH, exec failure).
std::optional<int> launch_local_ranks(const config::Config& config);

}  // namespace trainer::dist
