// Pipelined training on GPUs: the MLP of examples/mlp_training.cpp (8 linear + tanh layers)
// with its layers computed by CUDA kernels (examples/cuda/mlp_stage_cuda.cuh), one rank per
// GPU — or several ranks per GPU when there are fewer GPUs than ranks — driven by one host
// thread each. Every step is checked against the same model trained on the CPU without a
// pipeline (mlp::train_step_unpipelined): the losses and the gradient the optimizer applied
// must be the same bits (the GPU kernels round as the CPU loops do: mlp_stage_cuda.cuh).
//
//   mlp_training_cuda [schedule] [ranks] [steps]      e.g.  mlp_training_cuda zb-h1 4 10
//
// Without a usable GPU it prints why and exits 77.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iomanip>
#include <iostream>
#include <memory>
#include <ppsched/backend/cuda.hpp>
#include <ppsched/runtime/world.hpp>
#include <ppsched/schedule/generators.hpp>
#include <ppsched/trace/stats.hpp>
#include <span>
#include <string>
#include <vector>

#include "../mlp/mlp.hpp"
#include "../mlp/mlp_stage.hpp"
#include "mlp_stage_cuda.cuh"

namespace {

// Targets from a fixed random "teacher" network, as the CPU example makes them.
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

// max |a - b| over max(|b|, tiny): how far the GPU is from the CPU, relative to the values.
double relative_difference(std::span<const float> a, std::span<const float> b) {
  double diff = 0.0;
  double scale = 1e-30;
  for (std::size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return a.size() == b.size() ? diff / scale : INFINITY;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

int main(int argc, char** argv) try {
  const ppsched::cuda::DeviceProbe probe = ppsched::cuda::probe_devices();
  if (!probe.usable()) {
    std::printf("SKIPPED: mlp_training_cuda needs a usable CUDA device: %s\n", probe.reason.c_str());
    return 77;
  }
  const std::string family = argc > 1 ? argv[1] : "1f1b";
  const int ranks = argc > 2 ? std::atoi(argv[2]) : std::clamp(probe.count, 2, 8);
  const int steps = argc > 3 ? std::atoi(argv[3]) : 10;

  // example-begin mlp-training-cuda
  // 1. The schedule, by name, exactly as on the CPU.
  ppsched::ScheduleRequest request;
  request.ranks = ranks;
  request.microbatches = 2 * ranks;
  request.chunks = ppsched::family_info(family).chunks_for(2);  // looped: two here; V-shaped: two
  const ppsched::Schedule schedule = ppsched::make_schedule(family, request);
  const int stages = schedule.stages();
  const int microbatches = schedule.microbatches;

  // 2. The ranks: rank r on GPU r % GPUs. One GPU per rank talks through NCCL; ranks that
  //    share a GPU talk through device-to-device copies.
  const std::vector<int> device_of_rank = ppsched::cuda::spread_ranks_over_devices(ranks, probe.count);
  std::vector<ppsched::CudaBackend> backends = ppsched::cuda::make_cuda_backends(device_of_rank);

  // 3. The model, and its layers [first, last) as stage s on the GPU of the stage's rank.
  const std::vector<std::size_t> widths{8, 16, 16, 16, 16, 16, 16, 16, 4};
  const mlp::Mlp model(widths, 1);
  const std::size_t rows = 4;
  const float loss_scale = 1.0f / static_cast<float>(rows * static_cast<std::size_t>(microbatches));
  const float learning_rate = 0.2f;
  std::vector<std::unique_ptr<mlp_cuda::CudaMlpStage>> gpu_stages;
  std::vector<ppsched::StageFunctions> functions;
  const std::size_t layers = model.layers.size();
  for (int s = 0; s < stages; ++s) {
    const std::size_t first = layers * static_cast<std::size_t>(s) / static_cast<std::size_t>(stages);
    const std::size_t last = layers * static_cast<std::size_t>(s + 1) / static_cast<std::size_t>(stages);
    const int device = device_of_rank[static_cast<std::size_t>(schedule.rank_of(s))];
    gpu_stages.push_back(std::make_unique<mlp_cuda::CudaMlpStage>(model, first, last, rows, microbatches, device));
    functions.push_back(gpu_stages.back()->functions(s + 1 == stages, loss_scale, learning_rate));
  }

  // 4. The World: one host thread per rank, each driving its GPU.
  std::vector<ppsched::CudaBackend*> ranks_in_order;
  for (ppsched::CudaBackend& b : backends) ranks_in_order.push_back(&b);
  ppsched::World<ppsched::CudaBackend> world(ranks_in_order, schedule, functions);
  // example-end mlp-training-cuda

  // The batch lives on the GPUs that read it: inputs with stage 0, targets with the last stage.
  const int first_device = device_of_rank[static_cast<std::size_t>(schedule.rank_of(0))];
  const int last_device = device_of_rank[static_cast<std::size_t>(schedule.rank_of(stages - 1))];
  const std::size_t input_floats = static_cast<std::size_t>(microbatches) * rows * widths.front();
  const std::size_t target_floats = static_cast<std::size_t>(microbatches) * rows * widths.back();
  mlp_cuda::DeviceFloats device_inputs(first_device, input_floats);
  mlp_cuda::DeviceFloats device_targets(last_device, target_floats);

  mlp::Mlp reference(widths, 1);
  const mlp::Mlp teacher(widths, 99);
  mlp::Random random(5);

  std::cout << "schedule " << family << ": " << ranks << " ranks on " << probe.count << " GPU(s) ("
            << (backends.front().uses_nccl() ? "NCCL" : "device-to-device copies") << "), " << stages << " stages, "
            << microbatches << " micro-batches of " << rows << " rows\n";
  std::cout << "step  loss (GPU pipeline)  loss (CPU, unpipelined)  loss diff   gradient diff\n";
  double worst = 0.0;
  bool identical = true;
  for (int step = 0; step < steps; ++step) {
    std::vector<float> inputs(input_floats);
    for (float& x : inputs) x = random.next();
    const std::vector<float> targets = teacher_outputs(teacher, inputs, static_cast<std::size_t>(microbatches) * rows);
    device_inputs.upload(inputs);
    device_targets.upload(targets);

    const ppsched::StepResult& result = world.run_step({device_inputs.span(), device_targets.span()});

    std::vector<float> expected_gradient;
    const std::vector<float> expected = mlp::train_step_unpipelined(reference, inputs, targets, rows, microbatches,
                                                                    loss_scale, learning_rate, &expected_gradient);
    std::vector<float> gradient;
    for (const auto& stage : gpu_stages) {
      const std::vector<float> part = stage->last_gradient();
      gradient.insert(gradient.end(), part.begin(), part.end());
    }
    const double loss_diff = relative_difference(result.losses, expected);
    const double gradient_diff = relative_difference(gradient, expected_gradient);
    worst = std::max({worst, loss_diff, gradient_diff});
    identical = identical && same_bits(result.losses, expected) && same_bits(gradient, expected_gradient);
    double loss = 0.0;
    double expected_loss = 0.0;
    for (float l : result.losses) loss += l;
    for (float l : expected) expected_loss += l;
    std::cout << std::setw(4) << step << "  " << std::setw(19) << std::setprecision(8) << loss << "  " << std::setw(23)
              << expected_loss << "  " << std::setw(9) << std::setprecision(2) << loss_diff << "  " << std::setw(13)
              << gradient_diff << '\n';
  }
  const ppsched::TimelineStats stats = ppsched::summarize(world.last_step().timeline);
  std::cout << "last step: makespan " << std::setprecision(4) << stats.makespan << " ms, bubble "
            << std::setprecision(3) << 100.0 * stats.bubble_fraction
            << "% (tiny layers: the time is launch latency, not math)\n";
  std::cout << (identical ? "GPU pipeline matched CPU training" : "GPU pipeline DIFFERED from CPU training")
            << " (bitwise: " << (identical ? "identical" : "DIFFERENT") << "; largest relative difference "
            << std::setprecision(2) << worst << ")\n";
  return identical ? EXIT_SUCCESS : EXIT_FAILURE;
} catch (const std::exception& e) {
  std::cerr << "mlp_training_cuda: " << e.what() << '\n';
  return 2;
}
