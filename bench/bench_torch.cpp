// The libtorch adapter's cost, in two parts. Compare times as ratios within one run; the
// figures and the machine they came from are in docs/performance.md.
//
// 1. Compute inside the pipeline against plain libtorch (issue 27, cause 2): a forward, a
//    loss and a backward per micro-batch of a Sequential, (a) plain libtorch on the
//    benchmark's thread after torch::set_num_threads(1), (b) the same on a thread the
//    program started (where a rank's work runs), and (c) through TorchStage on a one-rank
//    World over CpuBackend, timed per micro-batch (the step over the micro-batch count) and,
//    as the counter compute_ms, the inside of the compute actions from the step's timeline.
//    Two models: an MLP (4 Linear + Tanh, width 256) and a convolutional one (3 residual
//    blocks of Conv2d + BatchNorm2d + ReLU, 16 channels of 8 x 8), at 8 and 32 rows.
// 2. The split backward against the full one (cause 3), on one stage without a pipeline:
//    forward + backward through TorchStage's callables, full (B) or split (BI then BW), for
//    the MLP with its layers as children, the MLP as one child, and the residual blocks.
#include <torch/nn/module.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <ppsched/adapters/torch.hpp>
#include <ppsched/backend/cpu.hpp>
#include <ppsched/runtime/world.hpp>
#include <ppsched/schedule/generators.hpp>

#include <benchmark/benchmark.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <thread>
#include <vector>

namespace {

constexpr std::int64_t width = 256;
constexpr int layers = 4;
constexpr std::int64_t channels = 16;
constexpr std::int64_t side = 8;
constexpr int blocks = 3;

torch::nn::Sequential make_mlp() {
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
  BlockImpl() : inner(register_module("inner", make_mlp())) {}
  torch::Tensor forward(torch::Tensor x) { return inner->forward(x); }
};
TORCH_MODULE(Block);

// A residual block of the kind the convolutional model has.
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

torch::nn::Sequential make_residual() {
  torch::manual_seed(1);
  torch::nn::Sequential s;
  for (int b = 0; b < blocks; ++b) s->push_back(Residual());
  return s;
}

enum class Model : int { mlp, residual };

torch::nn::Sequential make(Model m) { return m == Model::mlp ? make_mlp() : make_residual(); }

std::vector<std::int64_t> shape_of(Model m, std::int64_t rows) {
  return m == Model::mlp ? std::vector<std::int64_t>{rows, width} : std::vector<std::int64_t>{rows, channels, side, side};
}

std::int64_t per_row(Model m) { return m == Model::mlp ? width : channels * side * side; }

std::vector<float> random_floats(std::int64_t n, std::uint64_t seed) {
  torch::manual_seed(seed);
  const torch::Tensor t = torch::randn({n});
  return {t.data_ptr<float>(), t.data_ptr<float>() + n};
}

torch::Tensor mse(const torch::Tensor& output, const torch::Tensor& target) {
  return torch::mse_loss(output, target, torch::Reduction::Sum);
}

// ---------------------------------------------------------------- 1. inside the pipeline

// CPU time of the calling thread, in ms: on this shared machine the wall time of a compute
// action holds whatever else ran meanwhile, its thread's CPU time only its own work.
double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

// One micro-batch as a user of plain libtorch writes it.
void plain_step(torch::nn::Sequential& model, const torch::Tensor& x, const torch::Tensor& target) {
  const torch::Tensor loss = mse(model->forward(x), target);
  loss.backward();
}

void BM_plain(benchmark::State& state) {
  const auto model_kind = static_cast<Model>(state.range(0));
  const std::int64_t rows = state.range(1);
  torch::set_num_threads(1);
  torch::nn::Sequential model = make(model_kind);
  const std::vector<float> in = random_floats(rows * per_row(model_kind), 2);
  const std::vector<float> tg = random_floats(rows * per_row(model_kind), 3);
  const torch::Tensor x = torch::from_blob(const_cast<float*>(in.data()), shape_of(model_kind, rows));
  const torch::Tensor target = torch::from_blob(const_cast<float*>(tg.data()), shape_of(model_kind, rows));
  double cpu_ms = 0.0;
  for (auto _ : state) {
    const double start = thread_cpu_ms();
    plain_step(model, x, target);
    cpu_ms += thread_cpu_ms() - start;
  }
  state.counters["cpu_ms"] = benchmark::Counter(cpu_ms, benchmark::Counter::kAvgIterations);
}

// The same, each iteration timed inside a thread the program started, as a rank's stream
// worker is: no torch::set_num_threads there.
void BM_plain_on_started_thread(benchmark::State& state) {
  const auto model_kind = static_cast<Model>(state.range(0));
  const std::int64_t rows = state.range(1);
  torch::set_num_threads(1);
  torch::nn::Sequential model = make(model_kind);
  const std::vector<float> in = random_floats(rows * per_row(model_kind), 2);
  const std::vector<float> tg = random_floats(rows * per_row(model_kind), 3);
  const torch::Tensor x = torch::from_blob(const_cast<float*>(in.data()), shape_of(model_kind, rows));
  const torch::Tensor target = torch::from_blob(const_cast<float*>(tg.data()), shape_of(model_kind, rows));
  std::int64_t threads_there = 0;
  double cpu_ms = 0.0;
  for (auto _ : state) {
    double seconds = 0.0;
    std::thread t([&] {
      threads_there = at::get_num_threads();
      const double cpu_start = thread_cpu_ms();
      const auto start = std::chrono::steady_clock::now();
      plain_step(model, x, target);
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      cpu_ms += thread_cpu_ms() - cpu_start;
    });
    t.join();
    state.SetIterationTime(seconds);
  }
  state.counters["intra_op_threads"] = static_cast<double>(threads_there);
  state.counters["cpu_ms"] = benchmark::Counter(cpu_ms, benchmark::Counter::kAvgIterations);
}

// One rank, one stage holding the whole model, `m` micro-batches of 1F1B per step: the
// time per micro-batch, the wall time inside its compute actions (compute_ms, from the
// timeline) and their threads' CPU time (cpu_ms: forward, loss and backward, timed inside
// the stage functions).
void BM_adapter_one_rank(benchmark::State& state) {
  const auto model_kind = static_cast<Model>(state.range(0));
  const std::int64_t rows = state.range(1);
  constexpr std::int32_t m = 4;
  torch::set_num_threads(1);
  ppsched::TorchStageOptions options;
  options.input_shape = shape_of(model_kind, rows);
  options.output_shape = options.input_shape;
  options.target_shape = options.input_shape;
  options.loss = mse;
  ppsched::TorchStage stage(make(model_kind), options);
  ppsched::ScheduleRequest request;
  request.ranks = 1;
  request.microbatches = m;
  const ppsched::Schedule schedule = ppsched::make_schedule("1f1b", request);
  ppsched::StageFunctions f = stage.functions();
  double cpu_ms = 0.0;
  f.around_call = [&cpu_ms](const ppsched::StageContext&, ppsched::StageCallRef call) {
    const double start = thread_cpu_ms();
    call();
    cpu_ms += thread_cpu_ms() - start;
  };
  ppsched::CpuCluster cluster(1);
  ppsched::World<ppsched::CpuBackend> world({&cluster.rank(0)}, schedule, {f});
  const std::vector<float> in = random_floats(m * rows * per_row(model_kind), 2);
  const std::vector<float> tg = random_floats(m * rows * per_row(model_kind), 3);
  double compute_ms = 0.0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    const ppsched::StepResult& r = world.run_step({in, tg});
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / m);
    for (const ppsched::Span& s : r.timeline.spans) {
      if (s.action.op == ppsched::Op::F || s.action.op == ppsched::Op::B) compute_ms += s.end - s.start;
    }
  }
  state.counters["compute_ms"] = benchmark::Counter(compute_ms / m, benchmark::Counter::kAvgIterations);
  state.counters["cpu_ms"] = benchmark::Counter(cpu_ms / m, benchmark::Counter::kAvgIterations);
}

