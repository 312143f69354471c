// The libtorch adapter (include/ppsched/adapters/torch.hpp): an 8-layer torch::nn::Sequential
// MLP split over the stages of every training schedule family on 4 CPU ranks, 16
// micro-batches, trained a few steps and compared with the same model trained unpipelined
// (every micro-batch through the whole model, gradients accumulated by autograd in
// micro-batch order, one SGD step): losses and parameters must be bit-identical. Built only
// where libtorch is found (tests/meson.build); suite 'torch'.
// First, so that this file proves the adapter header compiles on its own (the headers-alone
// test leaves it out: it needs libtorch).
#include <ppsched/adapters/torch.hpp>
// Debian's libtorch logs through glog, whose CHECK macro replaces Catch2's where torch's
// headers come later: every CHECK would pass silently. Catch2's macros are used prefixed.
#define CATCH_CONFIG_PREFIX_ALL
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <memory>
#include <ppsched/backend/cpu.hpp>
#include <ppsched/runtime/world.hpp>
#include <ppsched/schedule/generators.hpp>
#include <string>
#include <vector>

namespace {

constexpr std::int64_t layers = 8;
constexpr std::int64_t widths[layers + 1] = {8, 16, 16, 16, 16, 16, 16, 16, 4};
constexpr std::int64_t rows = 2;  // per micro-batch
constexpr double learning_rate = 0.3;

// Linear + Tanh per layer: children 2l and 2l+1.
torch::nn::Sequential make_model(std::uint64_t seed) {
  torch::manual_seed(seed);
  torch::nn::Sequential model;
  for (std::int64_t l = 0; l < layers; ++l) {
    model->push_back(torch::nn::Linear(widths[l], widths[l + 1]));
    model->push_back(torch::nn::Tanh());
  }
  return model;
}

torch::nn::Sequential deep_copy(const torch::nn::Sequential& model) {
  return torch::nn::Sequential(std::dynamic_pointer_cast<torch::nn::SequentialImpl>(model->clone()));
}

// Children [2 first, 2 last) of `model`, sharing their modules (and parameters) with it.
torch::nn::Sequential layers_of(const torch::nn::Sequential& model, std::int64_t first, std::int64_t last) {
  torch::nn::Sequential part;
  for (std::int64_t c = 2 * first; c < 2 * last; ++c) part->push_back(*(model->begin() + c));  // a shallow copy
  return part;
}

torch::Tensor loss_of(const torch::Tensor& output, const torch::Tensor& target, std::int32_t microbatches) {
  return torch::mse_loss(output, target, torch::Reduction::Sum) * (1.0 / static_cast<double>(rows * microbatches));
}

struct StepData {
  torch::Tensor inputs;   // [m * rows, widths[0]]
  torch::Tensor targets;  // [m * rows, widths[layers]]
};

StepData data(std::int32_t m, int step) {
  torch::manual_seed(1000 + static_cast<std::uint64_t>(step));
  return {torch::randn({m * rows, widths[0]}), 0.8 * torch::tanh(torch::randn({m * rows, widths[layers]}))};
}

std::span<const float> floats(const torch::Tensor& t) {
  return {t.data_ptr<float>(), static_cast<std::size_t>(t.numel())};
}

// Unpipelined: every micro-batch through the whole model in order, autograd accumulating the
// gradients into param.grad, then one SGD step. Returns each micro-batch's loss.
std::vector<float> train_unpipelined(torch::nn::Sequential& model, torch::optim::SGD& sgd, const StepData& d,
                                     std::int32_t m) {
  sgd.zero_grad();
  std::vector<float> losses;
  for (std::int32_t mb = 0; mb < m; ++mb) {
    const torch::Tensor loss =
        loss_of(model->forward(d.inputs.narrow(0, mb * rows, rows)), d.targets.narrow(0, mb * rows, rows), m);
    loss.backward();
    losses.push_back(loss.item<float>());
  }
  sgd.step();
  return losses;
}

double relative_difference(const torch::nn::Sequential& a, const torch::nn::Sequential& b) {
  double diff = 0.0;
  double norm = 0.0;
  const auto pa = a->parameters();
  const auto pb = b->parameters();
  for (std::size_t i = 0; i < pa.size(); ++i) {
    diff += (pa[i] - pb[i]).to(torch::kFloat64).pow(2).sum().item<double>();
    norm += pb[i].to(torch::kFloat64).pow(2).sum().item<double>();
  }
  return std::sqrt(diff / norm);
}

// The message of the ppsched::error `f` throws; a text saying so when it throws something
// else or nothing.
template <class F>
std::string ppsched_error_of(F&& f) {
  try {
    f();
  } catch (const ppsched::error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a ppsched::error: ") + e.what();
  }
  return "no error";
}

bool same_parameters(const torch::nn::Sequential& a, const torch::nn::Sequential& b) {
  const auto pa = a->parameters();
  const auto pb = b->parameters();
  if (pa.size() != pb.size()) return false;
  for (std::size_t i = 0; i < pa.size(); ++i)
    if (!torch::equal(pa[i], pb[i])) return false;
  return true;
}

struct Outcome {
  bool losses_equal = true;
  bool parameters_equal = false;
  bool changed = false;  // the parameters moved: the comparison is not of two untouched models
  double worst = 0.0;
};

Outcome train_and_compare(const ppsched::FamilyInfo& family, ppsched::CpuMode mode, int steps) {
  ppsched::ScheduleRequest request;
  request.ranks = 4;
  request.microbatches = 16;
  request.chunks = family.chunks_for(2);
  const ppsched::Schedule schedule = ppsched::make_schedule(family.name, request);
  const std::int32_t stages = schedule.stages();
  const std::int32_t m = schedule.microbatches;

  torch::nn::Sequential pipelined = make_model(7);
  torch::nn::Sequential reference = deep_copy(pipelined);
  const torch::nn::Sequential initial = deep_copy(pipelined);
  torch::optim::SGD reference_sgd(reference->parameters(), torch::optim::SGDOptions(learning_rate));

  std::vector<std::unique_ptr<torch::optim::SGD>> optimizers;
  std::vector<std::unique_ptr<ppsched::TorchStage>> adapters;
  std::vector<ppsched::StageFunctions> functions;
  for (std::int32_t s = 0; s < stages; ++s) {
    const std::int64_t first = layers * s / stages;
    const std::int64_t last = layers * (s + 1) / stages;
    torch::nn::Sequential part = layers_of(pipelined, first, last);
    optimizers.push_back(
        std::make_unique<torch::optim::SGD>(part->parameters(), torch::optim::SGDOptions(learning_rate)));
    ppsched::TorchStageOptions o;
    o.input_shape = {rows, widths[first]};
    o.output_shape = {rows, widths[last]};
    if (s + 1 == stages) {
      o.target_shape = o.output_shape;
      o.loss = [m](const torch::Tensor& out, const torch::Tensor& target) { return loss_of(out, target, m); };
    }
    o.optimizer = optimizers.back().get();
    adapters.push_back(std::make_unique<ppsched::TorchStage>(part, o));
    functions.push_back(adapters.back()->functions());
  }

  ppsched::CpuOptions co;
  co.mode = mode;
  ppsched::CpuCluster cluster(schedule.ranks, co);
  std::vector<ppsched::CpuBackend*> ranks;
  for (int r = 0; r < schedule.ranks; ++r) ranks.push_back(&cluster.rank(r));
  ppsched::ExecutorOptions eo;
  eo.accumulation = ppsched::GradAccumulation::microbatch_order;
  ppsched::World<ppsched::CpuBackend> world(ranks, schedule, functions, eo);

  Outcome out;
  for (int step = 0; step < steps; ++step) {
    const StepData d = data(m, step);
    const ppsched::StepResult& result = world.run_step({floats(d.inputs), floats(d.targets)});
    const std::vector<float> expected = train_unpipelined(reference, reference_sgd, d, m);
    out.losses_equal = out.losses_equal && result.losses == expected;
  }
  out.parameters_equal = same_parameters(pipelined, reference);
  out.changed = !same_parameters(pipelined, initial);
  out.worst = relative_difference(pipelined, reference);
  return out;
}

}  // namespace

