// The pieces of bench_accuracy_torch that are not timing: its three models, the shapes at their
// children's boundaries, the profile it builds, and its configuration list (tests/test_torch.cpp
// checks them; docs/accuracy.md has the figures).
#pragma once

#include <torch/nn/functional/activation.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <ppsched/adapters/torch.hpp>
#include <ppsched/backend/cpu.hpp>
#include <ppsched/partition/partition.hpp>
#include <ppsched/runtime/world.hpp>
#include <ppsched/schedule/generators.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace bench_torch {

constexpr std::int64_t tokens = 16;   // gpt: per row
constexpr std::int64_t hidden = 32;   // gpt: width
constexpr std::int64_t channels = 16; // conv
constexpr std::int64_t side = 8;      // conv: images of side x side

// A pre-norm transformer block with one causal attention head: GPT's shape at a small size.
struct GptBlockImpl : torch::nn::Module {
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, up{nullptr}, down{nullptr};
  GptBlockImpl() {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})));
    qkv = register_module("qkv", torch::nn::Linear(hidden, 3 * hidden));
    proj = register_module("proj", torch::nn::Linear(hidden, hidden));
    up = register_module("up", torch::nn::Linear(hidden, 4 * hidden));
    down = register_module("down", torch::nn::Linear(4 * hidden, hidden));
  }
  torch::Tensor forward(torch::Tensor x) {
    const std::vector<torch::Tensor> q_k_v = qkv(ln1(x)).chunk(3, -1);
    const torch::Tensor causal = torch::ones({x.size(1), x.size(1)}, torch::kBool).triu(1);
    const torch::Tensor scores =
        torch::matmul(q_k_v[0], q_k_v[1].transpose(1, 2)).div(std::sqrt(static_cast<double>(hidden)))
            .masked_fill(causal, -std::numeric_limits<float>::infinity());
    x = x + proj(torch::matmul(torch::softmax(scores, -1), q_k_v[2]));
    return x + down(torch::gelu(up(ln2(x))));
  }
};
TORCH_MODULE(GptBlock);

// A residual block of convolutions with batch norm.
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

struct Model {
  std::string name;
  torch::nn::Sequential net;
  std::function<torch::Tensor(std::int64_t rows)> input;  // one micro-batch of `rows` rows
  // boundary[k]: the shape entering child k without its rows; the last: what the model returns.
  std::vector<std::vector<std::int64_t>> boundary;

  [[nodiscard]] std::vector<std::int64_t> input_shape(std::size_t child, std::int64_t rows) const {
    std::vector<std::int64_t> s{rows};
    s.insert(s.end(), boundary.at(child).begin(), boundary.at(child).end());
    return s;
  }
  [[nodiscard]] std::vector<std::int64_t> output_shape(std::size_t child, std::int64_t rows) const {
    return input_shape(child + 1, rows);
  }
};

[[nodiscard]] inline std::vector<std::string> model_names() { return {"mlp", "gpt", "conv"}; }

[[nodiscard]] inline Model make_model(const std::string& name) {
  torch::manual_seed(1);
  Model m;
  m.name = name;
  if (name == "mlp") {
    for (int l = 0; l < 8; ++l) {
      m.net->push_back(torch::nn::Linear(64, 64));
      m.net->push_back(torch::nn::Tanh());
    }
    m.input = [](std::int64_t rows) { return torch::randn({rows, 64}); };
  } else if (name == "gpt") {
    for (int b = 0; b < 4; ++b) m.net->push_back(GptBlock());
    m.net->push_back(torch::nn::Linear(hidden, hidden));
    m.input = [](std::int64_t rows) { return torch::randn({rows, tokens, hidden}); };
  } else if (name == "conv") {
    m.net->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, channels, 3).padding(1).bias(false)));
    m.net->push_back(torch::nn::BatchNorm2d(channels));
    m.net->push_back(torch::nn::ReLU());
    for (int b = 0; b < 3; ++b) m.net->push_back(Residual());
    m.net->push_back(torch::nn::Flatten());
    m.net->push_back(torch::nn::Linear(channels * side * side, 10));
    m.input = [](std::int64_t rows) { return torch::randn({rows, 3, side, side}); };
  } else {
    throw std::invalid_argument("bench_accuracy_torch: no model \"" + name + "\" (give mlp, gpt, conv or all)");
  }
  // The shapes at every boundary, from one forward of two rows.
  const torch::NoGradGuard no_grad;
  torch::Tensor x = m.input(2);
  m.boundary.emplace_back(x.sizes().begin() + 1, x.sizes().end());
  for (std::size_t k = 0; k < m.net->size(); ++k) {
    x = (m.net->begin() + static_cast<std::ptrdiff_t>(k))->forward(x);
    m.boundary.emplace_back(x.sizes().begin() + 1, x.sizes().end());
  }
  return m;
}

