// MPI for a process of a pipeline: initialise it once, with the thread support the backend
// needs, and finalise it at the end. Every MPI call ppsched makes goes through one
// process-wide lock, so MPI_THREAD_SERIALIZED is enough (the stream that moves transfers and
// the host thread that aborts them are different threads).
#pragma once

#include "ppsched/config.hpp"

// <mpi.h> (C bindings only) and the standard headers come with the internals.
#include "ppsched/backend/mpi/detail/session.hpp"
#include "ppsched/error.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace mpi {

// MPI_Init_thread on construction (unless MPI is already initialised: then it is the
// caller's, and left to the caller to finalise), MPI_Finalize on destruction.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized == 0) {
      detail::mpi::check(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided_), "MPI_Init_thread", "");
      owned_ = true;
    } else {
      MPI_Query_thread(&provided_);
    }
    if (provided_ < MPI_THREAD_SERIALIZED) {
      detail::fail({"MPI", detail::concat("the library gives thread level ", provided_, ", below MPI_THREAD_SERIALIZED"),
            "MPI_Init_thread", "Use an MPI built with thread support (Debian's Open MPI has it)"});
    }
    // Errors come back as codes that ppsched turns into its errors, instead of ending the job.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  MpiSession(MpiSession&&) = delete;
  MpiSession& operator=(MpiSession&&) = delete;
  // Skips MPI_Finalize once a process of the job is known to be gone (detail::mpi::job_lost):
  // it would wait for that process forever. The process then exits without finalising, which
  // the launcher reports (mpirun: "exiting improperly") and which ends the job under its
  // default policy.
  ~MpiSession() {
    if (!owned_) return;
    if (detail::mpi::job_lost().load()) {
      std::fflush(nullptr);
      return;
    }
    MPI_Finalize();
  }

  // Ends every process of the job (MPI_Abort), for a program that cannot go on: a process
  // died, so MPI_Finalize, which waits for every peer, would not return.
  [[noreturn]] static void abort_job(int exit_code) {
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::abort();  // MPI_Abort does not return; this keeps [[noreturn]] honest
  }

  [[nodiscard]] int thread_level() const noexcept { return provided_; }

 private:
  int provided_ = 0;
  bool owned_ = false;
};

}  // namespace mpi
}  // namespace ppsched
