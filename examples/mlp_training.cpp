// Pipelined training of model code you already have. examples/mlp/mlp.hpp is a plain C++
// MLP that knows nothing of ppsched; examples/mlp/mlp_stage.hpp is the only glue: it turns
// a range of layers into ppsched::StageFunctions. This program splits the model into stages,
// picks a schedule by name, runs it on p CPU ranks (the CPU backend behaves as CUDA streams
// and NCCL would, on threads) and trains, checking every step against the same model
// trained without a pipeline.
//
//   mlp_training [schedule] [ranks] [steps]      e.g.  mlp_training zb-h1 4 20
//
// Swap the schedule with the first argument; nothing else changes. On GPUs, replace the
// CpuCluster with the CUDA backend's ranks (and the layers' loops with kernels).
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <iomanip>
#include <iostream>
#include <memory>
#include <ppsched/backend/cpu.hpp>
#include <ppsched/runtime/world.hpp>
#include <ppsched/schedule/generators.hpp>
#include <string>
#include <vector>

#include "mlp/mlp.hpp"
#include "mlp/mlp_stage.hpp"

namespace {

// The data: a fixed random "teacher" network maps random inputs to the targets, so the
// student has something real to learn.
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

int main(int argc, char** argv) try {
  const std::string family = argc > 1 ? argv[1] : "1f1b";
  const int ranks = argc > 2 ? std::atoi(argv[2]) : 4;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 20;

  // example-begin mlp-training
  // 1. The schedule: any family by name. Its record says how many model chunks it puts on each
  //    rank: the looped families take any number (two here), the V-shaped ones two.
  ppsched::ScheduleRequest request;
  request.ranks = ranks;
  request.microbatches = 2 * ranks;
  request.chunks = ppsched::family_info(family).chunks_for(2);
  const ppsched::Schedule schedule = ppsched::make_schedule(family, request);
  const int stages = schedule.stages();
  const int microbatches = schedule.microbatches;

  // 2. The model, as it already exists: 8 linear + tanh layers.
  const std::vector<std::size_t> widths{8, 16, 16, 16, 16, 16, 16, 16, 4};
  mlp::Mlp model(widths, 1);
  const std::size_t rows = 4;  // rows per micro-batch
  const float loss_scale = 1.0f / static_cast<float>(rows * static_cast<std::size_t>(microbatches));
  const float learning_rate = 0.2f;

  // 3. The glue: layers [first, last) of the model become stage s.
  std::vector<std::unique_ptr<mlp::MlpStage>> adapters;
  std::vector<ppsched::StageFunctions> functions;
  const std::size_t layers = model.layers.size();
  for (int s = 0; s < stages; ++s) {
    const std::size_t first = layers * static_cast<std::size_t>(s) / static_cast<std::size_t>(stages);
    const std::size_t last = layers * static_cast<std::size_t>(s + 1) / static_cast<std::size_t>(stages);
    adapters.push_back(std::make_unique<mlp::MlpStage>(model, first, last, rows, microbatches));
    functions.push_back(adapters.back()->functions(s + 1 == stages, loss_scale, learning_rate));
  }

  // 4. The ranks and the World: one host thread per rank, like one thread per GPU.
  ppsched::CpuCluster cluster(ranks);
  std::vector<ppsched::CpuBackend*> backends;
  for (int r = 0; r < ranks; ++r) backends.push_back(&cluster.rank(r));
  ppsched::World<ppsched::CpuBackend> world(backends, schedule, functions);
  // example-end mlp-training

  // The same model trained without a pipeline, from the same initial weights.
  mlp::Mlp reference(widths, 1);
  const mlp::Mlp teacher(widths, 99);
  mlp::Random random(5);

  std::cout << "schedule " << family << ": " << ranks << " ranks, " << stages << " stages, " << microbatches
            << " micro-batches of " << rows << " rows\n";
  std::cout << "step  loss (pipelined)  loss (unpipelined)  equal\n";
  bool all_equal = true;
  for (int step = 0; step < steps; ++step) {
    std::vector<float> inputs(static_cast<std::size_t>(microbatches) * rows * widths.front());
    for (float& x : inputs) x = random.next();
    const std::vector<float> targets = teacher_outputs(teacher, inputs, static_cast<std::size_t>(microbatches) * rows);

    // example-begin mlp-step
    const ppsched::StepResult& result = world.run_step({inputs, targets});
    // example-end mlp-step
    const std::vector<float> expected =
        mlp::train_step_unpipelined(reference, inputs, targets, rows, microbatches, loss_scale, learning_rate);
    double loss = 0.0;
    double expected_loss = 0.0;
    for (float l : result.losses) loss += l;
    for (float l : expected) expected_loss += l;
    const bool equal = result.losses == expected;
    all_equal = all_equal && equal;
    std::cout << std::setw(4) << step << "  " << std::setw(16) << std::setprecision(8) << loss << "  " << std::setw(18)
              << expected_loss << "  " << (equal ? "yes" : "NO") << '\n';
  }
  std::cout << (all_equal ? "pipelined training matched unpipelined training bit for bit\n"
                          : "pipelined training DIFFERED from unpipelined training\n");
  return all_equal ? EXIT_SUCCESS : EXIT_FAILURE;
} catch (const std::exception& e) {
  std::cerr << "mlp_training: " << e.what() << '\n';
  return 2;
}