[[nodiscard]] inline ppsched::libtorch::TorchProfile profile_of(const Model& m, std::vector<std::int64_t> rows, int warmup,
                                                      int repetitions) {
  ppsched::libtorch::TorchProfileOptions o;
  o.rows = std::move(rows);
  o.input = m.input;
  o.warmup = warmup;
  o.repetitions = repetitions;
  // make_pipeline's loss (its scale does not change its time), started by the last stage's backward.
  o.loss = [](const torch::Tensor& y, const torch::Tensor& t) { return torch::mse_loss(y, t, torch::Reduction::Sum) / 64.0; };
  return ppsched::libtorch::profile_sequential(m.net, o);
}

struct ConfigKey {
  std::string family;
  std::int32_t ranks = 1;
  std::int32_t microbatches = 1;
  std::int32_t rows = 1;
};

// gpipe, 1f1b and zb-h1 on 1 and 2 ranks, interleaved-1f1b on 2 (two chunks per rank); 2, 8
// and 32 micro-batches of the global batch: 21 per model, no more busy ranks than 2 cores.
[[nodiscard]] inline std::vector<ConfigKey> configurations(std::int64_t global_batch) {
  std::vector<ConfigKey> out;
  for (const std::int32_t p : {1, 2}) {
    for (const char* family : {"gpipe", "1f1b", "zb-h1", "interleaved-1f1b"}) {
      if (p == 1 && std::string(family) == "interleaved-1f1b") continue;
      for (const std::int32_t m : {2, 8, 32}) out.push_back({family, p, m, static_cast<std::int32_t>(global_batch / m)});
    }
  }
  return out;
}

[[nodiscard]] inline ppsched::Schedule schedule_of(const std::string& family, std::int32_t ranks, std::int32_t microbatches) {
  return ppsched::make_schedule(family, ppsched::ScheduleRequest{ranks, microbatches, family == "interleaved-1f1b" ? 2 : 1});
}


// The TorchStages of one configuration: the cut's children, each stage's float boundaries for
// `rows` rows, the last stage's loss summed and scaled by 1 / global_batch. With `counted`,
// every call is charged to its rank (ppsched::libtorch::count_torch_memory).
struct Pipeline {
  std::vector<std::unique_ptr<ppsched::TorchStage>> stages;
  std::vector<ppsched::StageFunctions> functions;
};

[[nodiscard]] inline Pipeline make_pipeline(const Model& model, const ppsched::Partition& cut, std::int64_t rows,
                                            std::int64_t global_batch, bool counted) {
  const double loss_scale = 1.0 / static_cast<double>(global_batch);
  Pipeline p;
  for (std::size_t s = 0; s < cut.stages.size(); ++s) {
    torch::nn::Sequential part;
    for (std::size_t k = cut.stages[s].begin; k < cut.stages[s].end; ++k) {
      part->push_back(*(model.net->begin() + static_cast<std::ptrdiff_t>(k)));
    }
    ppsched::TorchStageOptions o;
    o.input_shape = model.input_shape(cut.stages[s].begin, rows);
    o.output_shape = model.output_shape(cut.stages[s].end - 1, rows);
    if (s + 1 == cut.stages.size()) {
      o.target_shape = o.output_shape;
      o.loss = [loss_scale](const torch::Tensor& y, const torch::Tensor& t) {
        return torch::mse_loss(y, t, torch::Reduction::Sum) * loss_scale;
      };
    }
    p.stages.push_back(std::make_unique<ppsched::TorchStage>(part, o));
    p.functions.push_back(counted ? ppsched::libtorch::count_torch_memory(p.stages.back()->functions())
                                  : p.stages.back()->functions());
  }
  return p;
}

