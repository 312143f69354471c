// The libtorch adapter (include/ppsched/adapters/torch.hpp): an 8-layer torch::nn::Sequential
// MLP split over the stages of every training schedule family on 4 CPU ranks, 16
// micro-batches, trained a few steps and compared with the same model trained unpipelined
// (every micro-batch through the whole model, gradients accumulated by autograd in
// micro-batch order, one SGD step): losses and parameters must be bit-identical. The same for a
// small GPT-like model over typed boundaries (int64 token ids of a variable length, hidden
// states whose first dimension varies, int64 labels from a side input) with its embedding
// tied between the first and the last stage; then the typed boundaries' errors. Built only
// where libtorch is found (tests/meson.build); suite 'torch'.
// First, so that this file proves the adapter header compiles on its own (the headers-alone
// test leaves it out: it needs libtorch).
#include <ppsched/adapters/torch.hpp>
// Debian's libtorch logs through glog, whose CHECK macro replaces Catch2's where torch's
// headers come later: every CHECK would pass silently. Catch2's macros are used prefixed.
#define CATCH_CONFIG_PREFIX_ALL
#include <torch/nn/functional/linear.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/container/functional.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <functional>
#include <memory>
#include <ppsched/backend/cpu.hpp>
#include <ppsched/plan/varlen.hpp>
#include <ppsched/runtime/world.hpp>
#include <ppsched/schedule/generators.hpp>
#include <string>
#include <vector>

#include "training_families.hpp"

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

