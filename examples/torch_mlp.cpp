// Pipelined training of a libtorch model. An 8-layer torch::nn::Sequential MLP is cut into
// stages, each stage's layers become a ppsched::TorchStage (include/ppsched/adapters/torch.hpp:
// forward and backward by autograd, a torch optimizer per stage), and the chosen schedule runs
// on p CPU ranks. Every step is checked against the same model trained without a pipeline.
//
//   torch_mlp [schedule] [ranks] [steps]      e.g.  torch_mlp zb-v 4 20
//
// Built only where libtorch is found (Debian: libtorch-dev); see docs/torch.md.
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <ppsched/adapters/torch.hpp>
#include <ppsched/backend/cpu.hpp>
#include <ppsched/runtime/world.hpp>
#include <ppsched/schedule/generators.hpp>

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <iomanip>
#include <iostream>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace {

constexpr std::int64_t rows = 4;  // per micro-batch
const std::vector<std::int64_t> widths{8, 32, 32, 32, 32, 32, 32, 32, 4};

torch::nn::Sequential make_mlp() {
  torch::nn::Sequential model;
  for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
    model->push_back(torch::nn::Linear(widths[l], widths[l + 1]));
    model->push_back(torch::nn::Tanh());
  }
  return model;
}

std::span<const float> floats(const torch::Tensor& t) {
  return {t.data_ptr<float>(), static_cast<std::size_t>(t.numel())};
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string family_name = argc > 1 ? argv[1] : "1f1b";
  const int ranks = argc > 2 ? std::atoi(argv[2]) : 4;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 20;
  torch::set_num_threads(1);  // the rank threads are the parallelism

  const ppsched::FamilyInfo& family = ppsched::family_info(family_name);
  ppsched::ScheduleRequest request;
  request.ranks = ranks;
  request.microbatches = 4 * ranks;
  request.chunks = family.chunks_for(2);
  const ppsched::Schedule schedule = ppsched::make_schedule(family.name, request);
  const std::int32_t stages = schedule.stages();
  const std::int32_t m = schedule.microbatches;
  const double learning_rate = 0.1;
  auto loss = [m](const torch::Tensor& output, const torch::Tensor& target) {
    return torch::mse_loss(output, target, torch::Reduction::Sum) * (1.0 / static_cast<double>(rows * m));
  };

  torch::manual_seed(1);
  torch::nn::Sequential model = make_mlp();
  // The unpipelined reference starts from the same weights.
  auto reference = torch::nn::Sequential(std::dynamic_pointer_cast<torch::nn::SequentialImpl>(model->clone()));
  torch::optim::SGD reference_sgd(reference->parameters(), torch::optim::SGDOptions(learning_rate));

  // readme-begin
  // Stage s: layers [first, last) of the model (a Linear and a Tanh each), sharing the
  // model's modules, with its own optimizer; the last stage adds the loss.
  std::vector<std::unique_ptr<torch::optim::SGD>> optimizers;
  std::vector<std::unique_ptr<ppsched::TorchStage>> torch_stages;
  std::vector<ppsched::StageFunctions> functions;
  const auto layers = static_cast<std::int64_t>(widths.size() - 1);
  for (std::int32_t s = 0; s < stages; ++s) {
    const std::int64_t first = layers * s / stages;
    const std::int64_t last = layers * (s + 1) / stages;
    torch::nn::Sequential part;
    for (std::int64_t c = 2 * first; c < 2 * last; ++c) part->push_back(*(model->begin() + c));
    optimizers.push_back(
        std::make_unique<torch::optim::SGD>(part->parameters(), torch::optim::SGDOptions(learning_rate)));

    ppsched::TorchStageOptions options;
    options.input_shape = {rows, widths[static_cast<std::size_t>(first)]};
    options.output_shape = {rows, widths[static_cast<std::size_t>(last)]};
    if (s + 1 == stages) {
      options.target_shape = options.output_shape;
      options.loss = loss;
    }
    options.optimizer = optimizers.back().get();
    torch_stages.push_back(std::make_unique<ppsched::TorchStage>(part, options));
    functions.push_back(torch_stages.back()->functions());
  }

  ppsched::CpuCluster cluster(ranks);
  std::vector<ppsched::CpuBackend*> backends;
  for (int r = 0; r < ranks; ++r) backends.push_back(&cluster.rank(r));
  ppsched::World<ppsched::CpuBackend> world(backends, schedule, functions);
  // readme-end

  // The data: a fixed random teacher network gives the targets.
  torch::manual_seed(99);
  torch::nn::Sequential teacher = make_mlp();
  const torch::NoGradGuard no_grad_for_data;

  std::cout << "schedule " << family.name << ": " << ranks << " ranks, " << stages << " stages, " << m
            << " micro-batches of " << rows << " rows\n";
  std::cout << "step  loss (pipelined)  loss (unpipelined)  equal\n";
  bool all_equal = true;
  for (int step = 0; step < steps; ++step) {
    const torch::Tensor inputs = torch::randn({m * rows, widths.front()});
    const torch::Tensor targets = teacher->forward(inputs).contiguous();

    const ppsched::StepResult& result = world.run_step({floats(inputs), floats(targets)});

    std::vector<float> expected;
    {
      const torch::AutoGradMode grad_mode(true);
      reference_sgd.zero_grad();
      for (std::int32_t mb = 0; mb < m; ++mb) {
        const torch::Tensor l =
            loss(reference->forward(inputs.narrow(0, mb * rows, rows)), targets.narrow(0, mb * rows, rows));
        l.backward();
        expected.push_back(l.item<float>());
      }
      reference_sgd.step();
    }
    double sum = 0.0;
    double expected_sum = 0.0;
    for (float x : result.losses) sum += x;
    for (float x : expected) expected_sum += x;
    const bool equal = result.losses == expected;
    all_equal = all_equal && equal;
    std::cout << std::setw(4) << step << "  " << std::setw(16) << std::setprecision(8) << sum << "  " << std::setw(18)
              << expected_sum << "  " << (equal ? "yes" : "NO") << '\n';
  }
  bool same_weights = true;
  const auto a = model->parameters();
  const auto b = reference->parameters();
  for (std::size_t i = 0; i < a.size(); ++i) same_weights = same_weights && torch::equal(a[i], b[i]);
  std::cout << (all_equal && same_weights ? "pipelined training matched unpipelined training bit for bit\n"
                                          : "pipelined training DIFFERED from unpipelined training\n");
  return all_equal && same_weights ? EXIT_SUCCESS : EXIT_FAILURE;
} catch (const std::exception& e) {
  std::cerr << "torch_mlp: " << e.what() << '\n';
  return 2;
}
