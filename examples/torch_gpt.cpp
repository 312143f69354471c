// Pipelined training of a small GPT-like libtorch model: int64 token ids of a different length
// in every micro-batch enter stage 0's Embedding, hidden states [tokens, hidden] cross the
// stage boundaries with that length in their header, the last stage projects onto the
// vocabulary with the embedding's weight and takes the cross-entropy against int64 labels
// (the next tokens), which reach it as a side input. The embedding weight is tied: stage 0
// and the last stage each keep a copy, as separate ranks would, and ppsched sums the two
// gradients after the flush so both copies take the same update. Every transfer moves its
// micro-batch's tokens, not the declared maximum (Batch::sizes). Every step is checked bit
// for bit against the same model trained without a pipeline.
//
//   torch_gpt [schedule] [ranks] [steps]      e.g.  torch_gpt zb-v 2 10
//   torch_gpt plan [ranks] [steps]            a plan every step (issue 42)
//
// With `plan`, each step is a batch of sequences of random lengths, packed into micro-batches
// of at most max_tokens tokens (split_batch), whose schedule and order plan_step chooses from
// a cost model of the layers' arithmetic; the World takes each step's schedule
// (World::set_schedule) and its pools grow only when a step needs more than any before.
// Built only where libtorch is found (Debian: libtorch-dev); see docs/torch.md.
#include <torch/nn/functional/linear.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <ppsched/adapters/torch.hpp>
#include <ppsched/backend/cpu.hpp>
#include <ppsched/plan/varlen.hpp>
#include <ppsched/runtime/world.hpp>
#include <ppsched/schedule/generators.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <iomanip>
#include <iostream>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace {

constexpr std::int64_t vocabulary = 64;
constexpr std::int64_t hidden = 32;
constexpr std::int64_t max_tokens = 16;  // per micro-batch

// The output projection onto the vocabulary, with a weight of the embedding's shape. It starts
// as a copy of the embedding's weight: the stage that holds it keeps its own (a rank of its
// own would), and the tie keeps the two equal.
struct TiedOutputImpl : torch::nn::Module {
  explicit TiedOutputImpl(const torch::Tensor& embedding_weight)
      : weight(register_parameter("weight", embedding_weight.detach().clone())) {}
  torch::Tensor forward(const torch::Tensor& x) { return torch::nn::functional::linear(x, weight); }
  torch::Tensor weight;
};
TORCH_MODULE(TiedOutput);

// The model as units (the embedding, blocks of Linear + Tanh, the output); a stage takes
// whole units. Two models built with one seed start equal.
struct Gpt {
  torch::nn::Embedding embedding{nullptr};
  std::vector<torch::nn::Linear> blocks;
  TiedOutput output{nullptr};

  Gpt(std::uint64_t seed, std::int64_t block_count) {
    torch::manual_seed(seed);
    embedding = torch::nn::Embedding(vocabulary, hidden);
    for (std::int64_t b = 0; b < block_count; ++b) blocks.push_back(torch::nn::Linear(hidden, hidden));
    output = TiedOutput(embedding->weight);
  }
  [[nodiscard]] std::int64_t units() const { return static_cast<std::int64_t>(blocks.size()) + 2; }
  // Units [first, last), sharing the modules (and parameters) with this model.
  [[nodiscard]] torch::nn::Sequential part(std::int64_t first, std::int64_t last) const {
    torch::nn::Sequential s;
    for (std::int64_t u = first; u < last; ++u) {
      if (u == 0) {
        s->push_back(embedding);
      } else if (u + 1 == units()) {
        s->push_back(output);
      } else {
        s->push_back(blocks[static_cast<std::size_t>(u - 1)]);
        s->push_back(torch::nn::Tanh());
      }
    }
    return s;
  }
};

