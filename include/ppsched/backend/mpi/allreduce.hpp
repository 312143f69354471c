// The sum of a float vector over the processes of a communicator, the same bits on every
// process and on every run: the piece a data-parallel step needs to sum a stage's weight
// gradient over its replicas (CPU processes; on GPUs NCCL's all-reduce does it). Float
// addition is not associative and MPI_Allreduce does not fix its order, so this gathers every
// process's vector (MPI_Iallgather) and adds them in rank order, ((v0 + v1) + v2) + ...,
// on each process. It costs a buffer of (processes x n) floats and moves every vector to
// every process: meant for gradients of moderate size, where reproducibility matters more
// than the ring algorithm's bandwidth. Bounded like every wait of ppsched.
#pragma once

#include "ppsched/config.hpp"

#include <chrono>
#include <cstddef>
#include <limits>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "ppsched/backend/mpi/session.hpp"
#include "ppsched/error.hpp"
#include "ppsched/runtime/backend.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace mpi {

// Collective over `comm`: every process passes a vector of the same length and gets, in it,
// the sum over all processes in rank order. `scratch` is resized to (processes x n) floats
// and may be kept between calls so that a training loop allocates once. Throws
// ppsched::error when the wait's deadline passes or its stop is requested before every
// process has contributed (a process died or never called it), or when MPI fails. MPI cannot
// cancel a collective: after that error the gather is still pending on `values` and
// `scratch`, so keep both alive and end the job (MpiSession::abort_job) rather than go on.
inline void allreduce_sum_in_rank_order(std::span<float> values, MPI_Comm comm, std::vector<float>& scratch,
                                        const HostWait& wait = HostWait{}) {
  int rank = 0;
  int size = 1;
  {
    const std::lock_guard<std::mutex> lock(detail::mpi::call_mutex());
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
  }
  const std::string where = detail::concat("rank ", rank, ", allreduce_sum_in_rank_order");
  if (values.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    detail::fail({"allreduce_sum_in_rank_order", detail::concat(values.size(), " floats exceed MPI's int count"), where,
          "Reduce the vector in parts"});
  }
  const int n = static_cast<int>(values.size());
  scratch.resize(values.size() * static_cast<std::size_t>(size));
  MPI_Request request = MPI_REQUEST_NULL;
  {
    const std::lock_guard<std::mutex> lock(detail::mpi::call_mutex());
    detail::mpi::check(MPI_Iallgather(values.data(), n, MPI_FLOAT, scratch.data(), n, MPI_FLOAT, comm, &request),
                       "MPI_Iallgather", where);
  }
  detail::mpi::Backoff backoff;
  for (;;) {
    {
      const std::lock_guard<std::mutex> lock(detail::mpi::call_mutex());
      int done = 0;
      detail::mpi::check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test", where);
      if (done != 0) break;
    }
    const bool stopped = wait.stop.stop_requested();
    if (stopped || std::chrono::steady_clock::now() >= wait.deadline) {
      detail::fail({detail::concat("rank ", rank),
            detail::concat("the all-reduce over ", size, " processes ", stopped ? "was stopped" : "did not complete in time"),
            where, "Every process of the communicator must call it with a vector of the same length"});
    }
    backoff.pause();
  }
  for (std::size_t i = 0; i < values.size(); ++i) {
    float sum = scratch[i];
    for (int r = 1; r < size; ++r) sum += scratch[static_cast<std::size_t>(r) * values.size() + i];
    values[i] = sum;
  }
}

}  // namespace mpi
}  // namespace ppsched
