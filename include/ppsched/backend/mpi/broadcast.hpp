// Sends a small value from one process to every process of a communicator, with a bound: the
// way a job started by mpirun shares what one process made (an NCCL unique id for the GPUs,
// a seed). MPI_Ibcast polled under a HostWait, so a process that died or never calls it ends
// the wait with an error instead of hanging the job.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>
#include <type_traits>

#include "ppsched/backend/mpi/session.hpp"
#include "ppsched/error.hpp"
#include "ppsched/runtime/backend.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace mpi {

// Collective over `comm`: on return every process holds `root`'s `value`. Throws
// ppsched::error when the wait's deadline passes or its stop is requested first.
template <class T>
  requires std::is_trivially_copyable_v<T>
void broadcast_from(int root, T& value, MPI_Comm comm, const HostWait& wait = HostWait{}) {
  MPI_Request request = MPI_REQUEST_NULL;
  int rank = -1;
  {
    const std::lock_guard<std::mutex> lock(detail::mpi::call_mutex());
    MPI_Comm_rank(comm, &rank);
    detail::mpi::check(MPI_Ibcast(&value, static_cast<int>(sizeof(T)), MPI_BYTE, root, comm, &request), "MPI_Ibcast",
                       detail::concat("rank ", rank));
  }
  detail::mpi::Backoff backoff;
  for (;;) {
    {
      const std::lock_guard<std::mutex> lock(detail::mpi::call_mutex());
      int done = 0;
      detail::mpi::check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test", detail::concat("rank ", rank));
      if (done != 0) return;
    }
    const bool stopped = wait.stop.stop_requested();
    if (stopped || std::chrono::steady_clock::now() >= wait.deadline) {
      detail::fail({detail::concat("rank ", rank),
            detail::concat("the broadcast from rank ", root, stopped ? " was stopped" : " did not complete in time"),
            "broadcast_from", "Every process of the communicator must call it; see the launcher's output"});
    }
    backoff.pause();
  }
}

}  // namespace mpi
}  // namespace ppsched