CATCH_TEST_CASE("a libtorch MLP trains bit-identically through every training family", "[torch]") {
  // One intra-op thread: the four rank threads are the parallelism (and the machine is small).
  torch::set_num_threads(1);
  int families = 0;
  for (const ppsched::FamilyInfo& family : ppsched::schedule_families) {
    if (!family.training) continue;
    ++families;
    const Outcome o = train_and_compare(family, ppsched::CpuMode::threaded, 2);
    CATCH_INFO(family.name << ": worst relative parameter difference " << o.worst);
    CATCH_CHECK(o.changed);
    CATCH_CHECK(o.losses_equal);
    CATCH_CHECK(o.parameters_equal);
  }
  CATCH_CHECK(families >= 10);
}

CATCH_TEST_CASE("the split backward is bit-identical in the deterministic mode too", "[torch]") {
  torch::set_num_threads(1);
  for (const char* name : {"zb-h1", "zb-v", "dualpipev"}) {
    const Outcome o = train_and_compare(ppsched::family_info(name), ppsched::CpuMode::deterministic, 1);
    CATCH_INFO(name);
    CATCH_CHECK(o.losses_equal);
    CATCH_CHECK(o.parameters_equal);
  }
}

CATCH_TEST_CASE("one pass over the whole batch differs from micro-batch accumulation by rounding only", "[torch]") {
  // The same step with every micro-batch in one forward and backward: the gradient sums the
  // rows in another order, so it is close to the pipelined result but not bit-identical.
  torch::set_num_threads(1);
  const std::int32_t m = 16;
  torch::nn::Sequential whole = make_model(7);
  torch::nn::Sequential accumulated = deep_copy(whole);
  torch::optim::SGD whole_sgd(whole->parameters(), torch::optim::SGDOptions(learning_rate));
  torch::optim::SGD accumulated_sgd(accumulated->parameters(), torch::optim::SGDOptions(learning_rate));
  for (int step = 0; step < 2; ++step) {
    const StepData d = data(m, step);
    whole_sgd.zero_grad();
    loss_of(whole->forward(d.inputs), d.targets, m).backward();
    whole_sgd.step();
    (void)train_unpipelined(accumulated, accumulated_sgd, d, m);
  }
  CATCH_CHECK(relative_difference(whole, accumulated) < 1e-5);
}

