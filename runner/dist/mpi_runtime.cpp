// MPI initialisation, finalisation and job abort.
#include "runner/dist/mpi_runtime.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>

namespace trainer::dist {
namespace {

bool abort_registered = false;
bool abort_at_exit = false;

void abort_if_failed() {
  if (abort_at_exit) MpiRuntime::abort_job(1);
}

}  // namespace

MpiRuntime::MpiRuntime() {
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
    throw std::runtime_error("MPI_Init_thread failed: this process cannot join the MPI job");
  if (!abort_registered) {
    std::atexit(abort_if_failed);
    abort_registered = true;
  }
}

MpiRuntime::~MpiRuntime() {
  if (std::uncaught_exceptions() > 0 || abort_at_exit) {
    abort_at_exit = true;  // the error is printed by the command line first
    return;
  }
  MPI_Finalize();
}

void MpiRuntime::end_job_at_exit() {
  abort_at_exit = true;
}

bool MpiRuntime::job_ending() {
  return abort_at_exit;
}

void MpiRuntime::abort_job(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace trainer::dist
