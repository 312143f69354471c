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
#include <ppsched/schedule/generators.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
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

[[nodiscard]] inline ppsched::TorchProfile profile_of(const Model& m, std::vector<std::int64_t> rows, int warmup,
                                                      int repetitions) {
  ppsched::TorchProfileOptions o;
  o.rows = std::move(rows);
  o.input = m.input;
  o.warmup = warmup;
  o.repetitions = repetitions;
  return ppsched::profile_sequential(m.net, o);
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

}  // namespace bench_torch
