// The libtorch adapter's cost on one stage (no pipeline, one intra-op thread): a forward and
// a backward of 4 Linear + Tanh layers through TorchStage's callables, against the same
// passes with autograd called directly. Variants: the full backward; the split backward
// (backward_input, then backward_weight) with the layers as the Sequential's children; and
// the split backward with the stage given as one child, where backward_weight runs the
// child's whole backward again (docs/torch.md). Compare the times as ratios within one run.
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>
#include <ppsched/adapters/torch.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace {

constexpr std::int64_t width = 256;
constexpr std::int64_t rows = 64;
constexpr int layers = 4;

torch::nn::Sequential make_layers() {
  torch::manual_seed(1);
  torch::nn::Sequential s;
  for (int l = 0; l < layers; ++l) {
    s->push_back(torch::nn::Linear(width, width));
    s->push_back(torch::nn::Tanh());
  }
  return s;
}

// The same layers behind one forward: a Sequential cannot be a child of a Sequential.
struct BlockImpl : torch::nn::Module {
  torch::nn::Sequential inner;
  BlockImpl() : inner(register_module("inner", make_layers())) {}
  torch::Tensor forward(torch::Tensor x) { return inner->forward(x); }
};
TORCH_MODULE(Block);

struct Data {
  std::vector<float> input = std::vector<float>(static_cast<std::size_t>(rows * width));
  std::vector<float> grad_output = std::vector<float>(static_cast<std::size_t>(rows * width));
  std::vector<float> output = std::vector<float>(static_cast<std::size_t>(rows * width));
  std::vector<float> grad_input = std::vector<float>(static_cast<std::size_t>(rows * width));
  Data() {
    torch::manual_seed(2);
    const torch::Tensor x = torch::randn({rows * width});
    const torch::Tensor g = torch::randn({rows * width});
    std::copy(x.data_ptr<float>(), x.data_ptr<float>() + x.numel(), input.begin());
    std::copy(g.data_ptr<float>(), g.data_ptr<float>() + g.numel(), grad_output.begin());
  }
};

ppsched::TorchStageOptions stage_options() {
  ppsched::TorchStageOptions o;
  o.input_shape = {rows, width};
  o.output_shape = {rows, width};
  return o;
}

void BM_autograd_direct(benchmark::State& state) {
  torch::set_num_threads(1);
  torch::nn::Sequential model = make_layers();
  const Data d;
  std::vector<torch::Tensor> wanted;
  const torch::Tensor g = torch::from_blob(const_cast<float*>(d.grad_output.data()), {rows, width});
  for (auto _ : state) {
    const torch::Tensor x = torch::from_blob(const_cast<float*>(d.input.data()), {rows, width}).requires_grad_(true);
    wanted = model->parameters();
    wanted.insert(wanted.begin(), x);
    const torch::Tensor y = model->forward(x);
    auto grads = torch::autograd::grad({y}, wanted, {g});
    benchmark::DoNotOptimize(grads.front().data_ptr());
  }
}

void run_stage(benchmark::State& state, torch::nn::Sequential module, bool split) {
  torch::set_num_threads(1);
  ppsched::TorchStage stage(module, stage_options());
  const ppsched::StageFunctions f = stage.functions();
  Data d;
  std::vector<float> weight_grad(f.weight_grad_size);
  for (auto _ : state) {
    std::fill(weight_grad.begin(), weight_grad.end(), 0.0f);  // as the executor zeroes it
    f.forward(0, d.input, d.output);
    if (split) {
      f.backward_input(0, d.input, d.grad_output, d.grad_input);
      f.backward_weight(0, d.input, d.grad_output, weight_grad);
    } else {
      f.backward(0, d.input, d.grad_output, d.grad_input, weight_grad);
    }
    benchmark::DoNotOptimize(weight_grad.data());
  }
}

void BM_adapter_full_backward(benchmark::State& state) { run_stage(state, make_layers(), false); }
void BM_adapter_split_backward(benchmark::State& state) { run_stage(state, make_layers(), true); }
void BM_adapter_split_backward_one_child(benchmark::State& state) {
  run_stage(state, torch::nn::Sequential(Block()), true);
}

}  // namespace

BENCHMARK(BM_autograd_direct)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_adapter_full_backward)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_adapter_split_backward)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_adapter_split_backward_one_child)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
