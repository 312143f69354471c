// The executor's memory actions (issue 23, item 3): R (recompute), OFFLOAD and RELOAD on the
// CPU backend. The schedules are every training family's, with the actions written in by
// hand (R before each backward; OFFLOAD after each forward and RELOAD before its backward),
// so these tests do not depend on the planner's policies. The model is examples/mlp, whose
// stage honours keep_activation and moves its saved activations to the host pool.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <ppsched/backend/cpu.hpp>
#include <ppsched/runtime/world.hpp>
#include <ppsched/plan/memory_policy.hpp>
#include <ppsched/schedule/generators.hpp>
#include <ppsched/validate/validate.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../examples/mlp/mlp.hpp"
#include "../examples/mlp/mlp_stage.hpp"
#include "training_families.hpp"

namespace {

using ppsched::Action;
using ppsched::Op;

enum class Policy { none, recompute_default, recompute_own, offload, layerwise, layerwise_offload };

const char* name(Policy p) {
  switch (p) {
    case Policy::none: return "none";
    case Policy::recompute_default: return "recompute (forward again)";
    case Policy::recompute_own: return "recompute (the stage's own)";
    case Policy::offload: return "offload";
    case Policy::layerwise: return "layer-wise recompute";
    case Policy::layerwise_offload: return "layer-wise recompute, checkpoints offloaded";
  }
  return "?";
}

// The schedule with the policy's actions written in (training_families.hpp).
ppsched::Schedule with_policy(const ppsched::Schedule& s, Policy p) {
  using ppsched_test::MemoryPolicy;
  const MemoryPolicy m = p == Policy::none                ? MemoryPolicy::none
                         : p == Policy::offload           ? MemoryPolicy::offload
                         : p == Policy::layerwise_offload ? MemoryPolicy::recompute_offload
                                                          : MemoryPolicy::recompute;
  return ppsched_test::with_policy(s, m);
}

std::vector<float> data(std::size_t n, std::uint32_t seed, float scale) {
  mlp::Random random(seed);
  std::vector<float> out(n);
  for (float& x : out) x = scale * random.next();
  return out;
}

// A pipelined MLP, its stages with memory actions, and an unpipelined reference.
struct Model {
  std::size_t rows = 2;
  std::vector<std::size_t> widths;
  std::size_t layers = 0;
  float loss_scale = 0;
  float learning_rate = 0.5f;
  std::unique_ptr<mlp::Mlp> pipelined;
  std::unique_ptr<mlp::Mlp> reference;
  std::vector<std::unique_ptr<mlp::MlpStage>> adapters;
  std::vector<ppsched::StageFunctions> functions;
  std::vector<std::vector<float>> applied;

