// One process per rank, transfers over MPI, in one include (opt-in: needs <mpi.h> and the
// MPI library; never reached from <ppsched/ppsched.hpp>). MpiSession initialises MPI,
// MpiBackend is one rank's Backend, MpiExecutor runs its steps and agrees on their outcome
// with the other processes; process_rank_from_env reads the launcher's rank and world size; broadcast_from shares a value
// (an NCCL unique id) from one process; allreduce_sum_in_rank_order sums a gradient over
// processes, reproducibly; MpiOptions::replicas, MpiAllReduce and replica_share run d replicas
// of the pipeline (data x pipeline).
// See docs/distributed.md.
#pragma once

#include "ppsched/backend/mpi/allreduce.hpp"
#include "ppsched/backend/mpi/backend.hpp"
#include "ppsched/backend/mpi/broadcast.hpp"
#include "ppsched/backend/mpi/data_parallel.hpp"
#include "ppsched/backend/mpi/executor.hpp"
#include "ppsched/backend/mpi/launch.hpp"
#include "ppsched/backend/mpi/session.hpp"
