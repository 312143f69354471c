// MPI for a process of a pipeline: initialise it once, with the thread support the backend
// needs, and finalise it at the end. Every MPI call ppsched makes goes through one
// process-wide lock, so MPI_THREAD_SERIALIZED is enough (the stream that moves transfers and
// the host thread that aborts them are different threads).
#pragma once

#include "ppsched/config.hpp"

// The C bindings only: Open MPI's deprecated C++ bindings warn under -Wextra.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <string>

#include "ppsched/error.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail::mpi {

// Serialises every MPI call ppsched makes in this process.
[[nodiscard]] inline std::mutex& call_mutex() {
  static std::mutex m;
  return m;
}

[[nodiscard]] inline std::string error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return concat("MPI error ", code);
  return std::string(text, static_cast<std::size_t>(length));
}

// How a thread waits between two polls of MPI: yields for the first polls (the answer is
// usually a transfer away), then sleeps, growing to a cap, so that a rank waiting for a peer's
// long compute does not take a core from it. The cap is the latency a transfer may gain when
// it lands while its receiver sleeps. Open MPI progresses only inside MPI calls, so there is
// no blocking wait to use instead.
class Backoff {
 public:
  void pause() {
    if (polls_ < yielding_polls) {
      ++polls_;
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(sleep_ * 2, max_sleep);
  }

  static constexpr int yielding_polls = 200;
  static constexpr std::chrono::microseconds max_sleep{200};

 private:
  int polls_ = 0;
  std::chrono::microseconds sleep_{10};
};

// Throws ppsched::error naming the call when an MPI call did not succeed (the communicators
// ppsched uses return errors instead of aborting the job: MPI_ERRORS_RETURN).
inline void check(int code, const char* call, const std::string& where) {
  if (code == MPI_SUCCESS) return;
  fail({"MPI", concat(call, " failed: ", error_text(code)), where,
        "A peer process may have exited; see the launcher's output (mpirun names the process)"});
}

}  // namespace detail::mpi

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
      fail({"MPI", detail::concat("the library gives thread level ", provided_, ", below MPI_THREAD_SERIALIZED"),
            "MPI_Init_thread", "Use an MPI built with thread support (Debian's Open MPI has it)"});
    }
    // Errors come back as codes that ppsched turns into its errors, instead of ending the job.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  MpiSession(MpiSession&&) = delete;
  MpiSession& operator=(MpiSession&&) = delete;
  ~MpiSession() {
    if (owned_) MPI_Finalize();
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

}  // namespace ppsched
