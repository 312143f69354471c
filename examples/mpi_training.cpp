// Pipelined training with one process per rank: the MLP of examples/mlp_training.cpp, each
// process running one rank of the pipeline, activations and gradients moving over MPI.
// Launch it with mpirun (one node or several), srun, or any launcher that starts N copies:
//
//   mpirun -np 4 ./mpi_training [schedule] [steps]       e.g.  mpirun -np 4 ./mpi_training zb-h1 20
//
// The number of processes is the number of ranks. Every process builds the same schedule and
// the same model and calls only its own stages; the last stage's rank prints the loss, and
// every rank checks its stages' weights against the same model trained without a pipeline
// (which each process also runs, it is small). A step that fails on any rank fails on every
// rank with the same first error (see docs/distributed.md).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <iomanip>
#include <iostream>
#include <memory>
#include <ppsched/backend/mpi.hpp>
#include <ppsched/schedule/generators.hpp>
#include <string>
#include <vector>

#include "mlp/mlp.hpp"
#include "mlp/mlp_stage.hpp"

namespace {

std::vector<float> teacher_outputs(const mlp::Mlp& teacher, const std::vector<float>& inputs, std::size_t rows_total) {
  std::vector<float> x = inputs;
  for (const mlp::Linear& layer : teacher.layers) {
    std::vector<float> z(rows_total * layer.out());
    layer.forward(x, z);
    x.assign(z.size(), 0.0f);
    mlp::Tanh::forward(z, x);
  }
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  ppsched::MpiSession mpi(&argc, &argv);
  try {
    const std::string family = argc > 1 ? argv[1] : "1f1b";
    const int steps = argc > 2 ? std::atoi(argv[2]) : 10;

    // example-begin mpi-training
    // 1. This process is one rank: which one, and of how many, MPI says.
    ppsched::MpiBackend backend;  // MPI_COMM_WORLD
    const int ranks = backend.ranks();
    const int me = backend.rank();

    // 2. The schedule and the stages, the same in every process (only this rank's are called).
    ppsched::ScheduleRequest request;
    request.ranks = ranks;
    request.microbatches = 2 * ranks;
    request.chunks = family == "interleaved-1f1b" || family == "looped-bfs" || !ppsched::accepts(family, request) ? 2 : 1;
    const ppsched::Schedule schedule = ppsched::make_schedule(family, request);
    const int stages = schedule.stages();
    const int microbatches = schedule.microbatches;

    const std::vector<std::size_t> widths{8, 16, 16, 16, 16, 16, 16, 16, 4};
    mlp::Mlp model(widths, 1);
    const std::size_t rows = 4;
    const float loss_scale = 1.0f / static_cast<float>(rows * static_cast<std::size_t>(microbatches));
    const float learning_rate = 0.2f;
    std::vector<std::unique_ptr<mlp::MlpStage>> adapters;
    std::vector<ppsched::StageFunctions> functions;
    const std::size_t layers = model.layers.size();
    for (int s = 0; s < stages; ++s) {
      const std::size_t first = layers * static_cast<std::size_t>(s) / static_cast<std::size_t>(stages);
      const std::size_t last = layers * static_cast<std::size_t>(s + 1) / static_cast<std::size_t>(stages);
      adapters.push_back(std::make_unique<mlp::MlpStage>(model, first, last, rows, microbatches));
      functions.push_back(adapters.back()->functions(s + 1 == stages, loss_scale, learning_rate));
    }

    // 3. The rank's executor; run_step is collective (every process calls it with the batch).
    ppsched::MpiExecutor executor(backend, schedule, functions);
    // example-end mpi-training

    mlp::Mlp reference(widths, 1);
    const mlp::Mlp teacher(widths, 99);
    mlp::Random random(5);
    const bool prints = schedule.rank_of(stages - 1) == me;
    if (prints) {
      std::cout << "schedule " << family << ": " << ranks << " processes, " << stages << " stages, " << microbatches
                << " micro-batches of " << rows << " rows (rank " << me << " has the loss)\n"
                << "step  loss (pipelined)  loss (unpipelined)\n";
    }
    for (int step = 0; step < steps; ++step) {
      std::vector<float> inputs(static_cast<std::size_t>(microbatches) * rows * widths.front());
      for (float& x : inputs) x = random.next();
      const std::vector<float> targets =
          teacher_outputs(teacher, inputs, static_cast<std::size_t>(microbatches) * rows);
      const ppsched::RankStep& result = executor.run_step({inputs, targets});
      const std::vector<float> expected =
          mlp::train_step_unpipelined(reference, inputs, targets, rows, microbatches, loss_scale, learning_rate);
      if (prints) {
        double loss = 0.0;
        double expected_loss = 0.0;
        for (float l : result.losses) loss += l;
        for (float l : expected) expected_loss += l;
        std::cout << std::setw(4) << step << "  " << std::setw(16) << std::setprecision(8) << loss << "  "
                  << std::setw(18) << expected_loss << '\n';
      }
    }
    // Each rank compares the layers it trained; the job agrees on the answer.
    int differing = 0;
    for (int s = 0; s < stages; ++s) {
      if (schedule.rank_of(s) != me) continue;
      for (std::size_t l = layers * static_cast<std::size_t>(s) / static_cast<std::size_t>(stages);
           l < layers * static_cast<std::size_t>(s + 1) / static_cast<std::size_t>(stages); ++l) {
        const auto a = model.layers[l].parameters();
        const auto b = reference.layers[l].parameters();
        if (!std::equal(a.begin(), a.end(), b.begin(), b.end())) ++differing;
      }
    }
    int total = 0;
    MPI_Allreduce(&differing, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (me == 0) {
      std::cout << (total == 0 ? "every rank's weights match unpipelined training bit for bit\n"
                               : "weights DIFFER from unpipelined training in " + std::to_string(total) + " layers\n");
    }
    return total == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
  } catch (const std::exception& e) {
    std::cerr << "mpi_training: " << e.what() << '\n';
    return 2;
  }
}