  Model(int stages, int m, Policy policy) {
    layers = static_cast<std::size_t>(std::max(4, stages) + 1);
    widths.push_back(3);
    for (std::size_t l = 1; l < layers; ++l) widths.push_back(4 + l % 3);
    widths.push_back(2);
    loss_scale = 1.0f / static_cast<float>(rows * static_cast<std::size_t>(m));
    pipelined = std::make_unique<mlp::Mlp>(widths, 7);
    reference = std::make_unique<mlp::Mlp>(widths, 7);
    applied.resize(static_cast<std::size_t>(stages));
    for (int s = 0; s < stages; ++s) {
      const std::size_t first = layers * static_cast<std::size_t>(s) / static_cast<std::size_t>(stages);
      const std::size_t last = layers * static_cast<std::size_t>(s + 1) / static_cast<std::size_t>(stages);
      adapters.push_back(std::make_unique<mlp::MlpStage>(*pipelined, first, last, rows, m));
      ppsched::StageFunctions f = adapters.back()->functions(s + 1 == stages, loss_scale, learning_rate);
      if (policy == Policy::layerwise) {
        adapters.back()->add_layerwise_recompute(f);
      } else if (policy == Policy::layerwise_offload) {
        adapters.back()->add_layerwise_offload(f);
      } else if (policy != Policy::none) {
        adapters.back()->add_memory_actions(f, policy == Policy::recompute_own);
      }
      f.optimizer_step = [apply = f.optimizer_step, this, s](std::span<const float> g) {
        applied[static_cast<std::size_t>(s)].assign(g.begin(), g.end());
        apply(g);
      };
      functions.push_back(std::move(f));
    }
  }
};

// Trains `steps` steps pipelined and unpipelined; true when losses, gradients and weights
// are bit-identical after every step.
bool trains_exactly(const ppsched::Schedule& schedule, Policy policy, ppsched::CpuMode mode, int steps) {
  const int m = schedule.microbatches;
  Model model(schedule.stages(), m, policy);
  ppsched::CpuOptions co;
  co.mode = mode;
  ppsched::CpuCluster cluster(schedule.ranks, co);
  ppsched::World<ppsched::CpuBackend> world(ppsched_test::backends(cluster), schedule, model.functions);
  bool exact = true;
  for (int step = 0; step < steps; ++step) {
    const auto inputs = data(static_cast<std::size_t>(m) * model.rows * model.widths.front(),
                             100u + static_cast<std::uint32_t>(step), 1.0f);
    const auto targets = data(static_cast<std::size_t>(m) * model.rows * model.widths.back(),
                              200u + static_cast<std::uint32_t>(step), 0.8f);
    const auto& result = world.run_step({inputs, targets});
    std::vector<float> reference_gradient;
    const auto reference_losses = mlp::train_step_unpipelined(*model.reference, inputs, targets, model.rows, m,
                                                              model.loss_scale, model.learning_rate, &reference_gradient);
    std::vector<float> gradient;
    for (const auto& g : model.applied) gradient.insert(gradient.end(), g.begin(), g.end());
    exact = exact && result.losses == reference_losses && gradient == reference_gradient;
  }
  for (std::size_t l = 0; l < model.layers; ++l) {
    const auto a = model.pipelined->layers[l].parameters();
    const auto b = model.reference->layers[l].parameters();
    exact = exact && std::vector<float>(a.begin(), a.end()) == std::vector<float>(b.begin(), b.end());
  }
  return exact;
}

// The most micro-batches of `rank` offloaded at once in issue order, per stage size: what the
// host pool must hold.
std::size_t host_floats_needed(const ppsched::Schedule& s, int rank, const std::vector<ppsched::StageFunctions>& f) {
  std::map<std::size_t, int> live, peak;
  for (const Action& a : s.programs[static_cast<std::size_t>(rank)]) {
    const std::size_t size = f[static_cast<std::size_t>(a.stage)].offload_size;
    if (a.op == Op::OFFLOAD) peak[size] = std::max(peak[size], ++live[size]);
    if (a.op == Op::RELOAD) --live[size];
  }
  std::size_t n = 0;
  for (const auto& [size, count] : peak) n += size * static_cast<std::size_t>(count);
  return n;
}

}  // namespace

TEST_CASE("hand-written memory schedules are valid for every training family", "[memory]") {
  for (const auto& fam : ppsched_test::training_families()) {
    for (Policy p : {Policy::recompute_default, Policy::offload, Policy::layerwise_offload}) {
      const ppsched::Schedule s = with_policy(ppsched_test::make(fam, 4, 8), p);
      INFO(fam.name << ", " << name(p));
      const ppsched::ValidationReport report = ppsched::validate(ppsched::lower(s).schedule());
      INFO(ppsched::to_string(report));
      CHECK(report.ok());
    }
  }
}

TEST_CASE("gradients are bit-identical with and without each memory policy, for every training family",
          "[memory]") {
  for (const auto& fam : ppsched_test::training_families()) {
    for (int p : {2, 4}) {
      for (Policy policy : {Policy::none, Policy::recompute_default, Policy::recompute_own, Policy::offload, Policy::layerwise,
                            Policy::layerwise_offload}) {
        const ppsched::Schedule s = with_policy(ppsched_test::make(fam, p, 2 * p), policy);
        INFO(fam.name << " p=" << p << ", " << name(policy));
        CHECK(trains_exactly(s, policy, ppsched::CpuMode::threaded, 2));
      }
    }
  }
}

