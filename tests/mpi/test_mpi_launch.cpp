// process_rank_from_env: the rank, world size and local rank of a process, from whichever
// launcher started it, and a clear error when the environment contradicts itself.
#include <catch2/catch.hpp>
#include <map>
#include <ppsched/backend/mpi/launch.hpp>
#include <string>
#include <vector>

namespace {

using Env = std::map<std::string, std::string>;

ppsched::mpi::ProcessRank read(const Env& env) {
  return ppsched::mpi::process_rank_from_env([&env](const char* name) -> const char* {
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

TEST_CASE("launchers that agree are accepted; the innermost names the source", "[mpi][launch]") {
  // torchrun under Slurm, both sets consistent: torchrun's (the inner launcher's) numbers, and
  // Slurm's local rank fills torchrun's gap, since Slurm describes the same processes.
  const auto both = read({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"}, {"RANK", "3"},
                          {"WORLD_SIZE", "4"}});
  CHECK(both.rank == 3);
  CHECK(both.local_rank == 1);
  CHECK(both.source == "torchrun");
}

TEST_CASE("ordinary launches inside Slurm: the innermost launcher wins, Slurm's task is ignored", "[mpi][launch]") {
  // Issue 24, item 2: each of these was refused ("... says rank 0 of 4 but ...", or
  // "SLURM_PROCID is set but SLURM_NTASKS is not"), since every process a launcher starts
  // inside a Slurm task inherits the task's SLURM_* variables.
  struct Case {
    const char* launch;
    Env env;
    int rank, world_size, local_rank;
    const char* source;
  };
  const std::vector<Case> cases{
      {"srun -N2 torchrun --nproc-per-node 4 (node 1, worker 1)",
       {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}, {"RANK", "5"}, {"WORLD_SIZE", "8"},
        {"LOCAL_RANK", "1"}},
       5, 8, 1, "torchrun"},
      {"torchrun --nproc-per-node 4 straight from an sbatch -n1 script",
       {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_LOCALID", "0"}, {"RANK", "3"}, {"WORLD_SIZE", "4"},
        {"LOCAL_RANK", "3"}},
       3, 4, 3, "torchrun"},
      {"torchrun from an sbatch script without -n",
       {{"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}, {"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}},
       2, 4, 2, "torchrun"},
      {"a program run alone in an sbatch script without -n", {{"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}}, 0, 1, 0,
       "none"},
      {"mpirun -np 2 in an sbatch script without -n",
       {{"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}, {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
        {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}},
       1, 2, 1, "Open MPI"},
      {"mpirun -np 4 inside sbatch -n4",
       {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"}, {"OMPI_COMM_WORLD_RANK", "2"},
        {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}},
       2, 4, 2, "Open MPI"},
      {"mpirun -np 2 inside sbatch -n2 (the SLURM_* every process inherits)",
       {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}, {"OMPI_COMM_WORLD_RANK", "1"},
        {"OMPI_COMM_WORLD_SIZE", "2"}},
       1, 2, -1, "Open MPI"},
      {"MPICH's mpiexec (hydra) -n 4 inside sbatch -n4",
       {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"}, {"PMI_RANK", "3"}, {"PMI_SIZE", "4"},
        {"MPI_LOCALRANKID", "3"}},
       3, 4, 3, "PMI"},
      {"srun --mpi=pmi2 -n4 (PMI and Slurm describe the same tasks)",
       {{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"}, {"PMI_RANK", "2"}, {"PMI_SIZE", "4"}},
       2, 4, 0, "PMI"},
      {"srun -n4 alone", {{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "2"}}, 2, 4, 2, "Slurm"},
      {"mpirun under a Slurm environment whose values do not parse (ignored)",
       {{"SLURM_PROCID", "x"}, {"SLURM_NTASKS", "4"}, {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}}, 0, 2,
       -1, "Open MPI"},
  };
  for (const Case& c : cases) {
    INFO(c.launch << ": " << error_of(c.env));
    const auto got = read(c.env);
    CHECK(got.rank == c.rank);
    CHECK(got.world_size == c.world_size);
    CHECK(got.local_rank == c.local_rank);
    CHECK(got.source == c.source);
  }
  // Launchers of one level must still agree: a stale RANK under mpirun, Open MPI against PMI.
  CHECK_THAT(error_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"OMPI_COMM_WORLD_RANK", "1"},
                       {"OMPI_COMM_WORLD_SIZE", "2"}, {"RANK", "0"}, {"WORLD_SIZE", "2"}}),
             Catch::Contains("Open MPI says rank 1 of 2") && Catch::Contains("torchrun says rank 0 of 2"));
  CHECK_THAT(error_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"PMI_RANK", "0"}, {"PMI_SIZE", "2"}}),
             Catch::Contains("Open MPI says rank 1 of 2") && Catch::Contains("PMI says rank 0 of 2"));
  // Slurm alone is still checked: a local rank past the task count, a count without a rank.
  CHECK_THAT(error_of({{"SLURM_NTASKS", "2"}}), Catch::Contains("SLURM_NTASKS is set but SLURM_PROCID is not"));
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
