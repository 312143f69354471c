// Pipelined training with one process per rank: the MLP of examples/mlp_training.cpp, each
// process running one rank of the pipeline, activations and gradients moving over MPI.
// Launch it with mpirun (one node or several), srun, or any launcher that starts N copies:
//
//   mpirun -np 4 ./mpi_training [schedule] [steps]       e.g.  mpirun -np 4 ./mpi_training zb-h1 20
//   mpirun -np 4 ./mpi_training --replicas 2 zb-h1 20     data x pipeline: 2 replicas of a 2-rank pipeline
//
// The number of processes is the number of ranks (times the replicas: process k is replica
// k / p's rank k % p, each replica trained on its share of the global batch and the stages'
// gradients summed over the replicas). Every process builds the same schedule and
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
#include <span>
#include <stdexcept>
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
  ppsched::mpi::MpiSession mpi(&argc, &argv);
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    ppsched::MpiOptions options;
    if (const auto flag = std::find(args.begin(), args.end(), "--replicas"); flag != args.end()) {
      if (flag + 1 == args.end()) throw std::invalid_argument("--replicas needs a count");
      options.replicas = std::stoi(*(flag + 1));
      args.erase(flag, flag + 2);
    }
    const std::string family = !args.empty() ? args[0] : "1f1b";
    const int steps = args.size() > 1 ? std::atoi(args[1].c_str()) : 10;

    // example-begin mpi-training
    // 1. This process is one rank of one replica: which, and of how many, MPI says.
    ppsched::MpiBackend backend(MPI_COMM_WORLD, options);  // d replicas of a p-rank pipeline
    const int ranks = backend.ranks();
    const int me = backend.rank();
    const int replicas = backend.replicas();

    // 2. The schedule and the stages, the same in every process (only this rank's are called).
    ppsched::ScheduleRequest request;
    request.ranks = ranks;
    request.microbatches = 2 * ranks;
    request.chunks = ppsched::family_info(family).chunks_for(2);  // looped: two here; V-shaped: two
    const ppsched::Schedule schedule = ppsched::make_schedule(family, request);
    const int stages = schedule.stages();
    const int microbatches = schedule.microbatches;

    const std::vector<std::size_t> widths{8, 16, 16, 16, 16, 16, 16, 16, 4};
    mlp::Mlp model(widths, 1);
    const std::size_t rows = 4;
    // The mean over the global batch: d x m micro-batches.
    const float loss_scale = 1.0f / static_cast<float>(rows * static_cast<std::size_t>(microbatches * replicas));
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

    // 3. The rank's executor; run_step is collective (every process calls it with its replica's
    //    share of the batch). With replicas it sums each stage's gradient over them.
    ppsched::MpiExecutor executor(backend, schedule, functions);
    // example-end mpi-training

    mlp::Mlp reference(widths, 1);
    const mlp::Mlp teacher(widths, 99);
    mlp::Random random(5);
    const bool prints = schedule.rank_of(stages - 1) == me && backend.replica() == 0;
    if (prints) {
      std::cout << "schedule " << family << ": " << ranks * replicas << " processes, " << stages << " stages, "
                << microbatches * replicas << " micro-batches of " << rows << " rows";
      if (replicas > 1) std::cout << " (" << replicas << " replicas of " << microbatches << ")";
      std::cout << " (rank " << me << " has the loss)\n"
                << "step  loss (pipelined)  loss (unpipelined)\n";
    }
    const std::size_t global_rows = static_cast<std::size_t>(microbatches * replicas) * rows;
    for (int step = 0; step < steps; ++step) {
      std::vector<float> inputs(global_rows * widths.front());
      for (float& x : inputs) x = random.next();
      const std::vector<float> targets = teacher_outputs(teacher, inputs, global_rows);
      const ppsched::Batch global{inputs, targets};
      const ppsched::RankStep& result = executor.run_step(ppsched::mpi::replica_share(global, backend));
      // Unpipelined: each replica's share's gradient, summed in replica order from zero, as the
      // replicas sum theirs (with one replica, plain training on the batch).
      std::vector<float> expected;
      if (replicas == 1) {
        expected = mlp::train_step_unpipelined(reference, inputs, targets, rows, microbatches, loss_scale, learning_rate);
      } else {
        std::vector<float> total;
        for (int r = 0; r < replicas; ++r) {
          const ppsched::Batch share = ppsched::mpi::replica_share(global, replicas, r);
          std::vector<float> g;
          const auto l =
              mlp::train_step_unpipelined(reference, share.inputs, share.targets, rows, microbatches, loss_scale, 0.0f, &g);
          expected.insert(expected.end(), l.begin(), l.end());
          if (total.empty()) total.assign(g.size(), 0.0f);
          for (std::size_t i = 0; i < g.size(); ++i) total[i] += g[i];
        }
        std::size_t offset = 0;
        for (mlp::Linear& layer : reference.layers) {
          layer.step(std::span<const float>(total).subspan(offset, layer.parameter_count()), learning_rate);
          offset += layer.parameter_count();
        }
      }
      // Every replica's last rank holds its share's losses: the job's sum is the batch's.
      double mine = 0.0;
      if (schedule.rank_of(stages - 1) == me) {
        for (float l : result.losses) mine += l;
      }
      double loss = 0.0;
      MPI_Allreduce(&mine, &loss, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      if (prints) {
        double expected_loss = 0.0;
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
    if (me == 0 && backend.replica() == 0) {
      std::cout << (total == 0 ? "every rank's weights match unpipelined training bit for bit\n"
                               : "weights DIFFER from unpipelined training in " + std::to_string(total) + " layers\n");
    }
    return total == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
  } catch (const std::exception& e) {
    std::cerr << "mpi_training: " << e.what() << '\n';
    return 2;
  }
}