TEST_CASE("memory policies are bit-identical in the deterministic mode too", "[memory]") {
  for (const auto& fam : ppsched_test::training_families()) {
    for (Policy policy : {Policy::recompute_default, Policy::offload, Policy::layerwise, Policy::layerwise_offload}) {
      INFO(fam.name << ", " << name(policy));
      CHECK(trains_exactly(with_policy(ppsched_test::make(fam, 4, 8), policy), policy,
                           ppsched::CpuMode::deterministic, 2));
    }
  }
}

TEST_CASE("the forward of a recomputed micro-batch does not keep, and R restores what backward reads",
          "[memory]") {
  const ppsched::Schedule s = with_policy(ppsched::make_schedule("1f1b", {.ranks = 2, .microbatches = 4}), Policy::recompute_default);
  Model model(2, 4, Policy::recompute_own);
  std::vector<int> dropped(2, 0), recomputed(2, 0);
  for (int st = 0; st < 2; ++st) {
    auto& f = model.functions[static_cast<std::size_t>(st)];
    f.forward = [g = f.forward, &dropped, st](const ppsched::StageContext& c, std::span<const float> in,
                                              std::span<float> out) {
      if (!c.keep_activation) ++dropped[static_cast<std::size_t>(st)];
      g(c, in, out);
    };
    f.recompute = [g = f.recompute, &recomputed, st](const ppsched::StageContext& c, std::span<const float> in) {
      CHECK(c.call == ppsched::StageCall::recompute);
      CHECK(c.keep_activation);
      ++recomputed[static_cast<std::size_t>(st)];
      g(c, in);
    };
  }
  ppsched::CpuCluster cluster(2);
  ppsched::World<ppsched::CpuBackend> world(ppsched_test::backends(cluster), s, model.functions);
  const auto inputs = data(4 * model.rows * model.widths.front(), 1, 1.0f);
  const auto targets = data(4 * model.rows * model.widths.back(), 2, 1.0f);
  (void)world.run_step({inputs, targets});
  CHECK(dropped == std::vector<int>{4, 4});
  CHECK(recomputed == std::vector<int>{4, 4});
}

TEST_CASE("a recompute that reads what forward did not keep fails loudly, naming R", "[memory]") {
  const ppsched::Schedule s = with_policy(ppsched::make_schedule("1f1b", {.ranks = 2, .microbatches = 4}), Policy::recompute_default);
  Model model(2, 4, Policy::recompute_default);
  // A recompute that starts from the saved state instead of the input: the forward kept none.
  mlp::MlpStage& stage1 = *model.adapters[1];
  model.functions[1].recompute = [&stage1](const ppsched::StageContext& c, std::span<const float>) {
    (void)stage1.saved_output(c.microbatch, 0, "recompute");
  };
  const int threads = ppsched::live_threads();
  {
    ppsched::CpuCluster cluster(2);
    ppsched::World<ppsched::CpuBackend> world(ppsched_test::backends(cluster), s, model.functions);
    const auto inputs = data(4 * model.rows * model.widths.front(), 1, 1.0f);
    const auto targets = data(4 * model.rows * model.widths.back(), 2, 1.0f);
    CHECK_THROWS_WITH(world.run_step({inputs, targets}),
                      Catch::Contains("action R0@s1") && Catch::Contains("recompute reads micro-batch 0") &&
                          Catch::Contains("did not keep"));
  }
  CHECK(ppsched::live_threads() == threads);
}