void inside_args(benchmark::internal::Benchmark* b) {
  for (int model_kind : {0, 1})
    for (int rows : {8, 32}) b->Args({model_kind, rows});
  b->ArgNames({"model", "rows"})->Unit(benchmark::kMillisecond);
}

// ---------------------------------------------------------------- 2. the split backward

struct Data {
  std::vector<float> input, grad_output, output, grad_input;
  Data(std::int64_t n)
      : input(random_floats(n, 2)), grad_output(random_floats(n, 3)), output(n), grad_input(n) {}
};

void run_stage(benchmark::State& state, torch::nn::Sequential module, Model model_kind, bool split) {
  torch::set_num_threads(1);
  constexpr std::int64_t rows = 32;
  ppsched::TorchStageOptions options;
  options.input_shape = shape_of(model_kind, rows);
  options.output_shape = options.input_shape;
  ppsched::TorchStage stage(module, options);
  const ppsched::StageFunctions f = stage.functions();
  Data d(rows * per_row(model_kind));
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

void BM_mlp_full_backward(benchmark::State& state) { run_stage(state, make_mlp(), Model::mlp, false); }
void BM_mlp_split_backward(benchmark::State& state) { run_stage(state, make_mlp(), Model::mlp, true); }
void BM_mlp_one_child_full_backward(benchmark::State& state) {
  run_stage(state, torch::nn::Sequential(Block()), Model::mlp, false);
}
void BM_mlp_one_child_split_backward(benchmark::State& state) {
  run_stage(state, torch::nn::Sequential(Block()), Model::mlp, true);
}
void BM_residual_full_backward(benchmark::State& state) {
  run_stage(state, make_residual(), Model::residual, false);
}
void BM_residual_split_backward(benchmark::State& state) {
  run_stage(state, make_residual(), Model::residual, true);
}

}  // namespace

BENCHMARK(BM_plain)->Apply(inside_args)->UseRealTime();
BENCHMARK(BM_plain_on_started_thread)->Apply(inside_args)->UseManualTime();
BENCHMARK(BM_adapter_one_rank)->Apply(inside_args)->UseManualTime();
BENCHMARK(BM_mlp_full_backward)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_mlp_split_backward)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_mlp_one_child_full_backward)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_mlp_one_child_split_backward)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_residual_full_backward)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_residual_split_backward)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
