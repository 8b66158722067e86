// The local launcher: `trainer run` with several ranks on this machine
// (`devices: cpu` with `devices.world_size: N`, or several GPUs) and no
// launcher around it starts itself again as N ranks under OpenMPI's mpirun,
// like torchrun does with its workers, and waits. mpirun's exit code becomes
// ours (a rank that dies ends the others), except that a SIGINT / SIGTERM
// (Ctrl-C included: mpirun has a process group of its own), sent on to the
// ranks, which stop after a step and a checkpoint, makes it 128 + signal
// (130 / 143) as for one process. mpirun gets SIGTERM if this process dies.
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
// of a job). Otherwise checks the batch split, runs the job under mpirun and
// returns its exit code (throws when mpirun is not on PATH; 127 when it
// cannot be executed).
std::optional<int> launch_local_ranks(const config::Config& config);

}  // namespace trainer::dist