TEST_CASE("a fault in R or RELOAD ends the step cleanly with the action named, and the next step runs",
          "[memory]") {
  for (Policy policy : {Policy::recompute_default, Policy::offload}) {
    const ppsched::Schedule s =
        with_policy(ppsched::make_schedule("1f1b", {.ranks = 2, .microbatches = 4}), policy);
    Model model(2, 4, policy);
    bool fail = true;
    auto& f = model.functions[0];
    if (policy == Policy::offload) {
      f.reload = [g = f.reload, &fail](const ppsched::StageContext& c, std::span<const float> host) {
        if (fail && c.microbatch == 2) throw std::runtime_error("host memory went away");
        g(c, host);
      };
    } else {
      // The default recompute: the forward again, told so by its context.
      f.forward = [g = f.forward, &fail](const ppsched::StageContext& c, std::span<const float> in,
                                         std::span<float> out) {
        if (fail && c.microbatch == 2 && c.call == ppsched::StageCall::recompute) {
          throw std::runtime_error("out of memory");
        }
        g(c, in, out);
      };
    }
    const int threads = ppsched::live_threads();
    {
      ppsched::CpuCluster cluster(2);
      ppsched::World<ppsched::CpuBackend> world(ppsched_test::backends(cluster), s, model.functions);
      const auto inputs = data(4 * model.rows * model.widths.front(), 1, 1.0f);
      const auto targets = data(4 * model.rows * model.widths.back(), 2, 1.0f);
      INFO(name(policy));
      CHECK_THROWS_WITH(world.run_step({inputs, targets}),
                        Catch::Contains("rank 0, stage 0, micro-batch 2, action ") &&
                            Catch::Contains(policy == Policy::offload ? "RELOAD2@s0" : "R2@s0") &&
                            Catch::Contains(policy == Policy::offload ? "host memory went away" : "out of memory"));
      fail = false;
      CHECK(std::isfinite(world.run_step({inputs, targets}).losses[0]));
    }
    CHECK(ppsched::live_threads() == threads);
  }
}

TEST_CASE("the host pool holds what the schedule offloads at once, allocated once", "[memory]") {
  for (const auto& fam : ppsched_test::training_families()) {
    const ppsched::Schedule s = with_policy(ppsched_test::make(fam, 4, 8), Policy::offload);
    Model model(s.stages(), 8, Policy::offload);
    ppsched::CpuCluster cluster(4);
    ppsched::World<ppsched::CpuBackend> world(ppsched_test::backends(cluster), s, model.functions);
    const ppsched::LoweredSchedule lowered = ppsched::lower(s);
    for (int r = 0; r < 4; ++r) {
      INFO(fam.name << " rank " << r);
      const std::size_t need = host_floats_needed(lowered.schedule(), r, model.functions);
      CHECK(need > 0);
      CHECK(world.executor(r).host_floats() == need);
      CHECK(cluster.rank(r).host_floats() == need);
    }
    const auto inputs = data(8 * model.rows * model.widths.front(), 1, 1.0f);
    const auto targets = data(8 * model.rows * model.widths.back(), 2, 1.0f);
    const ppsched::StepResult& result = world.run_step({inputs, targets});
    for (int r = 0; r < 4; ++r) CHECK(cluster.rank(r).host_floats() == world.executor(r).host_floats());
    for (const ppsched::Span& span : result.timeline.spans) {
      if (ppsched::is_copy(span.action.op)) CHECK(span.lane == ppsched::Lane::copy);
    }
  }
}