// What a micro-batch of `tokens` tokens costs each of `stages` stages, from the layers'
// multiply-adds per token (the embedding a lookup, a block hidden^2, the output hidden x
// vocabulary), the backward twice the forward, split evenly between BI and BW: enough for
// plan_step to weigh the micro-batches. A real run fits measured profiles instead
// (fit_length_costs, docs/plan.md).
ppsched::plan::LengthCosts arithmetic_costs(const Gpt& model, std::int32_t stages) {
  ppsched::plan::LengthCosts costs;
  for (std::int32_t s = 0; s < stages; ++s) {
    double per_token = 0.0;
    for (std::int64_t u = model.units() * s / stages; u < model.units() * (s + 1) / stages; ++u) {
      per_token += u == 0 ? hidden : u + 1 == model.units() ? hidden * vocabulary : hidden * hidden;
    }
    ppsched::plan::StageLengthFit f;
    f.forward = {1000.0, per_token};  // a fixed cost per call, then per token
    f.backward_input = {1000.0, per_token};
    f.backward_weight = {1000.0, per_token};
    f.activation_bytes = {0.0, 4.0 * hidden};
    f.output_bytes = {0.0, 4.0 * hidden};
    costs.stages.push_back(f);
  }
  return costs;
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string family_name = argc > 1 ? argv[1] : "1f1b";
  const int ranks = argc > 2 ? std::atoi(argv[2]) : 2;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 10;
  torch::set_num_threads(1);  // the rank threads are the parallelism
  const bool plan_each_step = family_name == "plan";

  const ppsched::FamilyInfo& family = ppsched::family_info(plan_each_step ? "1f1b" : family_name);
  ppsched::ScheduleRequest request;
  request.ranks = ranks;
  request.microbatches = 4 * ranks;
  request.chunks = family.chunks_for(2);
  const ppsched::Schedule schedule = ppsched::make_schedule(family.name, request);
  const std::int32_t stages = schedule.stages();
  const double learning_rate = 0.5;
  // Summed over the tokens, scaled by a count fixed for the step, so that micro-batches add
  // up as one batch would.
  double loss_scale = 1.0;
  auto loss = [&loss_scale](const torch::Tensor& logits, const torch::Tensor& labels) {
    return torch::nn::functional::cross_entropy(
               logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)) *
           loss_scale;
  };

  const std::int64_t block_count = std::max<std::int64_t>(2, stages - 2);
  const Gpt model(1, block_count);
  // The unpipelined reference starts from the same weights, its two copies of the tied
  // weight too.
  const Gpt reference(1, block_count);
  torch::nn::Sequential reference_model = reference.part(0, reference.units());
  torch::optim::SGD reference_sgd(reference_model->parameters(), torch::optim::SGDOptions(learning_rate));

  // readme-begin
  // Token ids enter stage 0, hidden states cross every boundary, logits leave the last
  // stage: one tensor each, its first dimension (the tokens) varying per micro-batch.
  const ppsched::libtorch::TorchTensorSpec ids{torch::kInt64, {max_tokens}, /*variable_dim=*/0};
  const ppsched::libtorch::TorchTensorSpec states{torch::kFloat32, {max_tokens, hidden}, 0};
  const ppsched::libtorch::TorchTensorSpec logits{torch::kFloat32, {max_tokens, vocabulary}, 0};

  std::vector<std::unique_ptr<torch::optim::SGD>> optimizers;
  std::vector<std::unique_ptr<ppsched::TorchStage>> torch_stages;
  std::vector<ppsched::StageFunctions> functions;
  for (std::int32_t s = 0; s < stages; ++s) {
    torch::nn::Sequential part = model.part(model.units() * s / stages, model.units() * (s + 1) / stages);
    optimizers.push_back(
        std::make_unique<torch::optim::SGD>(part->parameters(), torch::optim::SGDOptions(learning_rate)));
    ppsched::TorchStageOptions options;
    options.input_tensors = {s == 0 ? ids : states};
    options.output_tensors = {s + 1 == stages ? logits : states};
    if (s + 1 == stages) {
      options.target_side_input = 0;  // Batch::side_inputs[0]: the labels, max_tokens int64 per micro-batch
      options.target_tensor = ids;    // one label per token of the micro-batch
      options.loss = loss;
    }
    options.optimizer = optimizers.back().get();
    torch_stages.push_back(std::make_unique<ppsched::TorchStage>(part, options));
    functions.push_back(torch_stages.back()->functions());
  }

  // The embedding's weight on stage 0 and its copy in the last stage's output layer.
  ppsched::ExecutorOptions executor_options;
  executor_options.tied_weights = {
      ppsched::libtorch::tie_parameters({{0, torch_stages.front().get(), model.embedding->weight},
                               {stages - 1, torch_stages.back().get(), model.output->weight}})};

  ppsched::CpuCluster cluster(ranks);
  std::vector<ppsched::CpuBackend*> backends;
  for (int r = 0; r < ranks; ++r) backends.push_back(&cluster.rank(r));
  ppsched::World<ppsched::CpuBackend> world(backends, schedule, functions, executor_options);
  // readme-end

  const ppsched::plan::LengthCosts costs = arithmetic_costs(model, stages);
  std::mt19937 random(7);
  std::cout << (plan_each_step ? std::string("a plan every step") : "schedule " + std::string(family.name)) << ": " << ranks
            << " ranks, " << stages << " stages, micro-batches of 1 to " << max_tokens << " tokens; the tie is "
            << (schedule.rank_of(0) == schedule.rank_of(stages - 1) ? "on one rank" : "across ranks") << '\n';
  std::cout << "step  schedule          m  tokens  loss (pipelined)  loss (unpipelined)  equal\n";
  bool all_equal = true;
  for (int step = 0; step < steps; ++step) {
    // A step's micro-batches, each a list of sequences with one token more than its length
    // (the labels are the next tokens).
    std::vector<std::vector<torch::Tensor>> microbatches;
    if (plan_each_step) {
      // Sequences of 1 to max_tokens tokens, packed into micro-batches of at most max_tokens;
      // plan_step chooses their schedule and order.
      std::vector<std::int64_t> lengths(static_cast<std::size_t>(3 * ranks + random() % (6 * ranks)));
      std::vector<torch::Tensor> sequences;
      for (std::int64_t& length : lengths) {
        length = 1 + static_cast<std::int64_t>(random() % max_tokens);
        sequences.push_back(torch::randint(0, vocabulary, {length + 1}, torch::kInt64));
      }
      ppsched::plan::SplitOptions split_options;
      split_options.token_budget = max_tokens;
      const ppsched::plan::Split split =
          ppsched::plan::split_batch(lengths, costs, ppsched::plan::SplitMethod::packed, split_options);
      const ppsched::plan::StepPlan plan = ppsched::plan::plan_step(costs, split.microbatches);
      const ppsched::PoolGrowth growth = world.set_schedule(plan.search.lowered);
      if (growth.grew()) {
        std::cout << "      the pools grew by " << growth.buffers << " buffers (" << growth.floats << " floats) and "
                  << growth.events << " events for a step larger than any before\n";
      }
      for (const ppsched::plan::Microbatch& mb : plan.microbatches) {
        microbatches.emplace_back();
        for (std::size_t i : mb.sequences) microbatches.back().push_back(sequences[i]);
      }
    } else {
      for (std::int32_t k = 0; k < schedule.microbatches; ++k) {
        const std::int64_t length = 1 + (7 * k + 5 * step) % max_tokens;
        microbatches.push_back({torch::randint(0, vocabulary, {length + 1}, torch::kInt64)});
      }
    }
    const auto m = static_cast<std::int32_t>(microbatches.size());
    loss_scale = 1.0 / static_cast<double>(max_tokens * m);
    // Micro-batch k: its sequences one after the other (the model is per token); the labels
    // padded to max_tokens per micro-batch (the side input); each stage's size of it.
    std::vector<torch::Tensor> inputs;
    std::vector<torch::Tensor> labels;
    std::vector<std::int64_t> padded_labels(static_cast<std::size_t>(m * max_tokens), -1);
    std::vector<ppsched::MicrobatchSize> sizes(static_cast<std::size_t>(stages * m));
    std::int64_t tokens = 0;
    for (std::int32_t k = 0; k < m; ++k) {
      std::vector<torch::Tensor> x;
      std::vector<torch::Tensor> y;
      for (const torch::Tensor& sequence : microbatches[static_cast<std::size_t>(k)]) {
        x.push_back(sequence.narrow(0, 0, sequence.numel() - 1));
        y.push_back(sequence.narrow(0, 1, sequence.numel() - 1));
      }
      inputs.push_back(torch::cat(x).contiguous());
      labels.push_back(torch::cat(y).contiguous());
      const std::int64_t length = inputs.back().numel();
      std::copy_n(labels.back().data_ptr<std::int64_t>(), length, padded_labels.begin() + k * max_tokens);
      for (std::int32_t s = 0; s < stages; ++s) {
        sizes[static_cast<std::size_t>(s * m + k)] = torch_stages[static_cast<std::size_t>(s)]->size(length);
      }
      tokens += length;
    }
    const std::vector<float> payloads = ppsched::libtorch::torch_payloads(ids, inputs);
    const ppsched::SideInput side_inputs[] = {ppsched::SideInput::of<std::int64_t>(padded_labels, max_tokens)};

    const ppsched::StepResult& result = world.run_step({payloads, {}, side_inputs, sizes});

    // Unpipelined: autograd accumulates each copy's gradient over the micro-batches; the
    // tie's gradient is the sum of the two, as ppsched forms it, given to both copies.
    std::vector<float> expected;
    reference_sgd.zero_grad();
    for (std::int32_t k = 0; k < m; ++k) {
      const auto i = static_cast<std::size_t>(k);
      const torch::Tensor l = loss(reference_model->forward(inputs[i]), labels[i]);
      l.backward();
      expected.push_back(l.item<float>());
    }
    {
      const torch::NoGradGuard no_grad;
      const torch::Tensor tied = reference.embedding->weight.grad() + reference.output->weight.grad();
      reference.embedding->weight.mutable_grad().copy_(tied);
      reference.output->weight.mutable_grad().copy_(tied);
    }
    reference_sgd.step();

    double sum = 0.0;
    double expected_sum = 0.0;
    for (float x : result.losses) sum += x;
    for (float x : expected) expected_sum += x;
    const bool equal = result.losses == expected;
    all_equal = all_equal && equal;
    std::cout << std::setw(4) << step << "  " << std::left << std::setw(16) << world.schedule().name << std::right
              << std::setw(3) << m << "  " << std::setw(6) << tokens << "  " << std::setw(16) << std::setprecision(8)
              << sum << "  " << std::setw(18) << expected_sum << "  " << (equal ? "yes" : "NO") << '\n';
  }
  const auto a = model.part(0, model.units())->parameters();
  const auto b = reference_model->parameters();
  bool same_weights = a.size() == b.size();
  for (std::size_t i = 0; same_weights && i < a.size(); ++i) same_weights = torch::equal(a[i], b[i]);
  const bool tie_held = torch::equal(model.embedding->weight, model.output->weight);
  std::cout << "the two copies of the tied weight are " << (tie_held ? "equal" : "DIFFERENT") << '\n';
  const bool ok = all_equal && same_weights && tie_held;
  std::cout << (ok ? "pipelined training matched unpipelined training bit for bit\n"
                   : "pipelined training DIFFERED from unpipelined training\n");
  return ok ? EXIT_SUCCESS : EXIT_FAILURE;
} catch (const std::exception& e) {
  std::cerr << "torch_gpt: " << e.what() << '\n';
  return 2;
}
