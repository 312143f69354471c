// Where this process stands in a multi-process job: its rank, the world size and its rank
// on its node, read from what the launcher put in the environment. mpirun (Open MPI), a PMI
// launcher (MPICH's hydra, srun --mpi=pmi2), Slurm and torchrun each name the same three
// numbers differently. A job may carry several of them, at two levels: Slurm's describe the
// Slurm task (the batch script, or one srun task), and a launcher run inside it (mpirun,
// hydra, torchrun) starts processes of its own, which inherit Slurm's variables unchanged. The
// innermost launcher therefore wins and Slurm's variables are then ignored; two launchers of
// the same level must agree, or the process would take another's place in the pipeline
// without a word (a RANK left over from another job under mpirun).
// No MPI header is needed: a program that bootstraps NCCL through a file or the environment
// reads its place here too.
#pragma once

#include "ppsched/config.hpp"

#include <array>
#include <charconv>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "ppsched/error.hpp"
#include "ppsched/backend/mpi/detail/launch.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace mpi {

struct ProcessRank {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // among the processes of this node; -1 when the launcher did not say
  // The launcher the numbers came from ("Open MPI", "PMI", "Slurm", "torchrun"), or "none"
  // for a process started alone (rank 0 of 1).
  std::string source = "none";
};

// Reads the rank, world size and local rank the launchers set (Open MPI's OMPI_COMM_WORLD_*,
// PMI_RANK/PMI_SIZE, torchrun's RANK/WORLD_SIZE/LOCAL_RANK, and Slurm's
// SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID) and returns the innermost launcher's: any of the
// first three where one is set (Slurm's are then the enclosing task's and are ignored: srun
// torchrun, torchrun or mpirun in an sbatch script), else Slurm's (srun alone). Slurm's rank
// without a task count (an sbatch script without -n) is a process started alone. Throws
// ppsched::error when a launcher of the level read sets a rank without a size (or the
// reverse), a rank outside its world, a value that is not a number, or when two launchers of
// that level disagree. `getenv` is std::getenv unless a test gives its own environment.
[[nodiscard]] inline ProcessRank process_rank_from_env(
    const std::function<const char*(const char*)>& getenv = [](const char* name) -> const char* {
      return std::getenv(name);
    }) {
  using detail::concat;
  const auto read_level = [&](bool outer) {
    std::optional<ProcessRank> found;
    for (const auto& n : detail::launch::launchers) {
      if (n.outer != outer) continue;
      const auto rank = detail::launch::number(getenv, n.rank);
      const auto size = detail::launch::number(getenv, n.size);
      const auto local = detail::launch::number(getenv, n.local_rank);
      if (!rank && !size) {
        if (local) {
          detail::fail({"launch environment", detail::concat(n.local_rank, " is set but ", n.rank, " and ", n.size, " are not"),
                std::string(n.source), detail::concat("Set ", n.rank, " and ", n.size, " too, or unset ", n.local_rank)});
        }
        continue;
      }
      // sbatch without -n sets the batch script's SLURM_PROCID=0 and no SLURM_NTASKS: no
      // world is described, and the script's process runs alone.
      if (outer && rank && !size) continue;
      if (!rank || !size) {
        detail::fail({"launch environment", detail::concat(rank ? n.rank : n.size, " is set but ", rank ? n.size : n.rank, " is not"),
              std::string(n.source), "A launcher sets both the rank and the world size; set both or neither"});
      }
      if (*size < 1 || *rank >= *size) {
        detail::fail({"launch environment", detail::concat(n.rank, "=", *rank, " is not a rank of a world of ", n.size, "=", *size),
              std::string(n.source), detail::concat("Use a rank in 0..", *size - 1)});
      }
      if (local && *local >= *size) {
        detail::fail({"launch environment", detail::concat(n.local_rank, "=", *local, " is not below ", n.size, "=", *size),
              std::string(n.source), "The local rank counts the processes of one node"});
      }
      ProcessRank here{*rank, *size, local ? *local : -1, std::string(n.source)};
      if (!found) {
        found = here;
        continue;
      }
      if (found->rank != here.rank || found->world_size != here.world_size ||
          (found->local_rank >= 0 && here.local_rank >= 0 && found->local_rank != here.local_rank)) {
        detail::fail({"launch environment",
              detail::concat(found->source, " says rank ", found->rank, " of ", found->world_size, " (local ",
                     found->local_rank, ") but ", here.source, " says rank ", here.rank, " of ", here.world_size,
                     " (local ", here.local_rank, ")"),
              detail::concat(n.rank, ", ", n.size, ", ", n.local_rank),
              "The job carries two launchers' variables that disagree (e.g. torchrun's RANK left over from "
              "another job); unset the stale ones"});
      }
      if (found->local_rank < 0) found->local_rank = here.local_rank;
    }
    return found;
  };
  if (std::optional<ProcessRank> inner = read_level(false)) {
    // srun --mpi=pmi2 sets PMI's rank and size and Slurm's for the same tasks; where Slurm
    // agrees with the inner launcher it describes the same processes, and its local rank
    // fills a gap. Otherwise (or where its values do not parse) it is the enclosing task's.
    if (inner->local_rank < 0) {
      try {
        if (const std::optional<ProcessRank> outer = read_level(true);
            outer && outer->rank == inner->rank && outer->world_size == inner->world_size) {
          inner->local_rank = outer->local_rank;
        }
      } catch (const error&) {
      }
    }
    return *inner;
  }
  return read_level(true).value_or(ProcessRank{});
}

}  // namespace mpi
}  // namespace ppsched