TEST_CASE("the plan refuses memory actions out of order, naming the action", "[memory]") {
  const ppsched::Schedule base = ppsched::make_schedule("gpipe", {.ranks = 1, .microbatches = 2});
  std::vector<ppsched::StageShape> shapes{{4, 4, 8}};
  auto plan_of = [&](std::vector<Action> prog) {
    ppsched::Schedule s = base;
    s.programs[0] = std::move(prog);
    return ppsched::plan_rank(s, 0, shapes);
  };
  const Action f0{Op::F, 0, 0, 0}, f1{Op::F, 0, 1, 0}, b0{Op::B, 0, 0, 0}, b1{Op::B, 0, 1, 0};
  CHECK_THROWS_WITH(plan_of({f0, f1, {Op::OFFLOAD, 0, 0, 0}, b0, {Op::RELOAD, 0, 0, 0}, b1}),
                    Catch::Contains("no RELOAD brought back") && Catch::Contains("B0@s0"));
  CHECK_THROWS_WITH(plan_of({f0, f1, b0, {Op::R, 0, 0, 0}, b1}),
                    Catch::Contains("after its backward") && Catch::Contains("R0@s0"));
  CHECK_THROWS_WITH(plan_of({{Op::R, 0, 0, 0}, f0, f1, b0, b1}), Catch::Contains("before its forward"));
  CHECK_THROWS_WITH(plan_of({f0, f1, {Op::R, 0, 0, 0}, {Op::OFFLOAD, 0, 0, 0}, b0, b1}),
                    Catch::Contains("offloads a micro-batch after its recompute") && Catch::Contains("OFFLOAD0@s0"));
  CHECK_THROWS_WITH(plan_of({f0, {Op::OFFLOAD, 0, 0, 0}, f1, {Op::R, 0, 0, 0}, {Op::RELOAD, 0, 0, 0}, b0, b1}),
                    Catch::Contains("no RELOAD brought back before it") && Catch::Contains("R0@s0"));
  const ppsched::RankPlan p =
      plan_of({f0, {Op::OFFLOAD, 0, 0, 0}, f1, {Op::OFFLOAD, 0, 1, 0}, {Op::RELOAD, 0, 1, 0}, b1,
               {Op::RELOAD, 0, 0, 0}, b0});
  CHECK(p.has_copies);
  CHECK(p.host_pools == std::vector<ppsched::BufferPool>{{8, 2}});
  // Steps: 0 F0, 1 OFFLOAD0, 2 F1, 3 OFFLOAD1, 4 RELOAD1, 5 B1, 6 RELOAD0, 7 B0. A copy waits
  // for the compute step issued before it (once per stream: RELOAD1's F1 was waited for by
  // OFFLOAD1), a backward for its RELOAD.
  CHECK(p.steps[1].copy);
  CHECK(p.steps[1].wait_on == 0);
  CHECK(p.steps[3].wait_on == 2);
  CHECK(p.steps[4].wait_on == -1);
  CHECK(p.steps[5].copy_wait == 4);
  CHECK(p.steps[6].wait_on == 5);
  CHECK(p.steps[7].copy_wait == 6);
  CHECK(p.steps[1].host != p.steps[3].host);
  CHECK(p.steps[6].host == p.steps[1].host);
  // Layer-wise recomputation with offloaded checkpoints: R waits for the RELOAD of what it
  // recomputes from. Steps: 0 F0, 1 OFFLOAD0, 2 F1, 3 RELOAD0, 4 R0, 5 B0, 6 B1.
  const ppsched::RankPlan both =
      plan_of({f0, {Op::OFFLOAD, 0, 0, 0}, f1, {Op::RELOAD, 0, 0, 0}, {Op::R, 0, 0, 0}, b0, b1});
  CHECK(both.steps[3].copy);
  CHECK(both.steps[4].copy_wait == 3);
  CHECK(both.steps[0].drops_activation);
}

TEST_CASE("a stage offloaded without offload callables is refused when the executor is built", "[memory]") {
  const ppsched::Schedule s = with_policy(ppsched::make_schedule("1f1b", {.ranks = 2, .microbatches = 4}), Policy::offload);
  Model model(2, 4, Policy::none);
  ppsched::CpuCluster cluster(2);
  CHECK_THROWS_WITH((ppsched::World<ppsched::CpuBackend>(ppsched_test::backends(cluster), s, model.functions)),
                    Catch::Contains("gives no offload callable") && Catch::Contains("StageFunctions::offload"));
}

