// Quickstart: the smallest complete use of ppsched — your stages as callables, a schedule from
// its family's generator, a pipelined training step on CPU threads, and what the step did,
// drawn as text. (make_1f1b compiles one generator; make_schedule("1f1b", ...), which picks a
// family by name at run time, compiles all twelve: use it where the name comes from input.)
// The model is a toy (stage s computes y = w_s * x); the shape of the code is what carries
// over to real model code (see docs/guide.md and examples/mlp_training.cpp).
#include <ppsched/ppsched.hpp>
#include <ppsched/runtime.hpp>

#include <cstdio>
#include <iostream>
#include <vector>

int main() {
  constexpr int ranks = 4, microbatches = 8;
  std::vector<float> weight(ranks, 1.0f);
  std::vector<std::vector<float>> saved(ranks, std::vector<float>(microbatches));  // inputs kept for backward

  // readme-begin
  std::vector<ppsched::StageFunctions> stages(ranks);
  for (int s = 0; s < ranks; ++s) {
    ppsched::StageFunctions& f = stages[s];
    f.input_size = f.output_size = 1;  // floats per micro-batch
    f.weight_grad_size = 1;
    f.forward = [&, s](int mb, std::span<const float> x, std::span<float> y) {
      saved[s][mb] = x[0];
      y[0] = weight[s] * x[0];
    };
    f.backward = [&, s](int mb, auto, std::span<const float> dy, std::span<float> dx, std::span<float> dw) {
      if (!dx.empty()) dx[0] = weight[s] * dy[0];
      dw[0] = saved[s][mb] * dy[0];
    };
    f.optimizer_step = [&, s](std::span<const float> dw) { weight[s] -= 0.1f * dw[0]; };
  }
  stages.back().target_size = 1;
  stages.back().loss = [](int, std::span<const float> y, std::span<const float> t, std::span<float> dy) {
    const float d = y[0] - t[0];
    dy[0] = d / microbatches;  // the step's loss is the mean over micro-batches
    return 0.5f * d * d;
  };

  const ppsched::Schedule schedule = ppsched::make_1f1b({.ranks = ranks, .microbatches = microbatches});
  ppsched::CpuCluster cluster(ranks);
  std::vector<ppsched::CpuBackend*> backends;
  for (int r = 0; r < ranks; ++r) backends.push_back(&cluster.rank(r));
  ppsched::World<ppsched::CpuBackend> world(backends, schedule, stages);  // validates, then starts one thread per rank

  const std::vector<float> inputs(microbatches, 1.0f), targets(microbatches, 2.0f);
  for (int step = 0; step < 5; ++step) {
    const ppsched::StepResult& result = world.run_step({inputs, targets});
    std::printf("step %d: mean loss %.6f\n", step, result.mean_loss());
  }
  // readme-end

  // What the schedule does, in time: simulated with forward 1 and backward 2 time units.
  const ppsched::SimResult predicted = ppsched::simulate(schedule, ppsched::uniform_costs(1.0, 1.0, 1.0));
  std::cout << "\n" << schedule << "\nSimulated (F forward, B backward, . idle), bubble "
            << 100.0 * predicted.bubble_fraction << "%:\n"
            << ppsched::to_ascii(predicted.timeline);
  return 0;
}