CATCH_TEST_CASE("the adapter rejects a module that does not match the stage", "[torch]") {
  torch::nn::Sequential model = make_model(3);

  CATCH_SECTION("an output size other than the declared one") {
    ppsched::TorchStageOptions o;
    o.input_shape = {rows, widths[0]};
    o.output_shape = {rows, widths[0]};  // the first layer gives widths[1] features
    ppsched::TorchStage stage(layers_of(model, 0, 1), o);
    const ppsched::StageFunctions f = stage.functions();
    std::vector<float> in(f.input_size, 0.5f);
    std::vector<float> out(f.output_size);
    CATCH_CHECK_THAT(
        ppsched_error_of([&] { (void)f.forward(0, in, out); }),
        Catch::Matchers::Contains("the module's output has 32 elements") && Catch::Matchers::Contains("output_shape"));
  }

  CATCH_SECTION("double parameters") {
    torch::nn::Sequential part = layers_of(deep_copy(model), 0, 1);
    part->to(torch::kFloat64);
    ppsched::TorchStageOptions o;
    o.input_shape = {rows, widths[0]};
    o.output_shape = {rows, widths[1]};
    CATCH_CHECK_THAT(ppsched_error_of([&] { (void)ppsched::TorchStage(part, o); }),
                     Catch::Matchers::Contains("Double") && Catch::Matchers::Contains("torch::kFloat32"));
  }

  CATCH_SECTION("a shape with a zero dimension") {
    ppsched::TorchStageOptions o;
    o.input_shape = {0, widths[0]};
    o.output_shape = {rows, widths[1]};
    CATCH_CHECK_THAT(ppsched_error_of([&] { (void)ppsched::TorchStage(layers_of(model, 0, 1), o); }),
                     Catch::Matchers::Contains("input_shape"));
  }

  CATCH_SECTION("a loss that is not a scalar") {
    ppsched::TorchStageOptions o;
    o.input_shape = {rows, widths[layers - 1]};
    o.output_shape = {rows, widths[layers]};
    o.target_shape = o.output_shape;
    o.loss = [](const torch::Tensor& out, const torch::Tensor& target) { return out - target; };
    ppsched::TorchStage stage(layers_of(model, layers - 1, layers), o);
    const ppsched::StageFunctions f = stage.functions();
    std::vector<float> out(f.output_size, 0.1f);
    std::vector<float> target(f.target_size, 0.2f);
    std::vector<float> grad(f.output_size);
    CATCH_CHECK_THAT(ppsched_error_of([&] { (void)f.loss(0, out, target, grad); }),
                     Catch::Matchers::Contains("scalar"));
  }

  CATCH_SECTION("a backward before its forward") {
    ppsched::TorchStageOptions o;
    o.input_shape = {rows, widths[0]};
    o.output_shape = {rows, widths[1]};
    ppsched::TorchStage stage(layers_of(model, 0, 1), o);
    const ppsched::StageFunctions f = stage.functions();
    std::vector<float> in(f.input_size), grad_out(f.output_size), grad_in(f.input_size), wg(f.weight_grad_size);
    CATCH_CHECK_THAT(ppsched_error_of([&] { (void)f.backward(3, in, grad_out, grad_in, wg); }),
                     Catch::Matchers::Contains("without its forward"));
  }
}