TEST_CASE("in checking mode, a recompute that does not give the forward's output fails the step", "[memory]") {
  const ppsched::Schedule s =
      with_policy(ppsched::make_schedule("1f1b", {.ranks = 2, .microbatches = 4}), Policy::recompute_default);
  for (const bool checking : {true, false}) {
    Model model(2, 4, Policy::recompute_default);
    // A forward that reads something it does not keep (a call counter): its recompute differs.
    auto calls = std::make_shared<int>(0);
    model.functions[1].forward = [g = model.functions[1].forward, calls](const ppsched::StageContext& c,
                                                                         std::span<const float> in, std::span<float> out) {
      g(c, in, out);
      out[0] += static_cast<float>((*calls)++);
    };
    ppsched::CpuOptions co;
    co.checking = checking;
    ppsched::CpuCluster cluster(2, co);
    ppsched::World<ppsched::CpuBackend> world(ppsched_test::backends(cluster), s, model.functions);
    const auto inputs = data(4 * model.rows * model.widths.front(), 1, 1.0f);
    const auto targets = data(4 * model.rows * model.widths.back(), 2, 1.0f);
    INFO("checking " << checking);
    if (checking) {
      CHECK_THROWS_WITH(world.run_step({inputs, targets}),
                        Catch::Contains("action R0@s1") && Catch::Contains("gave another output than its forward"));
    } else {
      CHECK_NOTHROW(world.run_step({inputs, targets}));
    }
  }
}

TEST_CASE("the planner's memory policies run bit-identically for every training family", "[memory]") {
  // apply_memory_policies (plan/memory_policy.hpp) places R into idle time and RELOAD ahead of
  // its backward: the places differ from the hand-written ones above, the bits may not.
  ppsched::CostModel costs = ppsched::uniform_costs(1.0, 2.0, 1.0);
  for (auto& c : costs.stages) c.activation_bytes = 1.0;
  for (const auto& fam : ppsched_test::training_families()) {
    const ppsched::Schedule plain = ppsched_test::make(fam, 4, 8);
    ppsched::CostModel model = costs;
    model.stages.assign(static_cast<std::size_t>(plain.stages()), costs.stages.front());
    for (const ppsched::plan::MemoryPolicy policy :
         {ppsched::plan::MemoryPolicy::full_recompute(), ppsched::plan::MemoryPolicy::selective(0.5), ppsched::plan::MemoryPolicy::offload(),
          ppsched::plan::MemoryPolicy::layerwise_offload(0.5, 0.25, 0.5)}) {
      const ppsched::plan::MemoryPlan plan = ppsched::plan::apply_memory_policies(plain, model, {policy});
      const Policy p = policy.kind == ppsched::plan::MemoryPolicyKind::offload             ? Policy::offload
                       : policy.kind == ppsched::plan::MemoryPolicyKind::layerwise_offload ? Policy::layerwise_offload
                                                                                     : Policy::recompute_default;
      INFO(fam.name << ", " << ppsched::plan::to_string(policy));
      CHECK(trains_exactly(plan.schedule, p, ppsched::CpuMode::threaded, 2));
    }
  }
}

TEST_CASE("a RELOAD that never ends is named on the copy stream by the watchdog, and the step ends", "[memory]") {
  using namespace std::chrono_literals;
  // One rank, so that its watchdog is the one that reports.
  const ppsched::Schedule s =
      with_policy(ppsched::make_schedule("1f1b", {.ranks = 1, .microbatches = 4}), Policy::offload);
  Model model(1, 4, Policy::offload);
  // Stuck until the step fails: it polls the step's stop token, as a long callable should.
  model.functions[0].reload = [g = model.functions[0].reload](const ppsched::StageContext& c,
                                                              std::span<const float> host) {
    if (c.microbatch == 1) {
      while (!ppsched::step_stop_token().stop_requested()) std::this_thread::yield();
      return;
    }
    g(c, host);
  };
  const int threads = ppsched::live_threads();
  {
    ppsched::CpuCluster cluster(1);
    ppsched::ExecutorOptions options;
    options.watchdog = 200ms;
    ppsched::World<ppsched::CpuBackend> world(ppsched_test::backends(cluster), s, model.functions, options);
    const auto inputs = data(4 * model.rows * model.widths.front(), 1, 1.0f);
    const auto targets = data(4 * model.rows * model.widths.back(), 2, 1.0f);
    CHECK_THROWS_WITH(world.run_step({inputs, targets}),
                      Catch::Contains("rank 0") && Catch::Contains("watchdog") &&
                          Catch::Contains("copy stream: RELOAD1@s0 is running"));
  }
  CHECK(ppsched::live_threads() == threads);
}
