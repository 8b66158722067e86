// NcclCollective: the Collective of GPU ranks. Gradients are summed with NCCL
// on the rank's GPU, queued on its backend's compute stream (no device
// synchronisation; a watchdog thread ends the job when a reduction fails or
// outlasts `timeout_s`); host values, the barrier and the load-balance windows
// go through the MPI collective (which also carries the NCCL unique id). With
// one rank NCCL runs alone and no MPI is needed. Built only with CUDA
// (TRAINER_WITH_CUDA); elsewhere make_nccl_collective throws.
#pragma once

#include <memory>
#include <string>

#include "ops/collective.h"

namespace trainer::dist {

class MpiCollective;

// `mpi` null: a single rank (world 1). `device`: this rank's GPU index (its
// backend, cuda_backend(device), is the one whose stream the reductions join).
std::unique_ptr<Collective> make_nccl_collective(MpiCollective* mpi, int device, double timeout_s);

// "2.21.5", or empty in a build without NCCL.
std::string nccl_version();

}  // namespace trainer::dist
