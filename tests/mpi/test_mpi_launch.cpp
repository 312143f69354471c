// process_rank_from_env: the rank, world size and local rank of a process, from whichever
// launcher started it, and a clear error when the environment contradicts itself.
#include <catch2/catch.hpp>
#include <map>
#include <ppsched/backend/mpi/launch.hpp>
#include <string>

namespace {

using Env = std::map<std::string, std::string>;

ppsched::ProcessRank read(const Env& env) {
  return ppsched::process_rank_from_env([&env](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

std::string error_of(const Env& env) {
  try {
    (void)read(env);
  } catch (const ppsched::error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("each launcher's variables give the process's place", "[mpi][launch]") {
  const auto none = read({});
  CHECK(none.rank == 0);
  CHECK(none.world_size == 1);
  CHECK(none.source == "none");

  const auto ompi = read({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}});
  CHECK(ompi.rank == 3);
  CHECK(ompi.world_size == 8);
  CHECK(ompi.local_rank == 1);
  CHECK(ompi.source == "Open MPI");

  const auto pmi = read({{"PMI_RANK", "2"}, {"PMI_SIZE", "4"}});
  CHECK(pmi.rank == 2);
  CHECK(pmi.local_rank == -1);
  CHECK(pmi.source == "PMI");

  const auto slurm = read({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}, {"SLURM_LOCALID", "1"}});
  CHECK(slurm.rank == 5);
  CHECK(slurm.world_size == 6);
  CHECK(slurm.source == "Slurm");

  const auto torchrun = read({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}});
  CHECK(torchrun.rank == 1);
  CHECK(torchrun.local_rank == 1);
  CHECK(torchrun.source == "torchrun");
}

TEST_CASE("launchers that agree are accepted; the first complete one names the source", "[mpi][launch]") {
  // torchrun under Slurm: both sets present and consistent; Slurm's local rank fills torchrun's gap.
  const auto both = read({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"}, {"RANK", "3"},
                          {"WORLD_SIZE", "4"}});
  CHECK(both.rank == 3);
  CHECK(both.local_rank == 1);
  CHECK(both.source == "Slurm");
}

TEST_CASE("an environment that contradicts itself is an error naming the variables", "[mpi][launch]") {
  const auto disagree = error_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"RANK", "0"},
                                  {"WORLD_SIZE", "4"}});
  CHECK_THAT(disagree, Catch::Contains("Open MPI says rank 1 of 4") && Catch::Contains("torchrun says rank 0 of 4") &&
                           Catch::Contains("unset the stale ones"));
  CHECK_THAT(error_of({{"RANK", "0"}}), Catch::Contains("RANK is set but WORLD_SIZE is not"));
  CHECK_THAT(error_of({{"WORLD_SIZE", "2"}}), Catch::Contains("WORLD_SIZE is set but RANK is not"));
  CHECK_THAT(error_of({{"LOCAL_RANK", "0"}}), Catch::Contains("LOCAL_RANK is set but RANK and WORLD_SIZE are not"));
  CHECK_THAT(error_of({{"RANK", "4"}, {"WORLD_SIZE", "4"}}), Catch::Contains("RANK=4 is not a rank of a world of WORLD_SIZE=4"));
  CHECK_THAT(error_of({{"RANK", "x1"}, {"WORLD_SIZE", "4"}}), Catch::Contains("RANK='x1' is not a non-negative integer"));
  CHECK_THAT(error_of({{"RANK", "-1"}, {"WORLD_SIZE", "4"}}), Catch::Contains("not a non-negative integer"));
  CHECK_THAT(error_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "2"}}),
             Catch::Contains("SLURM_LOCALID=2 is not below SLURM_NTASKS=2"));
  CHECK_THAT(error_of({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "0"}, {"RANK", "0"}, {"WORLD_SIZE", "2"},
                       {"LOCAL_RANK", "1"}}),
             Catch::Contains("(local 0)") && Catch::Contains("(local 1)"));
}
