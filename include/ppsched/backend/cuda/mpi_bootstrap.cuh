// One process per GPU, started by mpirun (or srun): the NCCL communicator's unique id is made
// by rank 0 and sent to every process through MPI, for the first communicator and for each
// new one recover() builds after a failure. MPI only carries the id; the pipeline's transfers
// are NCCL's. Needs both <mpi.h> and NCCL: compile with nvcc and the MPI dependency.
#pragma once

#include "ppsched/config.hpp"

#include <cstdint>
#include <mutex>
#include <stop_token>
#include <utility>

#include "ppsched/backend/cuda/backend.cuh"
#include "ppsched/backend/cuda/nccl.hpp"
#include "ppsched/backend/mpi/broadcast.hpp"
#include "ppsched/backend/mpi/session.hpp"
#include "ppsched/error.hpp"
#include "ppsched/runtime/backend.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace cuda {

// Ids through MPI: each call is collective over `comm` (every process asks for the same
// generation at the same point, as recover() does on every rank), rank 0 makes the id. Give
// a communicator of its own (MPI_Comm_dup) so these broadcasts meet no other collective.
[[nodiscard]] inline UniqueIdSource unique_ids_through_mpi(MPI_Comm comm) {
  return [comm](std::uint64_t, const HostWait& wait) {
    int rank = 0;
    {
      const std::lock_guard<std::mutex> lock(detail::mpi::call_mutex());
      MPI_Comm_rank(comm, &rank);
    }
    ncclUniqueId id{};
    if (rank == 0) id = new_unique_id();
    mpi::broadcast_from(0, id, comm, wait);
    return id;
  };
}

// This process's rank of a pipeline of one process per GPU: rank and size from `comm`, the
// communicator's unique id through MPI, the GPU `device` (usually the local rank). Every
// process of `comm` calls it; initialisation is bounded by `options.timeout`.
[[nodiscard]] inline CudaBackend cuda_backend_through_mpi(MPI_Comm comm, int device, CudaBackendOptions options = {},
                                                          std::stop_token stop = {}) {
  MPI_Comm own = MPI_COMM_NULL;
  int rank = 0;
  int ranks = 0;
  {
    const std::lock_guard<std::mutex> lock(detail::mpi::call_mutex());
    detail::mpi::check(MPI_Comm_dup(comm, &own), "MPI_Comm_dup", "cuda_backend_through_mpi");
    MPI_Comm_set_errhandler(own, MPI_ERRORS_RETURN);
    MPI_Comm_rank(own, &rank);
    MPI_Comm_size(own, &ranks);
  }
  // `own` lives as long as the process's MPI: recover() may ask for a new id at any step.
  UniqueIdSource ids = unique_ids_through_mpi(own);
  const ncclUniqueId id = ids(0, HostWait::within(options.timeout, stop));
  return CudaBackend(NcclCommunicator::init_rank(ranks, rank, device, id, options.timeout, stop), std::move(ids),
                     options);
}

}  // namespace cuda
}  // namespace ppsched
