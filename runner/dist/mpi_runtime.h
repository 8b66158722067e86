// MpiRuntime: MPI initialised for the lifetime of one object (a rank of a
// job started by mpirun or srun). If the run fails with an exception, MPI is
// left up and the job is aborted when the process exits (after the error was
// printed), so the other ranks end at once instead of waiting for this one.
#pragma once

namespace trainer::dist {

class MpiRuntime {
 public:
  MpiRuntime();   // MPI_Init_thread (funneled: only the training thread calls MPI)
  ~MpiRuntime();  // MPI_Finalize, or abort-at-exit when unwinding an exception
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  // Prints nothing; aborts every rank of the job with `code` (stdout/stderr flushed first).
  [[noreturn]] static void abort_job(int code);
  // At exit, abort the job (code 1) instead of finalising: this rank failed.
  static void end_job_at_exit();
  // Whether the job is to be aborted at exit (end_job_at_exit, or an error).
  static bool job_ending();
};

}  // namespace trainer::dist
