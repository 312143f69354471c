// Profiling a libtorch model for the planner: every child of a torch::nn::Sequential (a small
// convolutional net with batch norms and residual blocks) is timed as the adapter runs it
// (forward, full backward, and the split BI / BW) at several micro-batch sizes, with warm-up
// and repetitions, and its parameter, activation and output bytes are measured
// (ppsched::libtorch::profile_sequential, include/ppsched/adapters/torch.hpp). It prints the medians
// and spreads, and writes the Profile at one size as JSON for the planner:
//
//   torch_profile [out.json] [rows of the profile] [more sizes...]
//   torch_profile measured.json 8 2 32
//   ppsched-plan --profile measured.json --devices 2 --global-batch 64
//
// Built only where libtorch and nlohmann-json are found; see docs/torch.md.
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>
#include <ppsched/adapters/torch.hpp>
#include <ppsched/graph/profile_json.hpp>
#include <ppsched/runtime/profile.hpp>

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

constexpr std::int64_t channels = 16;
constexpr std::int64_t side = 16;

// Conv, batch norm and ReLU twice, with the input added back.
struct ResidualImpl : torch::nn::Module {
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  ResidualImpl() {
    const auto conv = torch::nn::Conv2dOptions(channels, channels, 3).padding(1).bias(false);
    conv1 = register_module("conv1", torch::nn::Conv2d(conv));
    conv2 = register_module("conv2", torch::nn::Conv2d(conv));
    bn1 = register_module("bn1", torch::nn::BatchNorm2d(channels));
    bn2 = register_module("bn2", torch::nn::BatchNorm2d(channels));
  }
  torch::Tensor forward(torch::Tensor x) {
    const torch::Tensor h = torch::relu(bn1(conv1(x)));
    return torch::relu(x + bn2(conv2(h)));
  }
};
TORCH_MODULE(Residual);

torch::nn::Sequential make_model() {
  torch::manual_seed(1);
  torch::nn::Sequential model(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, channels, 3).padding(1)),
                              torch::nn::BatchNorm2d(channels), torch::nn::ReLU());
  for (int b = 0; b < 4; ++b) model->push_back(Residual());
  model->push_back(torch::nn::AdaptiveAvgPool2d(torch::nn::AdaptiveAvgPool2dOptions(1)));
  model->push_back(torch::nn::Flatten());
  model->push_back(torch::nn::Linear(channels, 10));
  return model;
}

std::string timing(const ppsched::profiling::TimeSpread& t) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(3) << t.median << " [" << t.min << ", " << t.max << "]";
  return s.str();
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string path = argc > 1 ? argv[1] : "measured.json";
  std::vector<std::int64_t> rows;
  for (int a = 2; a < argc; ++a) rows.push_back(std::atoll(argv[a]));
  if (rows.empty()) rows = {8, 2, 32};
  torch::set_num_threads(1);  // as each rank of a CPU pipeline runs

  // readme-begin
  ppsched::libtorch::TorchProfileOptions options;
  options.rows = rows;  // micro-batch sizes
  options.input = [](std::int64_t r) { return torch::randn({r, 3, side, side}); };
  options.warmup = 2;
  options.repetitions = 7;
  // The last stage's backward starts with the loss: timed into the last child's B and BI.
  options.target = [](std::int64_t r) { return torch::randint(10, {r}); };  // class labels
  options.loss = [](const torch::Tensor& y, const torch::Tensor& t) { return torch::nn::functional::cross_entropy(y, t); };
  const ppsched::libtorch::TorchProfile measured = ppsched::libtorch::profile_sequential(make_model(), options);
  ppsched::Profile profile = measured.at(rows.front());  // what ppsched-plan reads
  // Ranks on CPU threads share the cores: how much slower one micro-batch of the whole model
  // runs while two run at once, each thread on its own instance.
  std::vector<torch::nn::Sequential> copies{make_model(), make_model()};
  const torch::Tensor input = options.input(rows.front());
  profile.fixed_costs.concurrent_slowdown = ppsched::profiling::measure_concurrent_slowdown(
      [&](std::int32_t thread) { copies[static_cast<std::size_t>(thread)]->forward(input).sum().backward(); }, {.ranks = 2});
  std::ofstream(path) << ppsched::profile_to_json(profile) << '\n';
  // readme-end
  // What the planner reads back is what was measured: no hand editing between.
  if (ppsched::load_profile(path) != profile) {
    std::cerr << "torch_profile: " << path << " does not read back as the measured profile\n";
    return EXIT_FAILURE;
  }

  std::cout << "child            rows  forward (ms)            B                       BI                      BW"
               "                      activation B  output B\n";
  for (const ppsched::libtorch::TorchLayerProfile& l : measured.layers) {
    for (const ppsched::libtorch::TorchLayerSample& s : l.samples) {
      std::cout << std::left << std::setw(16) << l.name << std::right << std::setw(5) << s.rows << "  " << std::left
                << std::setw(24) << timing(s.forward) << std::setw(24) << timing(s.backward) << std::setw(24)
                << timing(s.backward_input) << std::setw(24) << timing(s.backward_weight) << std::right
                << std::setw(12) << s.activation_bytes << std::setw(10) << s.output_bytes << '\n';
    }
  }
  std::cout << "two ranks computing at once: each " << profile.fixed_costs.concurrent_slowdown.back() << "x slower than alone\n";
  std::cout << "median [min, max] of " << options.repetitions << " repetitions after " << options.warmup
            << " warm-up runs; wrote the profile at " << rows.front() << " rows to " << path << '\n';
  return EXIT_SUCCESS;
} catch (const std::exception& e) {
  std::cerr << "torch_profile: " << e.what() << '\n';
  return 2;
}