CATCH_TEST_CASE("the weight gradient is laid out in the order of parameters()", "[torch]") {
  // One layer, one micro-batch: the flattened gradient equals autograd's, parameter after
  // parameter, for both the full and the split backward.
  torch::set_num_threads(1);
  torch::nn::Sequential model = make_model(5);
  torch::nn::Sequential part = layers_of(model, 2, 3);
  ppsched::TorchStageOptions o;
  o.input_shape = {rows, widths[2]};
  o.output_shape = {rows, widths[3]};
  ppsched::TorchStage stage(part, o);
  const ppsched::StageFunctions f = stage.functions();
  CATCH_REQUIRE(stage.parameters().size() == 2);  // weight, bias
  CATCH_REQUIRE(f.weight_grad_size == static_cast<std::size_t>(widths[2] * widths[3] + widths[3]));

  torch::manual_seed(11);
  const torch::Tensor x = torch::randn({rows, widths[2]});
  const torch::Tensor g = torch::randn({rows, widths[3]});
  const torch::Tensor xr = x.clone().requires_grad_(true);
  part->zero_grad();
  part->forward(xr).backward(g);
  std::vector<float> expected;
  for (const torch::Tensor& p : part->parameters()) {
    const torch::Tensor c = p.grad().contiguous();
    expected.insert(expected.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  }
  const torch::Tensor expected_input = xr.grad().contiguous();
  const std::vector<float> expected_in(expected_input.data_ptr<float>(),
                                       expected_input.data_ptr<float>() + expected_input.numel());

  std::vector<float> out(f.output_size), grad_in(f.input_size), full(f.weight_grad_size, 0.0f);
  f.forward(0, floats(x), out);
  f.backward(0, floats(x), floats(g), grad_in, full);
  CATCH_CHECK(full == expected);
  CATCH_CHECK(grad_in == expected_in);

  std::vector<float> split(f.weight_grad_size, 0.0f), split_in(f.input_size);
  {
    // The caller's thread-local grad mode does not reach the stage: its graph is built anyway.
    const torch::NoGradGuard caller_has_grad_off;
    f.forward(1, floats(x), out);
    f.backward_input(1, floats(x), floats(g), split_in);
    f.backward_weight(1, floats(x), floats(g), split);
  }
  CATCH_CHECK(split == expected);
  CATCH_CHECK(split_in == expected_in);
}

CATCH_TEST_CASE("a wrong output shape ends the step with the stage named", "[torch]") {
  torch::set_num_threads(1);
  torch::nn::Sequential model = make_model(3);
  ppsched::ScheduleRequest request;
  request.ranks = 2;
  request.microbatches = 2;
  const ppsched::Schedule schedule = ppsched::make_schedule("1f1b", request);
  std::vector<std::unique_ptr<ppsched::TorchStage>> adapters;
  std::vector<ppsched::StageFunctions> functions;
  for (std::int64_t s = 0; s < 2; ++s) {
    ppsched::TorchStageOptions o;
    o.input_shape = {rows, widths[4 * s]};
    o.output_shape = {rows, widths[4 * s + 4]};
    if (s == 1) {
      o.output_shape = {rows, widths[layers] + 1};  // one feature too many
      o.target_shape = o.output_shape;
      o.loss = [](const torch::Tensor& out, const torch::Tensor& target) { return torch::mse_loss(out, target); };
    }
    adapters.push_back(std::make_unique<ppsched::TorchStage>(layers_of(model, 4 * s, 4 * s + 4), o));
    functions.push_back(adapters.back()->functions());
  }
  ppsched::CpuCluster cluster(2);
  ppsched::World<ppsched::CpuBackend> world({&cluster.rank(0), &cluster.rank(1)}, schedule, functions);
  const StepData d = data(2, 0);
  const std::vector<float> targets(2 * functions[1].target_size, 0.0f);
  const std::string message = ppsched_error_of([&] { (void)world.run_step({floats(d.inputs), targets}); });
  CATCH_CHECK_THAT(message, Catch::Matchers::Contains("stage 1") && Catch::Matchers::Contains("F0") &&
                                Catch::Matchers::Contains("the module's output has 8 elements") &&
                                Catch::Matchers::Contains("output_shape"));
}

CATCH_TEST_CASE("without an optimizer the summed gradient is left in param.grad", "[torch]") {
  // The caller applies it: param.grad after run_step equals the unpipelined accumulated
  // gradient, and the parameters have not moved.
  torch::set_num_threads(1);
  const std::int32_t m = 4;
  ppsched::ScheduleRequest request;
  request.ranks = 2;
  request.microbatches = m;
  const ppsched::Schedule schedule = ppsched::make_schedule("zb-h1", request);
  torch::nn::Sequential pipelined = make_model(9);
  torch::nn::Sequential reference = deep_copy(pipelined);
  const torch::nn::Sequential initial = deep_copy(pipelined);
  std::vector<std::unique_ptr<ppsched::TorchStage>> adapters;
  std::vector<ppsched::StageFunctions> functions;
  for (std::int64_t s = 0; s < 2; ++s) {
    ppsched::TorchStageOptions o;
    o.input_shape = {rows, widths[4 * s]};
    o.output_shape = {rows, widths[4 * s + 4]};
    if (s == 1) {
      o.target_shape = o.output_shape;
      o.loss = [](const torch::Tensor& out, const torch::Tensor& target) { return loss_of(out, target, m); };
    }
    adapters.push_back(std::make_unique<ppsched::TorchStage>(layers_of(pipelined, 4 * s, 4 * s + 4), o));
    functions.push_back(adapters.back()->functions());
  }
  ppsched::CpuCluster cluster(2);
  ppsched::World<ppsched::CpuBackend> world({&cluster.rank(0), &cluster.rank(1)}, schedule, functions);
  const StepData d = data(m, 0);
  (void)world.run_step({floats(d.inputs), floats(d.targets)});

  reference->zero_grad();
  for (std::int32_t mb = 0; mb < m; ++mb) {
    loss_of(reference->forward(d.inputs.narrow(0, mb * rows, rows)), d.targets.narrow(0, mb * rows, rows), m)
        .backward();
  }
  const auto got = pipelined->parameters();
  const auto want = reference->parameters();
  const auto before = initial->parameters();
  for (std::size_t i = 0; i < got.size(); ++i) {
    CATCH_INFO("parameter " << i);
    CATCH_REQUIRE(got[i].grad().defined());
    CATCH_CHECK(torch::equal(got[i].grad(), want[i].grad()));
    CATCH_CHECK(torch::equal(got[i], before[i]));
  }
}

CATCH_TEST_CASE("a forward-only schedule runs the stages' forwards", "[torch]") {
  torch::set_num_threads(1);
  ppsched::ScheduleRequest request;
  request.ranks = 2;
  request.microbatches = 3;
  const ppsched::Schedule schedule = ppsched::make_schedule("forward-only", request);
  torch::nn::Sequential model = make_model(4);
  std::vector<std::unique_ptr<ppsched::TorchStage>> adapters;
  std::vector<ppsched::StageFunctions> functions;
  for (std::int64_t s = 0; s < 2; ++s) {
    ppsched::TorchStageOptions o;
    o.input_shape = {rows, widths[4 * s]};
    o.output_shape = {rows, widths[4 * s + 4]};
    adapters.push_back(std::make_unique<ppsched::TorchStage>(layers_of(model, 4 * s, 4 * s + 4), o));
    functions.push_back(adapters.back()->functions());
  }
  // The last stage's outputs, as the forward writes them.
  std::vector<std::vector<float>> seen(3);
  functions[1].forward = [f = functions[1].forward, &seen](std::int32_t mb, std::span<const float> in,
                                                           std::span<float> out) {
    f(mb, in, out);
    seen[static_cast<std::size_t>(mb)].assign(out.begin(), out.end());
  };
  ppsched::CpuCluster cluster(2);
  ppsched::World<ppsched::CpuBackend> world({&cluster.rank(0), &cluster.rank(1)}, schedule, functions);
  const StepData d = data(3, 0);
  (void)world.run_step({floats(d.inputs), {}});
  const torch::NoGradGuard no_grad;
  for (std::int32_t mb = 0; mb < 3; ++mb) {
    const torch::Tensor want = model->forward(d.inputs.narrow(0, mb * rows, rows)).contiguous();
    CATCH_CHECK(seen[static_cast<std::size_t>(mb)] ==
                std::vector<float>(want.data_ptr<float>(), want.data_ptr<float>() + want.numel()));
  }
}
