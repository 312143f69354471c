// Data x pipeline parallelism: d replicas of a p-stage pipeline, on CPU threads. First the
// planner picks the split of N devices for a model profile (plan_devices, as
// `ppsched-plan --devices N` does); then the MLP of examples/mlp trains as d replicas of a
// p-stage 1F1B pipeline, each replica on its own p ranks with its own copy of the model, the
// stages' gradients summed across the replicas (InProcessAllReduce) as soon as each stage's
// last weight gradient is done. Every replica applies the same sum, so the copies stay equal.
//
//   data_parallel [p] [d] [steps]      e.g.  data_parallel 2 2 20
//
// On GPUs the same structure holds with the CUDA backend's ranks and an NCCL all-reduce
// engine (a GradientAllReduce) in place of InProcessAllReduce.
#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <ppsched/backend/cpu.hpp>
#include <ppsched/plan/devices.hpp>
#include <ppsched/runtime/data_parallel.hpp>
#include <ppsched/schedule/one_f_one_b.hpp>
#include <string>
#include <vector>

#include "mlp/mlp.hpp"
#include "mlp/mlp_stage.hpp"

int main(int argc, char** argv) try {
  const int p = argc > 1 ? std::atoi(argv[1]) : 2;
  const int d = argc > 2 ? std::atoi(argv[2]) : 2;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 20;

  // example-begin plan-devices
  // 1. Which split? 16 layers of 1 GiB parameters (8 bytes held per parameter byte) on 8
  //    devices of 40 GiB, a global batch of 64 samples, replicas joined by a slower link.
  ppsched::Profile profile;
  std::vector<ppsched::Layer> layers;
  for (int i = 0; i < 16; ++i) layers.push_back({"block " + std::to_string(i), 1.0, 1.0, 1.0, 1 << 30, 1 << 24, 1 << 24});
  profile.graph = ppsched::LayerGraph(std::move(layers));
  profile.time_unit = "ms";
  profile.link = ppsched::Interconnect{0.01, 25e6};  // 25 GB/s in bytes per ms
  ppsched::plan::DevicePlanOptions options;
  options.all_reduce_link = ppsched::Interconnect{0.02, 12.5e6};
  const ppsched::plan::DevicePlan plan = ppsched::plan::plan_devices(profile, 8, 64, ppsched::plan::MemoryCap{.total_bytes = 40.0 * (1 << 30)}, options);
  std::cout << plan << '\n';
  // example-end plan-devices

  // example-begin data-parallel-training
  // 2. Train d replicas of a p-stage pipeline. Each replica: its own model copy, stages, ranks.
  const int m = 2 * p;  // micro-batches per replica
  const ppsched::Schedule schedule = ppsched::make_1f1b({p, m, 1});
  const std::vector<std::size_t> widths{8, 16, 16, 16, 16, 4};
  const std::size_t rows = 4;
  const float loss_scale = 1.0f / static_cast<float>(rows * static_cast<std::size_t>(m * d));  // mean over the global batch
  std::vector<std::unique_ptr<mlp::Mlp>> models;
  std::vector<std::vector<std::unique_ptr<mlp::MlpStage>>> adapters(static_cast<std::size_t>(d));
  std::vector<std::vector<ppsched::StageFunctions>> functions(static_cast<std::size_t>(d));
  std::vector<std::unique_ptr<ppsched::CpuCluster>> clusters;
  std::vector<std::vector<ppsched::CpuBackend*>> backends(static_cast<std::size_t>(d));
  for (std::size_t r = 0; r < static_cast<std::size_t>(d); ++r) {
    models.push_back(std::make_unique<mlp::Mlp>(widths, 1));  // the same initial weights
    const std::size_t n = widths.size() - 1;
    for (int s = 0; s < p; ++s) {
      const auto first = n * static_cast<std::size_t>(s) / static_cast<std::size_t>(p);
      const auto last = n * static_cast<std::size_t>(s + 1) / static_cast<std::size_t>(p);
      adapters[r].push_back(std::make_unique<mlp::MlpStage>(*models[r], first, last, rows, m));
      functions[r].push_back(adapters[r].back()->functions(s + 1 == p, loss_scale, 0.2f));
    }
    clusters.push_back(std::make_unique<ppsched::CpuCluster>(p));
    for (int k = 0; k < p; ++k) backends[r].push_back(&clusters.back()->rank(k));
  }
  ppsched::DataParallelWorld<ppsched::CpuBackend> world(std::move(backends), schedule, std::move(functions));

  // 3. Each step: the global batch, split into d contiguous shares of m micro-batches.
  mlp::Random random(3);
  const std::size_t in = static_cast<std::size_t>(m) * rows * widths.front();
  const std::size_t out = static_cast<std::size_t>(m) * rows * widths.back();
  std::vector<float> inputs(in * static_cast<std::size_t>(d)), targets(out * static_cast<std::size_t>(d));
  for (float& x : inputs) x = random.next();
  for (std::size_t i = 0; i < targets.size(); ++i) targets[i] = 0.5f * inputs[i % inputs.size()];
  std::vector<ppsched::Batch> shares;
  for (std::size_t r = 0; r < static_cast<std::size_t>(d); ++r) {
    shares.push_back({std::span<const float>(inputs).subspan(r * in, in), std::span<const float>(targets).subspan(r * out, out)});
  }
  for (int step = 0; step < steps; ++step) {
    const ppsched::DataParallelStepResult& result = world.run_step(shares);
    if (step % 5 == 0 || step + 1 == steps) std::cout << "step " << step << ": mean loss " << result.mean_loss() << '\n';
  }
  // example-end data-parallel-training
  for (std::size_t r = 1; r < models.size(); ++r) {
    for (std::size_t l = 0; l < models[r]->layers.size(); ++l) {
      const auto a = models[r]->layers[l].parameters(), b = models[0]->layers[l].parameters();
      if (!std::equal(a.begin(), a.end(), b.begin(), b.end())) {
        std::cerr << "replica " << r << " drifted from replica 0 at layer " << l << '\n';
        return 1;
      }
    }
  }
  std::cout << "d = " << d << " replicas of a p = " << p << "-stage pipeline: every replica holds the same weights\n";
  return 0;
} catch (const std::exception& e) {
  std::cerr << "data_parallel: " << e.what() << '\n';
  return 1;
}