// Of a profile's activation bytes, what a BI leaves for its BW (TorchLayerSample::weight_bytes
// over activation_bytes, summed over the children), at `rows`; 0.5 (the planner's default)
// where nothing was counted. Above 1 where BI holds more than F left (see weight_bytes): the
// cost model's weight_memory_fraction, which may exceed 1 for that reason.
[[nodiscard]] inline double weight_memory_fraction(const ppsched::libtorch::TorchProfile& p, std::int64_t rows) {
  const auto k = static_cast<std::size_t>(std::find(p.rows.begin(), p.rows.end(), rows) - p.rows.begin());
  double kept = 0.0, weight = 0.0;
  for (const ppsched::libtorch::TorchLayerProfile& l : p.layers) {
    if (k >= l.samples.size()) continue;
    kept += l.samples[k].activation_bytes;
    weight += l.samples[k].weight_bytes;
  }
  return kept > 0.0 ? weight / kept : 0.5;
}

// Per rank, bytes of one measured step, counted by TorchMemoryCounter (the rank's tag) from
// what the rank held when the step started.
struct StepMemory {
  std::vector<double> held;     // held between steps (param.grad and what else stays): the step's base
  std::vector<double> settled;  // the most held at the end of a call, over the base: kept activations
  std::vector<double> high;     // the high-water mark over the base, transients inside a call included
  std::vector<double> after;    // held at the end of the step, over the base (0: nothing leaked)
  std::vector<double> backend;  // the executor's buffers: pool, weight gradients, host pool
  double untagged = 0.0;        // what threads without a rank tag allocated over the step and kept
  double ms = 0.0;              // the step's wall time
};

// Runs one step of `world` (its stages counted) and reads the counter.
[[nodiscard]] inline StepMemory counted_step(ppsched::World<ppsched::CpuBackend>& world, const ppsched::Batch& batch) {
  ppsched::libtorch::TorchMemoryCounter& counter = ppsched::libtorch::TorchMemoryCounter::install();
  const int ranks = world.ranks();
  StepMemory m;
  for (int r = 0; r < ranks; ++r) {
    counter.reset_peaks(r);
    m.held.push_back(static_cast<double>(counter.current(r)));
    const ppsched::Executor<ppsched::CpuBackend>& e = world.executor(r);
    m.backend.push_back(4.0 * static_cast<double>(e.plan().total_floats() + e.gradient_floats() + e.host_floats()));
  }
  const auto untagged = static_cast<double>(counter.current(ppsched::libtorch::TorchMemoryCounter::untagged));
  const auto t0 = std::chrono::steady_clock::now();
  (void)world.run_step(batch);
  m.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  m.untagged = static_cast<double>(counter.current(ppsched::libtorch::TorchMemoryCounter::untagged)) - untagged;
  for (int r = 0; r < ranks; ++r) {
    const auto k = static_cast<std::size_t>(r);
    m.settled.push_back(static_cast<double>(counter.settled_peak(r)) - m.held[k]);
    m.high.push_back(static_cast<double>(counter.peak(r)) - m.held[k]);
    m.after.push_back(static_cast<double>(counter.current(r)) - m.held[k]);
  }
  return m;
}

// Bytes of the parameters each rank's stages hold (the tensors' own sizes).
[[nodiscard]] inline std::vector<double> parameter_bytes(const Pipeline& p, const ppsched::Schedule& s) {
  std::vector<double> out(static_cast<std::size_t>(s.ranks), 0.0);
  for (std::size_t st = 0; st < p.stages.size(); ++st) {
    for (const torch::Tensor& t : p.stages[st]->parameters()) {
      out[static_cast<std::size_t>(s.placement[st])] += static_cast<double>(t.nbytes());
    }
  }
  return out;
}

}  // namespace bench_torch
