// The MLP of examples/mlp trained with one process per rank over MPI, against the same model
// trained unpipelined in every process. Run under `mpirun -np 4`: the four processes form one
// p=4 pipeline (MPI_COMM_WORLD; threaded streams, then 1F1B and ZB-V with each process's
// streams in deterministic mode), then two p=2 pipelines side by side (the world split in
// two, each pipeline on its own communicator). For each schedule family, losses and every
// stage's gradient must be bit-identical to the unpipelined run for three steps (gradients
// summed in micro-batch order). Each process checks its own stages; the exit code is 0 only
// when every process of the job agrees that all checks passed.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <ppsched/backend/mpi.hpp>
#include <ppsched/schedule/generators.hpp>
#include <string>
#include <vector>

#include "../../examples/mlp/mlp.hpp"
#include "../../examples/mlp/mlp_stage.hpp"

namespace {

struct Family {
  const char* name;
  int chunks;
};
constexpr Family families[] = {{"gpipe", 1}, {"1f1b", 1}, {"interleaved-1f1b", 2}, {"looped-bfs", 2},
                               {"zb-h1", 1}, {"zb-v", 2}};

std::vector<float> data(std::size_t n, std::uint32_t seed, float scale) {
  mlp::Random random(seed);
  std::vector<float> out(n);
  for (float& x : out) x = scale * random.next();
  return out;
}

// Trains three steps of `family` on the processes of `comm`; returns the number of failed checks.
int train_and_compare(MPI_Comm comm, const Family& family, const char* layout,
                      ppsched::CpuMode mode = ppsched::CpuMode::threaded) {
  ppsched::MpiOptions options;
  options.streams.mode = mode;
  ppsched::MpiBackend backend(comm, options);
  const int p = backend.ranks();
  const int me = backend.rank();
  ppsched::ScheduleRequest req;
  req.ranks = p;
  req.microbatches = 2 * p;
  req.chunks = family.chunks;
  const ppsched::Schedule schedule = ppsched::make_schedule(family.name, req);
  const int stages = schedule.stages();
  const int m = schedule.microbatches;
  const std::size_t rows = 2;
  const std::size_t layers = static_cast<std::size_t>(std::max(4, stages) + 1);
  std::vector<std::size_t> widths{3};
  for (std::size_t l = 1; l < layers; ++l) widths.push_back(4 + l % 3);
  widths.push_back(2);
  const float loss_scale = 1.0f / static_cast<float>(rows * static_cast<std::size_t>(m));
  const float learning_rate = 0.5f;

  mlp::Mlp pipelined(widths, 7);
  mlp::Mlp reference(widths, 7);
  std::vector<std::unique_ptr<mlp::MlpStage>> adapters;
  std::vector<ppsched::StageFunctions> functions;
  std::vector<std::vector<float>> applied(static_cast<std::size_t>(stages));
  std::vector<std::size_t> first_parameter(static_cast<std::size_t>(stages) + 1, 0);
  for (int s = 0; s < stages; ++s) {
    const std::size_t first = layers * static_cast<std::size_t>(s) / static_cast<std::size_t>(stages);
    const std::size_t last = layers * static_cast<std::size_t>(s + 1) / static_cast<std::size_t>(stages);
    std::size_t count = 0;
    for (std::size_t l = first; l < last; ++l) count += pipelined.layers[l].parameter_count();
    first_parameter[static_cast<std::size_t>(s) + 1] = first_parameter[static_cast<std::size_t>(s)] + count;
    adapters.push_back(std::make_unique<mlp::MlpStage>(pipelined, first, last, rows, m));
    ppsched::StageFunctions f = adapters.back()->functions(s + 1 == stages, loss_scale, learning_rate);
    f.optimizer_step = [apply = f.optimizer_step, &applied, s](std::span<const float> g) {
      applied[static_cast<std::size_t>(s)].assign(g.begin(), g.end());
      apply(g);
    };
    functions.push_back(std::move(f));
  }
  ppsched::MpiExecutor executor(backend, schedule, functions);

  int failures = 0;
  auto check = [&](bool ok, const std::string& what) {
    if (ok) return;
    ++failures;
    std::printf("FAIL %s %s rank %d: %s\n", layout, family.name, me, what.c_str());
  };
  for (int step = 0; step < 3; ++step) {
    const auto inputs =
        data(static_cast<std::size_t>(m) * rows * widths.front(), 100u + static_cast<std::uint32_t>(step), 1.0f);
    const auto targets =
        data(static_cast<std::size_t>(m) * rows * widths.back(), 200u + static_cast<std::uint32_t>(step), 0.8f);
    const ppsched::RankStep& result = executor.run_step({inputs, targets});
    std::vector<float> reference_gradient;
    const auto reference_losses = mlp::train_step_unpipelined(reference, inputs, targets, rows, m, loss_scale,
                                                              learning_rate, &reference_gradient);
    if (schedule.rank_of(stages - 1) == me) {
      check(result.losses == reference_losses, "losses differ from unpipelined training at step " + std::to_string(step));
    }
    int mine = 0;
    for (int s = 0; s < stages; ++s) {
      if (schedule.rank_of(s) != me) continue;
      ++mine;
      const auto from = reference_gradient.begin() + static_cast<std::ptrdiff_t>(first_parameter[static_cast<std::size_t>(s)]);
      const auto to = reference_gradient.begin() + static_cast<std::ptrdiff_t>(first_parameter[static_cast<std::size_t>(s) + 1]);
      check(applied[static_cast<std::size_t>(s)] == std::vector<float>(from, to),
            "stage " + std::to_string(s) + "'s gradient differs at step " + std::to_string(step));
    }
    check(mine > 0, "no stage placed on this rank");
  }
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  ppsched::mpi::MpiSession session(&argc, &argv);
  int world_rank = 0;
  int world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (world_size != 4) {
    if (world_rank == 0) std::printf("FAIL: run with mpirun -np 4 (got %d processes)\n", world_size);
    return 1;
  }
  int failures = 0;
  try {
    for (const Family& f : families) failures += train_and_compare(MPI_COMM_WORLD, f, "p=4");
    // Each process's streams in the CPU backend's deterministic mode (its one engine thread
    // then also runs the transfers).
    for (const Family& f : {families[1], families[5]}) {
      failures += train_and_compare(MPI_COMM_WORLD, f, "p=4 deterministic", ppsched::CpuMode::deterministic);
    }
    MPI_Comm half = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, world_rank / 2, world_rank, &half);
    for (const Family& f : families) failures += train_and_compare(half, f, "2 x p=2");
    MPI_Comm_free(&half);
  } catch (const std::exception& e) {
    std::printf("FAIL rank %d: %s\n", world_rank, e.what());
    ++failures;
  }
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank == 0) {
    std::printf("%s: %zu families at p=4 and 2 x p=2 (2 also deterministic), 3 steps each, %d failed checks\n",
                total == 0 ? "PASS" : "FAIL", std::size(families), total);
  }
  return total == 0 ? 0 : 1;
}
