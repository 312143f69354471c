// Where this process stands in a multi-process job: its rank, the world size and its rank
// on its node, read from what the launcher put in the environment. mpirun (Open MPI), a PMI
// launcher (MPICH's hydra, srun --mpi=pmi2), Slurm and torchrun each name the same three
// numbers differently; a job may carry several of them (torchrun under Slurm), and they must
// then agree, or the process would take another's place in the pipeline without a word.
// No MPI header is needed: a program that bootstraps NCCL through a file or the environment
// reads its place here too.
#pragma once

#include <array>
#include <charconv>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "ppsched/error.hpp"

namespace ppsched {

struct ProcessRank {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // among the processes of this node; -1 when the launcher did not say
  // The launcher the numbers came from ("Open MPI", "PMI", "Slurm", "torchrun"), or "none"
  // for a process started alone (rank 0 of 1).
  std::string source = "none";
};

namespace detail::launch {

struct Names {
  std::string_view source;
  const char* rank;
  const char* size;
  const char* local_rank;
};

// In the order they are reported when they disagree.
inline constexpr std::array<Names, 4> launchers{{
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
}};

[[nodiscard]] inline std::optional<int> number(const std::function<const char*(const char*)>& getenv,
                                               const char* name) {
  const char* text = getenv(name);
  if (text == nullptr) return std::nullopt;
  const std::string_view s(text);
  int value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size() || value < 0) {
    fail({"launch environment", concat(name, "='", s, "' is not a non-negative integer"), name,
          "Check how the launcher (mpirun, srun, torchrun) sets it, or unset it"});
  }
  return value;
}

}  // namespace detail::launch

// Reads the rank, world size and local rank every known launcher sets (Open MPI's
// OMPI_COMM_WORLD_*, PMI_RANK/PMI_SIZE, Slurm's SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID,
// torchrun's RANK/WORLD_SIZE/LOCAL_RANK) and returns the first launcher's that is complete.
// Throws ppsched::error when a launcher sets a rank without a size (or the reverse), a rank
// outside its world, a value that is not a number, or when two launchers disagree. `getenv`
// is std::getenv unless a test gives its own environment.
[[nodiscard]] inline ProcessRank process_rank_from_env(
    const std::function<const char*(const char*)>& getenv = [](const char* name) -> const char* {
      return std::getenv(name);
    }) {
  using detail::concat;
  std::optional<ProcessRank> found;
  for (const auto& n : detail::launch::launchers) {
    const auto rank = detail::launch::number(getenv, n.rank);
    const auto size = detail::launch::number(getenv, n.size);
    const auto local = detail::launch::number(getenv, n.local_rank);
    if (!rank && !size) {
      if (local) {
        fail({"launch environment", concat(n.local_rank, " is set but ", n.rank, " and ", n.size, " are not"),
              std::string(n.source), concat("Set ", n.rank, " and ", n.size, " too, or unset ", n.local_rank)});
      }
      continue;
    }
    if (!rank || !size) {
      fail({"launch environment", concat(rank ? n.rank : n.size, " is set but ", rank ? n.size : n.rank, " is not"),
            std::string(n.source), "A launcher sets both the rank and the world size; set both or neither"});
    }
    if (*size < 1 || *rank >= *size) {
      fail({"launch environment", concat(n.rank, "=", *rank, " is not a rank of a world of ", n.size, "=", *size),
            std::string(n.source), concat("Use a rank in 0..", *size - 1)});
    }
    if (local && *local >= *size) {
      fail({"launch environment", concat(n.local_rank, "=", *local, " is not below ", n.size, "=", *size),
            std::string(n.source), "The local rank counts the processes of one node"});
    }
    ProcessRank here{*rank, *size, local ? *local : -1, std::string(n.source)};
    if (!found) {
      found = here;
      continue;
    }
    if (found->rank != here.rank || found->world_size != here.world_size ||
        (found->local_rank >= 0 && here.local_rank >= 0 && found->local_rank != here.local_rank)) {
      fail({"launch environment",
            concat(found->source, " says rank ", found->rank, " of ", found->world_size, " (local ", found->local_rank,
                   ") but ", here.source, " says rank ", here.rank, " of ", here.world_size, " (local ",
                   here.local_rank, ")"),
            concat(n.rank, ", ", n.size, ", ", n.local_rank),
            "The job carries two launchers' variables that disagree (e.g. torchrun's RANK left over from "
            "another job); unset the stale ones"});
    }
    if (found->local_rank < 0) found->local_rank = here.local_rank;
  }
  return found.value_or(ProcessRank{});
}

}  // namespace ppsched