Outcome train_and_compare(const ppsched::FamilyInfo& family, ppsched::CpuMode mode, int steps,
                          ppsched_test::MemoryPolicy policy = ppsched_test::MemoryPolicy::none) {
  ppsched::ScheduleRequest request;
  request.ranks = 4;
  request.microbatches = 16;
  request.chunks = family.chunks_for(2);
  const ppsched::Schedule schedule = ppsched_test::with_policy(ppsched::make_schedule(family.name, request), policy);
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

CATCH_TEST_CASE("recomputation (forward under no-grad, R with the graph) trains bit-identically, every family",
                "[torch]") {
  torch::set_num_threads(1);
  for (const ppsched::FamilyInfo& family : ppsched::schedule_families) {
    if (!family.training) continue;
    const Outcome o = train_and_compare(family, ppsched::CpuMode::threaded, 2, ppsched_test::MemoryPolicy::recompute);
    CATCH_INFO(family.name << ": worst relative parameter difference " << o.worst);
    CATCH_CHECK(o.changed);
    CATCH_CHECK(o.losses_equal);
    CATCH_CHECK(o.parameters_equal);
  }
}

CATCH_TEST_CASE("a forward that kept no graph and was not recomputed fails its backward loudly", "[torch]") {
  torch::set_num_threads(1);
  ppsched::TorchStageOptions o;
  o.input_shape = {2, 3};
  o.output_shape = {2, 4};
  ppsched::TorchStage stage(torch::nn::Sequential(torch::nn::Linear(3, 4)), o);
  ppsched::StageFunctions f = stage.functions();
  std::vector<float> in(6, 0.5f), out(8), grad_out(8, 1.0f), grad_in(6), weight_grad(f.weight_grad_size);
  ppsched::StageContext c;
  c.microbatch = 0;
  c.keep_activation = false;
  f.forward(c, in, out);
  const std::string message = ppsched_error_of([&] { f.backward(c, in, grad_out, grad_in, weight_grad); });
  CATCH_CHECK_THAT(message, Catch::Contains("kept no graph") && Catch::Contains("R(s, m)"));
  // The recompute restores it: the same gradients as a forward that kept its graph.
  f.recompute(c, in);
  f.backward(c, in, grad_out, grad_in, weight_grad);
  std::vector<float> kept_grad_in(6), kept_weight_grad(f.weight_grad_size), kept_out(8);
  c.keep_activation = true;
  f.forward(c, in, kept_out);
  f.backward(c, in, grad_out, kept_grad_in, kept_weight_grad);
  CATCH_CHECK(out == kept_out);
  CATCH_CHECK(grad_in == kept_grad_in);
  CATCH_CHECK(weight_grad == kept_weight_grad);
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

// ---------------------------------------------------------------- typed boundaries, a GPT-like model
//
// Token ids (int64, a variable number per micro-batch) enter stage 0's Embedding, hidden
// states [tokens, hidden] cross the boundaries with a variable first dimension, and the last
// stage's output layer projects onto the vocabulary with the embedding's weight, tied: stage
// 0 and the last stage each own a copy (as separate ranks would), initialised equal and kept
// equal by ExecutorOptions::tied_weights. The labels (int64) reach the loss as a side input.

namespace {

constexpr std::int64_t vocabulary = 24;
constexpr std::int64_t hidden = 12;
constexpr std::int64_t max_tokens = 10;
constexpr double gpt_learning_rate = 0.5;

// The output projection onto the vocabulary, by a weight of the embedding's shape: a copy of
// it (a pipeline stage's own), or the very tensor (the tied model trained in one piece).
struct TiedOutputImpl : torch::nn::Module {
  TiedOutputImpl(const torch::Tensor& embedding_weight, bool share)
      : weight(register_parameter("weight", share ? embedding_weight : embedding_weight.detach().clone())) {}
  torch::Tensor forward(const torch::Tensor& x) { return torch::nn::functional::linear(x, weight); }
  torch::Tensor weight;
};
TORCH_MODULE(TiedOutput);

// Units: the embedding, `blocks` Linear + Tanh, the output. Stages take whole units.
struct Gpt {
  torch::nn::Embedding embedding{nullptr};
  std::vector<torch::nn::Linear> linears;
  TiedOutput output{nullptr};

  Gpt(std::uint64_t seed, std::int64_t blocks, bool share) {
    torch::manual_seed(seed);
    embedding = torch::nn::Embedding(vocabulary, hidden);
    for (std::int64_t b = 0; b < blocks; ++b) linears.push_back(torch::nn::Linear(hidden, hidden));
    output = TiedOutput(embedding->weight, share);
  }

  [[nodiscard]] std::int64_t units() const { return static_cast<std::int64_t>(linears.size()) + 2; }

  // Units [first, last), sharing their modules with this model.
  [[nodiscard]] torch::nn::Sequential part(std::int64_t first, std::int64_t last) const {
    torch::nn::Sequential out;
    for (std::int64_t u = first; u < last; ++u) {
      if (u == 0) {
        out->push_back(embedding);
      } else if (u == units() - 1) {
        out->push_back(output);
      } else {
        out->push_back(linears[static_cast<std::size_t>(u - 1)]);
        out->push_back(torch::nn::Tanh());
      }
    }
    return out;
  }

  // Every trainable tensor, each once: in the shared model the output's weight is the
  // embedding's, which parameters() lists twice (an optimizer would step it twice).
  [[nodiscard]] std::vector<torch::Tensor> parameters() const {
    std::vector<torch::Tensor> out;
    for (const torch::Tensor& p : part(0, units())->parameters()) {
      const bool seen = std::any_of(out.begin(), out.end(), [&](const torch::Tensor& q) { return q.is_same(p); });
      if (!seen) out.push_back(p);
    }
    return out;
  }
};

torch::Tensor gpt_loss(const torch::Tensor& logits, const torch::Tensor& labels, std::int32_t m) {
  return torch::nn::functional::cross_entropy(
             logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)) *
         (1.0 / static_cast<double>(max_tokens * m));
}

struct GptStep {
  std::vector<torch::Tensor> ids;     // [micro-batch]: [its length], int64
  std::vector<torch::Tensor> labels;  // [micro-batch]: [its length], int64
  std::vector<float> inputs;          // stage 0's payloads
  std::vector<std::int64_t> padded;   // the labels, max_tokens per micro-batch (side input 0)
};

GptStep gpt_data(std::int32_t m, int step) {
  torch::manual_seed(2000 + static_cast<std::uint64_t>(step));
  GptStep d;
  d.padded.assign(static_cast<std::size_t>(m * max_tokens), -1);
  for (std::int32_t k = 0; k < m; ++k) {
    const std::int64_t length = 1 + (7 * k + 3 * step) % max_tokens;  // 1 .. max_tokens, each once in 10
    const torch::Tensor tokens = torch::randint(0, vocabulary, {length + 1}, torch::kInt64);
    d.ids.push_back(tokens.narrow(0, 0, length).contiguous());
    d.labels.push_back(tokens.narrow(0, 1, length).contiguous());  // the next token
    for (std::int64_t t = 0; t < length; ++t)
      d.padded[static_cast<std::size_t>(k * max_tokens + t)] = d.labels.back()[t].item<std::int64_t>();
  }
  d.inputs = ppsched::libtorch::torch_payloads({torch::kInt64, {max_tokens}, 0}, d.ids);
  return d;
}

// One unpipelined step: every micro-batch through the whole model in order, autograd
// accumulating into param.grad. With separate copies (`model` not shared) the tied weight's
// gradient is then what the pipeline computes: each copy's micro-batch sum, the copies added
// in stage order, both copies given the sum.
std::vector<float> gpt_unpipelined(const Gpt& model, torch::optim::SGD& sgd, const GptStep& d, std::int32_t m,
                                   bool shared) {
  sgd.zero_grad();
  std::vector<float> losses;
  torch::nn::Sequential whole = model.part(0, model.units());
  for (std::int32_t k = 0; k < m; ++k) {
    const auto i = static_cast<std::size_t>(k);
    const torch::Tensor loss = gpt_loss(whole->forward(d.ids[i]), d.labels[i], m);
    loss.backward();
    losses.push_back(loss.item<float>());
  }
  if (!shared) {
    const torch::NoGradGuard no_grad;
    const torch::Tensor sum = model.embedding->weight.grad() + model.output->weight.grad();
    model.embedding->weight.mutable_grad().copy_(sum);
    model.output->weight.mutable_grad().copy_(sum);
  }
  sgd.step();
  return losses;
}

bool same_tensors(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

struct GptOutcome {
  bool losses_equal = true;
  bool parameters_equal = false;
  bool copies_equal = false;  // the two copies of the tied weight, after the steps
  bool changed = false;
  bool tie_local = false;     // stage 0 and the last stage on one rank
  double tied_difference = 0.0;  // relative, to the model trained with one shared tensor
};

GptOutcome train_gpt(const ppsched_test::Family& family, int ranks, ppsched::CpuMode mode, int steps) {
  const std::int32_t m = 8;
  const ppsched::Schedule schedule = ppsched_test::make(family, ranks, m);
  const std::int32_t stages = schedule.stages();
  const std::int64_t blocks = std::max<std::int64_t>(2, stages - 2);

  const Gpt pipelined(31, blocks, false);
  const Gpt reference(31, blocks, false);
  const Gpt shared(31, blocks, true);
  const Gpt initial(31, blocks, false);
  torch::optim::SGD reference_sgd(reference.parameters(), torch::optim::SGDOptions(gpt_learning_rate));
  torch::optim::SGD shared_sgd(shared.parameters(), torch::optim::SGDOptions(gpt_learning_rate));

  const ppsched::libtorch::TorchTensorSpec ids{torch::kInt64, {max_tokens}, 0};
  const ppsched::libtorch::TorchTensorSpec states{torch::kFloat32, {max_tokens, hidden}, 0};
  const ppsched::libtorch::TorchTensorSpec logits{torch::kFloat32, {max_tokens, vocabulary}, 0};
  std::vector<std::unique_ptr<torch::optim::SGD>> optimizers;
  std::vector<std::unique_ptr<ppsched::TorchStage>> adapters;
  std::vector<ppsched::StageFunctions> functions;
  const std::int64_t units = pipelined.units();
  for (std::int32_t s = 0; s < stages; ++s) {
    torch::nn::Sequential part = pipelined.part(units * s / stages, units * (s + 1) / stages);
    optimizers.push_back(
        std::make_unique<torch::optim::SGD>(part->parameters(), torch::optim::SGDOptions(gpt_learning_rate)));
    ppsched::TorchStageOptions o;
    o.input_tensors = {s == 0 ? ids : states};
    o.output_tensors = {s + 1 == stages ? logits : states};
    if (s + 1 == stages) {
      o.target_side_input = 0;
      o.target_tensor = ids;  // one int64 label per token
      o.loss = [m](const torch::Tensor& out, const torch::Tensor& labels) { return gpt_loss(out, labels, m); };
    }
    o.optimizer = optimizers.back().get();
    adapters.push_back(std::make_unique<ppsched::TorchStage>(part, o));
    functions.push_back(adapters.back()->functions());
  }

  ppsched::CpuOptions co;
  co.mode = mode;
  ppsched::CpuCluster cluster(schedule.ranks, co);
  ppsched::ExecutorOptions eo;
  eo.tied_weights = {ppsched::libtorch::tie_parameters({{0, adapters.front().get(), pipelined.embedding->weight},
                                              {stages - 1, adapters.back().get(), pipelined.output->weight}})};
  ppsched::World<ppsched::CpuBackend> world(ppsched_test::backends(cluster), schedule, functions, eo);

  GptOutcome out;
  out.tie_local = schedule.rank_of(0) == schedule.rank_of(stages - 1);
  for (int step = 0; step < steps; ++step) {
    const GptStep d = gpt_data(m, step);
    const ppsched::SideInput side[] = {ppsched::SideInput::of<std::int64_t>(d.padded, max_tokens)};
    const ppsched::StepResult& result = world.run_step({d.inputs, {}, side});
    const std::vector<float> expected = gpt_unpipelined(reference, reference_sgd, d, m, false);
    (void)gpt_unpipelined(shared, shared_sgd, d, m, true);
    out.losses_equal = out.losses_equal && result.losses == expected;
  }
  out.parameters_equal = same_tensors(pipelined.parameters(), reference.parameters());
  out.copies_equal = torch::equal(pipelined.embedding->weight, pipelined.output->weight);
  out.changed = !same_tensors(pipelined.parameters(), initial.parameters());
  const torch::Tensor a = pipelined.embedding->weight.to(torch::kFloat64);
  const torch::Tensor b = shared.embedding->weight.to(torch::kFloat64);
  out.tied_difference = ((a - b).norm() / b.norm()).item<double>();
  return out;
}

}  // namespace

CATCH_TEST_CASE("a GPT-like model with variable lengths and a tied embedding trains bit-identically", "[torch]") {
  // Every training family on 2 ranks (4 stages where the family takes two chunks), and two
  // on 4 ranks: the tie crosses ranks, or sits on one rank (the V families put the first and
  // last stage together).
  torch::set_num_threads(1);
  int families = 0;
  int local = 0;
  int remote = 0;
  for (const ppsched_test::Family& family : ppsched_test::training_families()) {
    ++families;
    for (int ranks : {2, 4}) {
      if (ranks == 4 && family.name != "1f1b" && family.name != "zb-v") continue;
      const GptOutcome o = train_gpt(family, ranks, ppsched::CpuMode::threaded, 2);
      CATCH_INFO(family.name << " on " << ranks << " ranks");
      CATCH_CHECK(o.changed);
      CATCH_CHECK(o.losses_equal);
      CATCH_CHECK(o.parameters_equal);
      CATCH_CHECK(o.copies_equal);
      // One shared tensor sums the two uses' gradients in another order: rounding only.
      CATCH_CHECK(o.tied_difference < 1e-5);
      (o.tie_local ? local : remote) += 1;
    }
  }
  CATCH_CHECK(families >= 10);
  CATCH_CHECK(local >= 1);
  CATCH_CHECK(remote >= 1);
}

CATCH_TEST_CASE("the GPT-like model's split backward is bit-identical in the deterministic mode", "[torch]") {
  torch::set_num_threads(1);
  for (const ppsched_test::Family& family : ppsched_test::training_families()) {
    if (family.name != "zb-h1" && family.name != "zb-v") continue;
    const GptOutcome o = train_gpt(family, 2, ppsched::CpuMode::deterministic, 1);
    CATCH_INFO(family.name);
    CATCH_CHECK(o.losses_equal);
    CATCH_CHECK(o.parameters_equal);
    CATCH_CHECK(o.copies_equal);
  }
}

// ---------------------------------------------------------------- variable-length steps, a plan every step
//
// Issue 42 end to end: each step's sequences are split into micro-batches of at most
// max_tokens tokens (a micro-batch is its sequences one after the other: the model is
// per-token, so packing changes nothing but the shapes), plan_step chooses the step's
// schedule and order, the World takes it (set_schedule) and runs the micro-batches at their
// exact sizes (Batch::sizes from TorchStage::size). Unpipelined training of the same
// micro-batches, in the same order, must give the same losses and weights bit for bit.

namespace {

// Costs per stage from tokens and squares (no measurement: only the plan's choice depends on them).
ppsched::plan::LengthCosts gpt_length_costs(std::int32_t stages) {
  ppsched::plan::LengthCosts c;
  for (std::int32_t s = 0; s < stages; ++s) {
    ppsched::plan::StageLengthFit f;
    const double scale = s + 1 == stages ? 1.4 : 1.0;
    f.forward = {0.02, 0.01 * scale, 0.0001};
    f.backward_input = {0.02, 0.01 * scale, 0.0001};
    f.backward_weight = {0.01, 0.008 * scale, 0.0};
    f.activation_bytes = {64.0, 4.0 * hidden};
    f.output_bytes = {16.0, 4.0 * hidden};
    c.stages.push_back(f);
  }
  return c;
}

struct VarlenOutcome {
  bool losses_equal = true;
  bool parameters_equal = false;
  bool copies_equal = false;
  bool moved_exact_sizes = true;  // every step sent its micro-batches' sizes, and the tie
  std::vector<std::pair<std::string, std::int32_t>> schedules;  // per step: family, m
  int growths = 0;
};

VarlenOutcome train_gpt_varlen(int steps) {
  constexpr std::int32_t ranks = 2;
  constexpr double loss_scale = 1.0 / static_cast<double>(max_tokens * 8);  // the same every step
  auto loss = [](const torch::Tensor& logits, const torch::Tensor& labels) {
    return torch::nn::functional::cross_entropy(
               logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)) *
           loss_scale;
  };
  const Gpt pipelined(41, 2, false);
  const Gpt reference(41, 2, false);
  torch::optim::SGD reference_sgd(reference.parameters(), torch::optim::SGDOptions(gpt_learning_rate));
  torch::nn::Sequential whole = reference.part(0, reference.units());

  const ppsched::libtorch::TorchTensorSpec ids{torch::kInt64, {max_tokens}, 0};
  const ppsched::libtorch::TorchTensorSpec states{torch::kFloat32, {max_tokens, hidden}, 0};
  const ppsched::libtorch::TorchTensorSpec logits{torch::kFloat32, {max_tokens, vocabulary}, 0};
  std::vector<std::unique_ptr<torch::optim::SGD>> optimizers;
  std::vector<std::unique_ptr<ppsched::TorchStage>> adapters;
  std::vector<ppsched::StageFunctions> functions;
  const std::int64_t units = pipelined.units();
  for (std::int32_t s = 0; s < ranks; ++s) {
    torch::nn::Sequential part = pipelined.part(units * s / ranks, units * (s + 1) / ranks);
    optimizers.push_back(
        std::make_unique<torch::optim::SGD>(part->parameters(), torch::optim::SGDOptions(gpt_learning_rate)));
    ppsched::TorchStageOptions o;
    o.input_tensors = {s == 0 ? ids : states};
    o.output_tensors = {s + 1 == ranks ? logits : states};
    if (s + 1 == ranks) {
      o.target_side_input = 0;
      o.target_tensor = ids;
      o.loss = loss;
    }
    o.optimizer = optimizers.back().get();
    adapters.push_back(std::make_unique<ppsched::TorchStage>(part, o));
    functions.push_back(adapters.back()->functions());
  }
  ppsched::ExecutorOptions eo;
  eo.tied_weights = {ppsched::libtorch::tie_parameters({{0, adapters.front().get(), pipelined.embedding->weight},
                                                        {ranks - 1, adapters.back().get(), pipelined.output->weight}})};
  ppsched::CpuCluster cluster(ranks);
  // The World starts on any schedule of the right shape; every step brings its own.
  ppsched::World<ppsched::CpuBackend> world(ppsched_test::backends(cluster), ppsched_test::make({"1f1b", 1}, ranks, 4),
                                            functions, eo);
  const ppsched::plan::LengthCosts fit = gpt_length_costs(ranks);

  VarlenOutcome out;
  for (int step = 0; step < steps; ++step) {
    // The step's sequences: from 1 to max_tokens tokens, a different count every step.
    torch::manual_seed(3000 + static_cast<std::uint64_t>(step));
    const int n = 5 + 3 * step;
    std::vector<std::int64_t> lengths;
    std::vector<torch::Tensor> sequences;  // each with one token more: its labels are the next tokens
    for (int i = 0; i < n; ++i) {
      lengths.push_back(1 + (5 * i + 3 * step + i * i) % max_tokens);
      sequences.push_back(torch::randint(0, vocabulary, {lengths.back() + 1}, torch::kInt64));
    }
    ppsched::plan::SplitOptions so;
    so.token_budget = max_tokens;
    const ppsched::plan::Split split = ppsched::plan::split_batch(lengths, fit, ppsched::plan::SplitMethod::packed, so);
    const ppsched::plan::StepPlan plan = ppsched::plan::plan_step(fit, split.microbatches);
    out.growths += world.set_schedule(plan.search.lowered).grew() ? 1 : 0;
    const auto m = static_cast<std::int32_t>(plan.microbatches.size());
    out.schedules.emplace_back(plan.search.schedule.name, m);

    // Micro-batch k: its sequences one after the other, in the plan's order.
    GptStep d;
    d.padded.assign(static_cast<std::size_t>(m * max_tokens), -1);
    std::vector<ppsched::MicrobatchSize> sizes(static_cast<std::size_t>(ranks * m));
    std::size_t expected_floats = 2 * static_cast<std::size_t>(vocabulary * hidden);  // the tie, both ways
    for (std::int32_t k = 0; k < m; ++k) {
      std::vector<torch::Tensor> x;
      std::vector<torch::Tensor> y;
      for (std::size_t i : plan.microbatches[static_cast<std::size_t>(k)].sequences) {
        x.push_back(sequences[i].narrow(0, 0, lengths[i]));
        y.push_back(sequences[i].narrow(0, 1, lengths[i]));
      }
      d.ids.push_back(torch::cat(x).contiguous());
      d.labels.push_back(torch::cat(y).contiguous());
      const std::int64_t tokens = d.ids.back().numel();
      std::copy_n(d.labels.back().data_ptr<std::int64_t>(), tokens, d.padded.begin() + k * max_tokens);
      for (std::int32_t s = 0; s < ranks; ++s) {
        sizes[static_cast<std::size_t>(s * m + k)] = adapters[static_cast<std::size_t>(s)]->size(tokens);
      }
      expected_floats += 2 * ppsched::libtorch::torch_payload_floats(states, tokens);  // forward and gradient
    }
    d.inputs = ppsched::libtorch::torch_payloads(ids, d.ids);
    const ppsched::SideInput side[] = {ppsched::SideInput::of<std::int64_t>(d.padded, max_tokens)};
    const std::size_t before = cluster.rank(0).floats_sent() + cluster.rank(1).floats_sent();
    const ppsched::StepResult& result = world.run_step({d.inputs, {}, side, sizes});
    out.moved_exact_sizes = out.moved_exact_sizes &&
                            cluster.rank(0).floats_sent() + cluster.rank(1).floats_sent() - before == expected_floats;

    // Unpipelined: the same micro-batches through the whole model, autograd accumulating.
    reference_sgd.zero_grad();
    std::vector<float> expected;
    for (std::int32_t k = 0; k < m; ++k) {
      const torch::Tensor l = loss(whole->forward(d.ids[static_cast<std::size_t>(k)]), d.labels[static_cast<std::size_t>(k)]);
      l.backward();
      expected.push_back(l.item<float>());
    }
    {
      const torch::NoGradGuard no_grad;
      const torch::Tensor sum = reference.embedding->weight.grad() + reference.output->weight.grad();
      reference.embedding->weight.mutable_grad().copy_(sum);
      reference.output->weight.mutable_grad().copy_(sum);
    }
    reference_sgd.step();
    out.losses_equal = out.losses_equal && result.losses == expected;
  }
  out.parameters_equal = same_tensors(pipelined.parameters(), reference.parameters());
  out.copies_equal = torch::equal(pipelined.embedding->weight, pipelined.output->weight);
  return out;
}

}  // namespace

CATCH_TEST_CASE("variable-length steps planned by plan_step train bit-identically at their exact sizes",
                "[torch][issue42]") {
  torch::set_num_threads(1);
  const VarlenOutcome o = train_gpt_varlen(4);
  std::string seen;
  for (const auto& [family, m] : o.schedules) seen += family + " m=" + std::to_string(m) + "; ";
  CATCH_INFO(seen);
  CATCH_CHECK(o.losses_equal);
  CATCH_CHECK(o.parameters_equal);
  CATCH_CHECK(o.copies_equal);
  CATCH_CHECK(o.moved_exact_sizes);
  // A new schedule every step on one World: the micro-batch count changes with the batch.
  std::vector<std::pair<std::string, std::int32_t>> distinct = o.schedules;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  CATCH_CHECK(distinct.size() >= 3);
}

CATCH_TEST_CASE("typed boundaries carry counts, dtypes and gradients", "[torch]") {
  torch::set_num_threads(1);
  torch::manual_seed(21);
  // Float rows in, bfloat16 rows out (a Linear, then a cast), 3 of at most 5 rows.
  torch::nn::Linear linear(4, 4);
  torch::nn::Sequential part(linear, torch::nn::Functional([](const torch::Tensor& x) {
                               return x.to(torch::kBFloat16);
                             }));
  ppsched::TorchStageOptions o;
  o.input_tensors = {{torch::kFloat32, {5, 4}, 0}};
  o.output_tensors = {{torch::kBFloat16, {5, 4}, 0}};
  ppsched::TorchStage stage(part, o);
  const ppsched::StageFunctions f = stage.functions();
  CATCH_REQUIRE(f.input_size == 0);
  // (Compared as bools: glog's stl_logging.h would print the vectors, and TensorSpec has no <<.)
  CATCH_REQUIRE(bool(f.input_tensors == std::vector<ppsched::TensorSpec>{{ppsched::DType::f32, 20}}));
  CATCH_REQUIRE(bool(f.output_tensors == std::vector<ppsched::TensorSpec>{{ppsched::DType::bf16, 20}}));
  CATCH_CHECK(stage.parameter_offset(linear->weight) == 0);
  CATCH_CHECK(stage.parameter_offset(linear->bias) == 16);

  const torch::Tensor x = torch::randn({3, 4});
  const torch::Tensor g = torch::randn({3, 4}).to(torch::kBFloat16);
  std::vector<float> in = ppsched::libtorch::torch_payloads(o.input_tensors[0], {x});
  std::vector<float> out(ppsched::payload_floats(f.output_tensors));
  std::vector<float> grad_out = ppsched::libtorch::torch_payloads(o.output_tensors[0], {g});
  std::vector<float> grad_in(ppsched::payload_floats(f.input_tensors));
  std::vector<float> wg(f.weight_grad_size, 0.0f);
  f.forward(0, in, out);
  f.backward(0, in, grad_out, grad_in, wg);

  const torch::Tensor xr = x.clone().requires_grad_(true);
  part->zero_grad();
  const torch::Tensor y = part->forward(xr);
  y.backward(g);
  const ppsched::ConstPayload got(out, f.output_tensors);
  CATCH_REQUIRE(got.count(0) == 12);
  const auto ys = got.tensor<ppsched::bf16>(0);
  const torch::Tensor yc = y.contiguous();
  CATCH_CHECK(std::memcmp(ys.data(), yc.data_ptr(), 12 * sizeof(ppsched::bf16)) == 0);
  const auto dx = ppsched::ConstPayload(grad_in, f.input_tensors).tensor<float>(0);
  CATCH_REQUIRE(dx.size() == 12);
  CATCH_CHECK(torch::equal(torch::from_blob(const_cast<float*>(dx.data()), {3, 4}), xr.grad()));
  CATCH_CHECK(torch::equal(torch::from_blob(wg.data(), {4, 4}), linear->weight.grad()));
}

CATCH_TEST_CASE("token ids take no gradient: their count is 0", "[torch]") {
  // An embedding on a middle stage (grad_input is not empty there).
  torch::set_num_threads(1);
  ppsched::TorchStageOptions o;
  o.input_tensors = {{torch::kInt64, {max_tokens}, 0}};
  o.output_tensors = {{torch::kFloat32, {max_tokens, hidden}, 0}};
  ppsched::TorchStage stage(torch::nn::Sequential(torch::nn::Embedding(vocabulary, hidden)), o);
  const ppsched::StageFunctions f = stage.functions();
  const std::vector<float> in = ppsched::libtorch::torch_payloads(o.input_tensors[0], {torch::tensor({3, 1, 4}, torch::dtype(torch::kInt64))});
  std::vector<float> out(ppsched::payload_floats(f.output_tensors));
  std::vector<float> grad_in(ppsched::payload_floats(f.input_tensors), 1.0f);  // a count to overwrite
  std::vector<float> wg(f.weight_grad_size, 0.0f);
  for (bool split : {false, true}) {
    CATCH_INFO((split ? "split" : "full") << " backward");
    f.forward(0, in, out);
    CATCH_REQUIRE(ppsched::ConstPayload(out, f.output_tensors).count(0) == 3 * hidden);
    const std::vector<float> grad_out = ppsched::libtorch::torch_payloads(o.output_tensors[0], {torch::ones({3, hidden})});
    std::fill(grad_in.begin(), grad_in.end(), 1.0f);
    if (split) {
      f.backward_input(0, in, grad_out, grad_in);
      f.backward_weight(0, in, grad_out, wg);
    } else {
      f.backward(0, in, grad_out, grad_in, wg);
    }
    CATCH_CHECK(ppsched::ConstPayload(grad_in, f.input_tensors).count(0) == 0);
  }
}

CATCH_TEST_CASE("the adapter rejects typed boundaries that do not fit", "[torch]") {
  torch::set_num_threads(1);
  torch::manual_seed(5);
  torch::nn::Sequential linear(torch::nn::Linear(3, 3));
  const ppsched::libtorch::TorchTensorSpec rows_of_3{torch::kFloat32, {4, 3}, 0};

  CATCH_SECTION("an output of another dtype than declared") {
    ppsched::TorchStageOptions o;
    o.input_tensors = {rows_of_3};
    o.output_tensors = {{torch::kBFloat16, {4, 3}, 0}};
    ppsched::TorchStage stage(linear, o);
    const ppsched::StageFunctions f = stage.functions();
    const std::vector<float> in = ppsched::libtorch::torch_payloads(rows_of_3, {torch::ones({2, 3})});
    std::vector<float> out(ppsched::payload_floats(f.output_tensors));
    CATCH_CHECK_THAT(ppsched_error_of([&] { f.forward(0, in, out); }),
                     Catch::Matchers::Contains("the module's output is Float") &&
                         Catch::Matchers::Contains("declares BFloat16") &&
                         Catch::Matchers::Contains("TorchStageOptions::output_tensors[0]"));
  }

  CATCH_SECTION("an output longer than its maximum") {
    ppsched::TorchStageOptions o;
    o.input_tensors = {rows_of_3};
    o.output_tensors = {{torch::kFloat32, {2, 3}, 0}};
    ppsched::TorchStage stage(linear, o);
    const ppsched::StageFunctions f = stage.functions();
    const std::vector<float> in = ppsched::libtorch::torch_payloads(rows_of_3, {torch::ones({4, 3})});
    std::vector<float> out(ppsched::payload_floats(f.output_tensors));
    CATCH_CHECK_THAT(ppsched_error_of([&] { f.forward(0, in, out); }),
                     Catch::Matchers::Contains("the module's output has shape [4, 3]") &&
                         Catch::Matchers::Contains("[2, 3] with dimension 0 at most that size"));
    CATCH_CHECK_THAT(ppsched_error_of([&] { (void)ppsched::libtorch::torch_payloads(rows_of_3, {torch::ones({5, 3})}); }),
                     Catch::Matchers::Contains("micro-batch 0's tensor has shape [5, 3]"));
  }

  CATCH_SECTION("a count that is no whole number of rows") {
    ppsched::TorchStageOptions o;
    o.input_tensors = {rows_of_3};
    o.output_tensors = {rows_of_3};
    ppsched::TorchStage stage(linear, o);
    const ppsched::StageFunctions f = stage.functions();
    std::vector<float> in(ppsched::payload_floats(f.input_tensors));
    (void)ppsched::Payload(in, f.input_tensors).resize<float>(0, 5);
    std::vector<float> out(ppsched::payload_floats(f.output_tensors));
    CATCH_CHECK_THAT(ppsched_error_of([&] { f.forward(0, in, out); }),
                     Catch::Matchers::Contains("holds 5 elements, not a multiple of 3") &&
                         Catch::Matchers::Contains("TorchStageOptions::input_tensors[0]"));
  }

  CATCH_SECTION("a fixed shape given fewer elements") {
    ppsched::TorchStageOptions o;
    o.input_tensors = {{torch::kFloat32, {4, 3}, -1}};
    o.output_tensors = {rows_of_3};
    ppsched::TorchStage stage(linear, o);
    const ppsched::StageFunctions f = stage.functions();
    std::vector<float> in(ppsched::payload_floats(f.input_tensors));
    (void)ppsched::Payload(in, f.input_tensors).resize<float>(0, 6);
    std::vector<float> out(ppsched::payload_floats(f.output_tensors));
    CATCH_CHECK_THAT(ppsched_error_of([&] { f.forward(0, in, out); }),
                     Catch::Matchers::Contains("holds 6 elements") && Catch::Matchers::Contains("no dimension varies"));
  }

  CATCH_SECTION("declarations the adapter refuses at construction") {
    ppsched::TorchStageOptions both;
    both.input_shape = {4, 3};
    both.input_tensors = {rows_of_3};
    both.output_tensors = {rows_of_3};
    CATCH_CHECK_THAT(ppsched_error_of([&] { (void)ppsched::TorchStage(linear, both); }),
                     Catch::Matchers::Contains("both input_shape and input_tensors"));

    ppsched::TorchStageOptions two;
    two.input_tensors = {rows_of_3, rows_of_3};
    two.output_tensors = {rows_of_3};
    CATCH_CHECK_THAT(ppsched_error_of([&] { (void)ppsched::TorchStage(linear, two); }),
                     Catch::Matchers::Contains("input_tensors lists 2 tensors"));

    ppsched::TorchStageOptions dim;
    dim.input_tensors = {{torch::kFloat32, {4, 3}, 2}};
    dim.output_tensors = {rows_of_3};
    CATCH_CHECK_THAT(ppsched_error_of([&] { (void)ppsched::TorchStage(linear, dim); }),
                     Catch::Matchers::Contains("input_tensors[0].variable_dim is 2"));

    ppsched::TorchStageOptions ints;
    ints.input_tensors = {rows_of_3};
    ints.output_tensors = {{torch::kInt64, {4, 3}, 0}};
    CATCH_CHECK_THAT(ppsched_error_of([&] { (void)ppsched::TorchStage(linear, ints); }),
                     Catch::Matchers::Contains("the output is Long, which carries no gradient"));

    ppsched::TorchStageOptions boolean;
    boolean.input_tensors = {{torch::kBool, {4, 3}, 0}};
    boolean.output_tensors = {rows_of_3};
    CATCH_CHECK_THAT(ppsched_error_of([&] { (void)ppsched::TorchStage(linear, boolean); }),
                     Catch::Matchers::Contains("the dtype Bool has no ppsched DType"));
  }

  CATCH_SECTION("a tensor that is not the stage's parameter") {
    ppsched::TorchStageOptions o;
    o.input_tensors = {rows_of_3};
    o.output_tensors = {rows_of_3};
    ppsched::TorchStage stage(linear, o);
    torch::nn::Linear other(3, 3);
    CATCH_CHECK_THAT(ppsched_error_of([&] { (void)stage.parameter_offset(other->weight); }),
                     Catch::Matchers::Contains("a tensor of shape [3, 3] is not one of the stage's 2 trainable") &&
                         Catch::Matchers::Contains("TorchStage::parameter_offset"));
  }

  CATCH_SECTION("labels of another dtype than the target declares") {
    ppsched::TorchStageOptions o;
    o.input_tensors = {rows_of_3};
    o.output_tensors = {rows_of_3};
    o.target_side_input = 0;
    o.target_tensor = {torch::kInt64, {4}, 0};
    o.loss = [](const torch::Tensor& out, const torch::Tensor& labels) {
      return torch::nn::functional::cross_entropy(out, labels);
    };
    ppsched::TorchStage stage(linear, o);
    const ppsched::StageFunctions f = stage.functions();
    CATCH_CHECK(f.side_inputs == std::vector<std::size_t>{0});
    CATCH_CHECK(f.target_size == 0);
    const std::vector<float> out = ppsched::libtorch::torch_payloads(rows_of_3, {torch::ones({2, 3})});
    std::vector<float> grad(out.size());
    const std::vector<std::int32_t> labels(4, 1);
    const ppsched::SideInput side[] = {ppsched::SideInput::of<std::int32_t>(labels, 4)};
    ppsched::StageContext c;
    c.microbatch = 0;
    c.side_inputs = side;
    CATCH_CHECK_THAT(ppsched_error_of([&] { (void)f.loss(c, out, {}, grad); }),
                     Catch::Matchers::Contains("side input 0 holds 4 i32 per micro-batch") &&
                         Catch::Matchers::Contains("declares 4 i64"));
    // Issue 24, item 8: the stage says how it reads the labels, so the batch check finds the
    // dtype before the step (it was found here, at the loss of micro-batch 0, after every
    // forward).
    CATCH_REQUIRE(f.side_input_specs.size() == 1);
    CATCH_CHECK((f.side_input_specs[0] == ppsched::SideInputSpec{ppsched::DType::i64, 4}));
    CATCH_CHECK_THAT(ppsched_error_of([&] { ppsched::check_side_inputs(f, 1, {{}, {}, side}, 1); }),
                     Catch::Matchers::Contains("side input 0 is i32 x 4 per micro-batch, but stage 1 reads it as i64 x 4"));
  }
}

CATCH_TEST_CASE("labels with a variable dimension in any position are the labels' first entries there",
                "[torch][issue24]") {
  // Issue 24, item 6: the side input holds each micro-batch's labels padded to max_shape, and
  // the loss took the first prod(shape) of them as a contiguous tensor of the shortened shape:
  // right for variable_dim 0 only. With max_shape {2, 4} and 3 tokens the loss saw
  // [[10 11 12] [-1 20 21]] for [[10 11 12] [20 21 22]].
  torch::set_num_threads(1);
  torch::nn::Sequential linear(torch::nn::Linear(3, 3));
  const std::vector<std::int64_t> max_shape{3, 4, 5};
  for (std::int64_t d = 0; d < 3; ++d) {
    CATCH_INFO("variable_dim " << d);
    ppsched::TorchStageOptions o;
    o.input_tensors = {{torch::kFloat32, {4, 3}, 0}};
    o.output_tensors = {{torch::kFloat32, max_shape, d}};
    o.target_side_input = 0;
    o.target_tensor = {torch::kInt64, max_shape, d};
    torch::Tensor seen;
    o.loss = [&seen](const torch::Tensor& out, const torch::Tensor& labels) {
      seen = labels.clone();
      return out.sum() * 0.0;
    };
    ppsched::TorchStage stage(linear, o);
    const ppsched::StageFunctions f = stage.functions();
    // Two micro-batches of labels, 100 i + 10 j + k + 1000 mb at [i, j, k], padded in full.
    const torch::Tensor all = torch::arange(2 * 60, torch::kInt64).reshape({2, 3, 4, 5});
    const torch::Tensor values = all.div(60, "floor") * 1000 + torch::arange(3, torch::kInt64).reshape({1, 3, 1, 1}) * 100 +
                                 torch::arange(4, torch::kInt64).reshape({1, 1, 4, 1}) * 10 +
                                 torch::arange(5, torch::kInt64).reshape({1, 1, 1, 5});
    const std::vector<std::int64_t> labels(values.data_ptr<std::int64_t>(), values.data_ptr<std::int64_t>() + 120);
    const ppsched::SideInput side[] = {ppsched::SideInput::of<std::int64_t>(labels, 60)};
    for (std::int64_t length = 1; length < max_shape[static_cast<std::size_t>(d)]; ++length) {
      std::vector<std::int64_t> shape = max_shape;
      shape[static_cast<std::size_t>(d)] = length;
      const std::vector<float> out = ppsched::libtorch::torch_payloads(o.output_tensors[0], {torch::zeros(shape)});
      std::vector<float> grad(out.size());
      ppsched::StageContext c;
      c.microbatch = 1;
      c.side_inputs = side;
      (void)f.loss(c, out, {}, grad);
      CATCH_INFO("length " << length);
      const torch::Tensor expected = values[1].narrow(d, 0, length);
      CATCH_REQUIRE(seen.defined());
      CATCH_CHECK(seen.sizes() == expected.sizes());
      CATCH_CHECK(torch::equal(seen, expected));
    }
  }
}

// ------------------------------------------------------------ the split backward's cut (issue 27)

namespace {

// A residual block of convolutions and batch norms: the split backward cuts inside it.
struct ResidualImpl : torch::nn::Module {
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  explicit ResidualImpl(std::int64_t channels) {
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

// A whole MLP behind one forward (a Sequential cannot be a child of a Sequential).
struct WholeImpl : torch::nn::Module {
  torch::nn::Sequential inner;
  explicit WholeImpl(torch::nn::Sequential s) : inner(register_module("inner", std::move(s))) {}
  torch::Tensor forward(torch::Tensor x) { return inner->forward(x); }
};
TORCH_MODULE(Whole);

struct Gradients {
  std::vector<float> input, weight, output;
};

// One forward and backward of `module` through TorchStage's callables, full or split.
Gradients stage_gradients(torch::nn::Sequential module, const std::vector<std::int64_t>& shape, bool split,
                          bool input_gradient = true) {
  ppsched::TorchStageOptions o;
  o.input_shape = shape;
  o.output_shape = shape;
  ppsched::TorchStage stage(std::move(module), o);
  const ppsched::StageFunctions f = stage.functions();
  const std::int64_t n = ppsched::detail::torch_adapter::element_count(shape);
  torch::manual_seed(5);
  const torch::Tensor x = torch::randn({n});
  const torch::Tensor g = torch::randn({n});
  // Not zero, so that an input gradient the stage leaves unwritten shows.
  Gradients out{std::vector<float>(input_gradient ? static_cast<std::size_t>(n) : 0, 7.0f),
                std::vector<float>(f.weight_grad_size, 0.0f), std::vector<float>(static_cast<std::size_t>(n))};
  f.forward(0, floats(x), out.output);
  if (split) {
    f.backward_input(0, floats(x), floats(g), out.input);
    f.backward_weight(0, floats(x), floats(g), out.weight);
  } else {
    f.backward(0, floats(x), floats(g), out.input, out.weight);
  }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

torch::nn::Sequential residual_blocks() {
  torch::manual_seed(3);
  torch::nn::Sequential s;
  for (int b = 0; b < 3; ++b) s->push_back(Residual(4));
  return s;
}

}  // namespace

CATCH_TEST_CASE("the split backward cuts inside children and gives the full backward's bits", "[torch]") {
  // Residual blocks (conv, batch norm, ReLU, a skip), an MLP given as one child, and a weight
  // used twice (where the stage falls back to the cut between children): BI then BW gives
  // the input and weight gradients of B bit for bit, with and without an input gradient.
  const std::vector<std::int64_t> image{2, 4, 5, 5};
  const std::vector<std::int64_t> row{rows, 16};
  struct Case {
    const char* name;
    std::function<torch::nn::Sequential()> make;
    std::vector<std::int64_t> shape;
  };
  const std::vector<Case> cases{
      {"residual blocks", residual_blocks, image},
      {"an MLP as one child",
       [] {
         torch::manual_seed(4);
         torch::nn::Sequential inner;
         for (int l = 0; l < 3; ++l) {
           inner->push_back(torch::nn::Linear(16, 16));
           inner->push_back(torch::nn::Tanh());
         }
         return torch::nn::Sequential(Whole(inner));
       },
       row},
      {"a weight used twice",
       [] {
         torch::manual_seed(6);
         torch::nn::Linear shared(16, 16);
         return torch::nn::Sequential(shared, torch::nn::Tanh(), torch::nn::Linear(16, 16), shared);
       },
       row},
  };
  for (const Case& c : cases) {
    for (const bool input_gradient : {true, false}) {
      CATCH_INFO(c.name << (input_gradient ? ", with" : ", without") << " an input gradient");
      // Two builds from one seed: the same weights (custom modules are not Cloneable).
      const Gradients full = stage_gradients(c.make(), c.shape, false, input_gradient);
      const Gradients split = stage_gradients(c.make(), c.shape, true, input_gradient);
      CATCH_CHECK(same_bits(full.output, split.output));
      CATCH_CHECK(same_bits(full.input, split.input));
      CATCH_CHECK(same_bits(full.weight, split.weight));
      // Not vacuous: gradients were written.
      CATCH_CHECK(std::any_of(full.weight.begin(), full.weight.end(), [](float v) { return v != 0.0f; }));
      CATCH_CHECK(std::any_of(full.input.begin(), full.input.end(), [](float v) { return v != 0.0f; }) ==
                  input_gradient);
    }
  }
}

namespace {

// Modules whose output is not an ordinary function of the input with a graph of its own.
struct IgnoresInputImpl : torch::nn::Module {
  torch::Tensor weight;
  explicit IgnoresInputImpl(const std::vector<std::int64_t>& shape) {
    weight = register_parameter("weight", torch::randn(shape));
  }
  torch::Tensor forward(const torch::Tensor&) { return torch::tanh(weight); }
};
TORCH_MODULE(IgnoresInput);

}  // namespace

CATCH_TEST_CASE("the backward starts from the output's gradient edge in every case the graph can have", "[torch]") {
  // The stage keeps the output's gradient edge, not the output: a module that returns its
  // input unchanged (the edge is the input's gradient accumulator), one whose output does not
  // depend on the input, and one whose output needs no gradient at all. B and BI + BW agree
  // bit for bit in each, with the gradients autograd defines.
  const std::vector<std::int64_t> row{rows, 16};
  torch::manual_seed(5);  // the input and the output's gradient stage_gradients runs with
  const torch::Tensor x = torch::randn({rows * 16});
  const torch::Tensor g = torch::randn({rows * 16});
  const auto values = [](const torch::Tensor& t) {
    return std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
  };
  const auto zeros = [](const std::vector<float>& v) {
    return std::all_of(v.begin(), v.end(), [](float e) { return e == 0.0f; });
  };
  for (const bool split : {false, true}) {
    CATCH_INFO((split ? "BI + BW" : "B"));
    {
      const Gradients same =
          stage_gradients(torch::nn::Sequential(torch::nn::Functional([](torch::Tensor t) { return t; })), row, split);
      CATCH_CHECK(same.output == values(x));
      CATCH_CHECK(same.input == values(g));  // the output's gradient, as it came
      CATCH_CHECK(same.weight.empty());
    }
    {
      const auto make = [&] {
        torch::manual_seed(9);
        return torch::nn::Sequential(IgnoresInput(row));
      };
      const Gradients ignores = stage_gradients(make(), row, split);
      CATCH_CHECK(zeros(ignores.input));
      CATCH_CHECK_FALSE(zeros(ignores.weight));
      CATCH_CHECK(same_bits(ignores.weight, stage_gradients(make(), row, !split).weight));
    }
    {
      torch::manual_seed(9);
      const Gradients none = stage_gradients(
          torch::nn::Sequential(torch::nn::Linear(16, 16), torch::nn::Functional([](torch::Tensor t) { return t.detach(); })),
          row, split);
      CATCH_CHECK_FALSE(zeros(none.output));
      CATCH_CHECK(zeros(none.input));
      CATCH_CHECK(none.weight.size() == 16 * 16 + 16);
      CATCH_CHECK(zeros(none.weight));
    }
  }
}

CATCH_TEST_CASE("the graph's cut: BI stops at the weights, BW starts where their gradients enter", "[torch]") {
  // Structure, not time: for a residual block the cut's roots are the nodes that own
  // parameters (two convolutions, two batch norms), each with exactly its own parameters;
  // a weight used twice makes the cut unusable.
  torch::nn::Sequential blocks;
  torch::manual_seed(3);
  blocks->push_back(Residual(4));
  const torch::Tensor x = torch::randn({2, 4, 5, 5}).requires_grad_(true);
  const torch::Tensor y = blocks->forward(x);
  const std::vector<torch::Tensor> parameters = blocks->parameters();
  CATCH_REQUIRE(parameters.size() == 6);  // conv1, conv2 weights; bn1, bn2 weight and bias
  const auto cut = ppsched::detail::torch_adapter::cut_graph(torch::autograd::impl::gradient_edge(y), x, parameters);
  CATCH_CHECK(cut.usable);
  CATCH_REQUIRE(cut.roots.size() == 4);
  std::vector<std::size_t> covered;
  for (const auto& r : cut.roots) {
    CATCH_CHECK((r.parameters.size() == 1 || r.parameters.size() == 2));
    covered.insert(covered.end(), r.parameters.begin(), r.parameters.end());
  }
  std::sort(covered.begin(), covered.end());
  CATCH_CHECK(covered == std::vector<std::size_t>{0, 1, 2, 3, 4, 5});

  torch::manual_seed(6);
  torch::nn::Linear shared(3, 3);
  const torch::Tensor u = torch::randn({2, 3}).requires_grad_(true);
  const torch::Tensor v = shared(torch::tanh(shared(u)));
  CATCH_CHECK_FALSE(
      ppsched::detail::torch_adapter::cut_graph(torch::autograd::impl::gradient_edge(v), u, shared->parameters())
          .usable);
}

// ------------------------------------------------------------ profiling a Sequential (issue 27)

CATCH_TEST_CASE("profile_sequential measures every child at every size and leaves the model as it was", "[torch]") {
  // Structure and bytes, not speed: a convolution, a batch norm, a residual block and a
  // linear head, at 2 and 4 rows.
  torch::manual_seed(8);
  torch::nn::Sequential model(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3).padding(1)),
                              torch::nn::BatchNorm2d(4), Residual(4), torch::nn::Flatten(),
                              torch::nn::Linear(4 * 5 * 5, 6));
  ppsched::libtorch::TorchProfileOptions o;
  o.rows = {2, 4};
  o.warmup = 1;
  o.repetitions = 3;
  o.input = [](std::int64_t r) { return torch::randn({r, 3, 5, 5}); };
  const std::vector<torch::Tensor> before_buffers = [&] {
    std::vector<torch::Tensor> b;
    for (const torch::Tensor& t : model->buffers()) b.push_back(t.clone());
    return b;
  }();
  const ppsched::libtorch::TorchProfile p = ppsched::libtorch::profile_sequential(model, o);

  CATCH_REQUIRE(p.layers.size() == 5);
  CATCH_CHECK(p.layers[0].name == "0:Conv2d");
  CATCH_CHECK(p.layers[2].name == "2:Residual");
  CATCH_CHECK(p.layers[0].param_bytes == (4 * 3 * 9 + 4) * 4);
  CATCH_CHECK(p.layers[1].param_bytes == 2 * 4 * 4);
  CATCH_CHECK(p.layers[3].param_bytes == 0);
  CATCH_CHECK(p.layers[4].param_bytes == (6 * 100 + 6) * 4);
  for (const ppsched::libtorch::TorchLayerProfile& l : p.layers) {
    CATCH_INFO(l.name);
    CATCH_REQUIRE(l.samples.size() == 2);
    for (std::size_t k = 0; k < 2; ++k) {
      const ppsched::libtorch::TorchLayerSample& s = l.samples[k];
      CATCH_CHECK(s.rows == o.rows[k]);
      for (const ppsched::profiling::TimeSpread& t : {s.forward, s.backward, s.backward_input, s.backward_weight}) {
        CATCH_CHECK(t.min >= 0.0);  // a parameterless child's BW does next to nothing
        CATCH_CHECK(t.min <= t.median);
        CATCH_CHECK(t.median <= t.max);
      }
    }
  }
  CATCH_CHECK(p.layers[2].samples[1].forward.min > 0.0);  // a residual block's forward was timed
  CATCH_CHECK(p.layers[2].samples[1].backward.min > 0.0);
  // Output bytes are the children's outputs, exactly; a residual block keeps activations.
  CATCH_CHECK(p.layers[0].samples[1].output_bytes == 4 * 4 * 25 * 4);
  CATCH_CHECK(p.layers[4].samples[0].output_bytes == 2 * 6 * 4);
  CATCH_CHECK(p.layers[2].samples[0].activation_bytes > 0.0);

  // The model: its batch norms' running statistics as before, no gradient left behind.
  const std::vector<torch::Tensor> after_buffers = model->buffers();
  CATCH_REQUIRE(after_buffers.size() == before_buffers.size());
  for (std::size_t i = 0; i < after_buffers.size(); ++i) CATCH_CHECK(torch::equal(after_buffers[i], before_buffers[i]));
  for (const torch::Tensor& q : model->parameters()) CATCH_CHECK_FALSE(q.grad().defined());

  // The Profile at a measured size: a chain of the children, with the medians and bytes.
  const ppsched::Profile at4 = p.at(4);
  CATCH_REQUIRE(at4.graph.size() == 5);
  CATCH_CHECK(at4.graph.is_chain());
  CATCH_CHECK(at4.time_unit == "ms");
  CATCH_CHECK(at4.graph.layer(2).forward == p.layers[2].samples[1].forward.median);
  CATCH_CHECK(at4.graph.layer(2).backward_weight == p.layers[2].samples[1].backward_weight.median);
  CATCH_CHECK(at4.graph.layer(0).output_bytes == p.layers[0].samples[1].output_bytes);
  CATCH_CHECK(ppsched_error_of([&] { (void)p.at(3); }).find("no measurement at 3 rows") != std::string::npos);
  // The full backward and every measured size go with it, so the planner prices a size from
  // measurement (graph/rows.hpp) instead of scaling the one asked for.
  CATCH_CHECK(at4.rows == 4.0);
  CATCH_REQUIRE(at4.graph.layer(2).backward.has_value());
  CATCH_CHECK(*at4.graph.layer(2).backward == p.layers[2].samples[1].backward.median);
  CATCH_REQUIRE(at4.graph.layer(2).points.size() == 2);
  CATCH_CHECK(at4.graph.layer(2).points[0].rows == 2.0);
  CATCH_CHECK(at4.graph.layer(2).points[0].forward == p.layers[2].samples[0].forward.median);
  CATCH_CHECK(at4.graph.layer(2).points[1].backward_input == p.layers[2].samples[1].backward_input.median);
  const ppsched::Profile at8 = ppsched::profile_at_rows(at4, 8.0);  // beyond the points: their slope
  CATCH_CHECK(at8.graph.layer(0).output_bytes == 2.0 * at4.graph.layer(0).output_bytes);
  // What a stage pays once per call, off the children and onto every action.
  const ppsched::libtorch::TorchProfile::CallOverhead& once = p.call_overhead;
  for (double v : {once.forward, once.backward, once.backward_input, once.backward_weight}) CATCH_CHECK(v >= 0.0);
  CATCH_CHECK(at4.first_stage_backward_in_bw);  // the adapter's first stage: its BW runs the whole backward
  CATCH_CHECK(at4.fixed_costs.action ==
              (once.forward + once.backward + once.backward_input + once.backward_weight) / 4.0);
}

CATCH_TEST_CASE("profile_sequential times the loss into the last child's backward", "[torch]") {
  torch::manual_seed(3);
  torch::nn::Sequential model(torch::nn::Linear(4, 4), torch::nn::Linear(4, 2));
  ppsched::libtorch::TorchProfileOptions o;
  o.rows = {2, 3};
  o.warmup = 0;
  o.repetitions = 2;
  o.input = [](std::int64_t r) { return torch::randn({r, 4}); };
  CATCH_CHECK(ppsched::libtorch::profile_sequential(model, o).loss.empty());  // no loss given, none timed
  o.loss = [](const torch::Tensor& y, const torch::Tensor& t) { return torch::mse_loss(y, t); };
  const ppsched::libtorch::TorchProfile p = ppsched::libtorch::profile_sequential(model, o);
  CATCH_REQUIRE(p.loss.size() == 2);
  for (std::size_t k = 0; k < 2; ++k) {
    CATCH_CHECK(p.loss[k].min > 0.0);
    CATCH_CHECK(p.loss[k].min <= p.loss[k].median);
    // In the last child's B and BI (after the call overhead came off): at least the loss itself.
    CATCH_CHECK(p.layers[1].samples[k].backward.median >= p.loss[k].median);
    CATCH_CHECK(p.layers[1].samples[k].backward_input.median >= p.loss[k].median);
  }
  // A target of the caller's, and a loss that is not one scalar.
  o.target = [](std::int64_t r) { return torch::ones({r, 2}); };
  CATCH_CHECK(ppsched::libtorch::profile_sequential(model, o).loss.size() == 2);
  o.loss = [](const torch::Tensor& y, const torch::Tensor& t) { return y - t; };
  CATCH_CHECK(ppsched_error_of([&] { (void)ppsched::libtorch::profile_sequential(model, o); }).find("TorchProfileOptions::loss") !=
              std::string::npos);
  o.loss = [](const torch::Tensor& y, const torch::Tensor& t) { return torch::mse_loss(y, t); };
  o.target = [](std::int64_t) { return torch::Tensor(); };
  CATCH_CHECK(ppsched_error_of([&] { (void)ppsched::libtorch::profile_sequential(model, o); }).find("TorchProfileOptions::target") !=
              std::string::npos);
}

CATCH_TEST_CASE("profile_sequential takes the call overhead off the children once", "[torch]") {
  // Three children timed alone at two sizes, and the whole chain as one stage.
  const auto child = [](double at2, double at8) {
    ppsched::libtorch::TorchLayerProfile l;
    for (auto [rows, ms] : {std::pair{2, at2}, std::pair{8, at8}}) {
      ppsched::libtorch::TorchLayerSample s;
      s.rows = rows;
      s.forward = {.median = ms, .q1 = ms - 0.05, .q3 = ms + 0.05, .min = ms - 0.1, .max = ms + 0.1};
      s.backward = s.backward_input = s.backward_weight = {.median = ms, .q1 = ms, .q3 = ms, .min = ms, .max = ms};
      l.samples.push_back(s);
    }
    return l;
  };
  std::vector<ppsched::libtorch::TorchLayerProfile> children{child(1.0, 4.0), child(2.0, 5.0), child(3.0, 6.0)};
  const auto whole = [](double forward, double backward) {
    ppsched::detail::torch_adapter::StageTimes t;
    const auto at = [](double ms) { return ppsched::profiling::TimeSpread{.median = ms, .q1 = ms, .q3 = ms, .min = ms, .max = ms}; };
    t.forward = at(forward);
    t.backward = t.backward_input = at(backward);
    t.backward_weight = at(20.0);  // slower as one stage than alone: nothing to take off
    return t;
  };
  // F: (6 - 5) / 2 = 0.5 at 2 rows, (15 - 13) / 2 = 1 at 8: the median 0.75. B: 3 and 4.5, the
  // median 3.75, more than the least child's 1 ms: 1.
  const ppsched::libtorch::TorchProfile::CallOverhead o =
      ppsched::detail::torch_adapter::take_off_call_overhead(children, {whole(5.0, 0.0), whole(13.0, 6.0)});
  CATCH_CHECK(o.forward == Approx(0.75));
  CATCH_CHECK(o.backward == Approx(1.0));
  CATCH_CHECK(o.backward_input == Approx(1.0));
  CATCH_CHECK(o.backward_weight == 0.0);
  CATCH_CHECK(children[0].samples[0].forward.median == Approx(0.25));
  CATCH_CHECK(children[0].samples[0].forward.min == Approx(0.15));
  CATCH_CHECK(children[0].samples[0].forward.q1 == Approx(0.2));  // the quartiles move with the median
  CATCH_CHECK(children[0].samples[0].forward.q3 == Approx(0.3));
  CATCH_CHECK(children[2].samples[1].forward.median == Approx(5.25));
  CATCH_CHECK(children[0].samples[0].backward.median == Approx(0.0));  // never below 0
  CATCH_CHECK(children[1].samples[1].backward_weight.median == 5.0);

  // One child: nothing to compare it with, so nothing is taken off.
  torch::nn::Sequential one(torch::nn::Linear(4, 4));
  ppsched::libtorch::TorchProfileOptions opts;
  opts.rows = {2};
  opts.warmup = 0;
  opts.repetitions = 1;
  opts.input = [](std::int64_t r) { return torch::randn({r, 4}); };
  const ppsched::libtorch::TorchProfile alone = ppsched::libtorch::profile_sequential(one, opts);
  CATCH_CHECK(alone.call_overhead.forward == 0.0);
  CATCH_CHECK(alone.call_overhead.backward_input == 0.0);
  CATCH_CHECK(alone.at(2).fixed_costs.action == 0.0);
}

CATCH_TEST_CASE("profile_sequential rejects options it cannot measure with", "[torch]") {
  torch::nn::Sequential model(torch::nn::Linear(3, 3));
  ppsched::libtorch::TorchProfileOptions o;
  o.input = [](std::int64_t r) { return torch::randn({r, 3}); };
  o.rows = {};
  CATCH_CHECK(ppsched_error_of([&] { (void)ppsched::libtorch::profile_sequential(model, o); }).find("TorchProfileOptions::rows") !=
              std::string::npos);
  o.rows = {0};
  CATCH_CHECK(ppsched_error_of([&] { (void)ppsched::libtorch::profile_sequential(model, o); }).find("size of 0") !=
              std::string::npos);
  o.rows = {2, 4, 2};
  CATCH_CHECK(ppsched_error_of([&] { (void)ppsched::libtorch::profile_sequential(model, o); }).find("measured twice") !=
              std::string::npos);
  o.rows = {2};
  o.repetitions = 0;
  CATCH_CHECK(ppsched_error_of([&] { (void)ppsched::libtorch::profile_sequential(model, o); }).find("repetitions 0") !=
              std::string::npos);
  o.repetitions = 1;
  o.input = nullptr;
  CATCH_CHECK(ppsched_error_of([&] { (void)ppsched::libtorch::profile_sequential(model, o); }).find("no input") !=
              std::string::npos);
}
