// Compiled mode (include/ppsched/config.hpp): this file is built with PPSCHED_COMPILED and
// linked with ppsched_compiled, so every call below reaches a definition compiled once in the
// library. A function the mode declares but the library does not define fails the link; one
// that behaves differently fails here (and test compiled_mode compares whole programs).
#include <catch2/catch.hpp>

#define TEST_STRINGIFY_TEXT(x) #x
#define TEST_STRINGIFY(x) TEST_STRINGIFY_TEXT(x)

#include <ppsched/all.hpp>

#include <sstream>
#include <span>
#include <string>
#include <vector>

static_assert(PPSCHED_OUTLINE_BODY == 0, "test_compiled must be built in compiled mode (ppsched_compiled_dep)");

TEST_CASE("the version of config.hpp is meson.build's, and names the inline namespace") {
  const std::string version = std::to_string(PPSCHED_VERSION_MAJOR) + "." + std::to_string(PPSCHED_VERSION_MINOR) +
                              "." + std::to_string(PPSCHED_VERSION_PATCH);
  CHECK(version == PPSCHED_MESON_VERSION);
  // The tag is the version's major and minor: a bump of one without the other fails here.
  CHECK(std::string(TEST_STRINGIFY(PPSCHED_MODE)) ==
        "v" + std::to_string(PPSCHED_VERSION_MAJOR) + "_" + std::to_string(PPSCHED_VERSION_MINOR) + "_compiled");
}

TEST_CASE("compiled mode: every family builds, lowers, validates and simulates") {
  const ppsched::CostModel costs = ppsched::uniform_costs(1.0, 1.0, 1.0);
  for (std::string_view name : ppsched::family_names()) {
    INFO(name);
    const ppsched::FamilyInfo& family = ppsched::family_info(name);
    ppsched::ScheduleRequest r;
    r.ranks = 4;
    r.microbatches = 8;
    r.chunks = family.chunks_for(2);
    REQUIRE(ppsched::accepts(name, r));
    const ppsched::Schedule s = ppsched::make_schedule(name, r);
    const ppsched::LoweredSchedule lowered = ppsched::lower(s);
    CHECK(ppsched::validate(lowered).ok());
    CHECK(ppsched::validate(s).ok());
    ppsched::check_cost_model(costs, s.stages(), s.microbatches);
    const ppsched::SimResult sim = ppsched::simulate(s, costs);
    CHECK(sim.makespan >= sim.ideal_time);
    ppsched::validate_timeline(sim.timeline);
    const ppsched::TimelineStats stats = ppsched::summarize(sim.timeline);
    CHECK(stats.makespan == Approx(sim.makespan));
    CHECK(!ppsched::to_ascii(sim.timeline).empty());
  }
}

TEST_CASE("compiled mode: 1F1B's makespan is (m + p - 1)(F + B), as in the header-only build") {
  const ppsched::Schedule s = ppsched::make_schedule("1f1b", {.ranks = 4, .microbatches = 8});
  const ppsched::CostModel costs = ppsched::uniform_costs(1.0, 1.0, 1.0);
  ppsched::Workspace ws;
  const ppsched::LoweredSchedule lowered =
      ppsched::lower(s, ppsched::lower_options_for(costs, s.stages(), s.microbatches), ws);
  CHECK(ppsched::simulate(lowered, costs).makespan == Approx((8 + 4 - 1) * 3.0));
}

TEST_CASE("compiled mode: the planner, the search, the device planner, CSV and the writers") {
  const ppsched::plan::PlanModel model = ppsched::plan::per_rank_cost_model({1.0, 1.0, 1.0, 0.0, 0.0});
  ppsched::plan::PlanRequest request;
  request.ranks = 4;
  request.microbatches = 8;
  const ppsched::plan::PlanResult plan = ppsched::plan::compare_families(model, request);
  REQUIRE(plan.recommended_schedule() != nullptr);
  const ppsched::plan::SearchedPlan searched = ppsched::plan::search_plan(model, request);
  REQUIRE(searched.plan.recommended_schedule() != nullptr);
  // The search is never slower than the family recommended without it.
  CHECK(searched.plan.recommended_schedule()->makespan <= plan.recommended_schedule()->makespan + 1e-9);

  ppsched::GraphBuilder layers;
  for (int i = 0; i < 8; ++i) layers.then({"layer " + std::to_string(i), 1.0, 1.0, 1.0, 1e6, 1e6, 1e5});
  ppsched::Profile profile;
  profile.graph = layers.build();
  const ppsched::plan::DevicePlan devices = ppsched::plan::plan_devices(profile, 4, 16, {});
  REQUIRE(devices.chosen.has_value());
  CHECK(devices.chosen->pipeline * devices.chosen->replicas == 4);

  const ppsched::Schedule s = ppsched::make_schedule("zb-h1", {.ranks = 4, .microbatches = 8});
  ppsched::CsvReadOptions read;
  read.name = s.name;
  read.placement = s.placement;
  const ppsched::Schedule again = ppsched::from_pytorch_csv(ppsched::to_pytorch_csv(s), read);
  CHECK(again.programs == s.programs);
  const ppsched::SimResult sim = ppsched::simulate(s, ppsched::uniform_costs(1.0, 1.0, 1.0));
  std::ostringstream svg, trace;
  ppsched::write_svg(svg, sim.timeline);
  ppsched::write_chrome_trace(trace, sim.timeline);
  CHECK(svg.str().find("<svg") != std::string::npos);
  CHECK(trace.str().find("traceEvents") != std::string::npos);
}

TEST_CASE("compiled mode: errors are the header-only build's errors") {
  CHECK_THROWS_WITH(ppsched::family_info("no-such-family"), Catch::Contains("unknown family 'no-such-family'"));
  CHECK_FALSE(ppsched::accepts("no-such-family", {.ranks = 2, .microbatches = 2}));
  CHECK_THROWS_AS(ppsched::make_schedule("1f1b", {.ranks = 0, .microbatches = 2}), ppsched::error);
  ppsched::CostModel costs = ppsched::uniform_costs(1.0, 1.0, 1.0);
  costs.stages.front().forward = -1.0;
  CHECK_THROWS_WITH(ppsched::check_cost_model(costs, 4, 8), Catch::Contains("not a non-negative finite number"));
}

TEST_CASE("compiled mode: World<CpuBackend> trains over the CPU backend's threads") {
  constexpr int ranks = 2, microbatches = 4;
  std::vector<float> weight(ranks, 1.0f);
  std::vector<std::vector<float>> saved(ranks, std::vector<float>(microbatches));
  std::vector<ppsched::StageFunctions> stages(ranks);
  for (int s = 0; s < ranks; ++s) {
    ppsched::StageFunctions& f = stages[s];
    f.input_size = f.output_size = f.weight_grad_size = 1;
    f.forward = [&, s](int mb, std::span<const float> x, std::span<float> y) {
      saved[s][mb] = x[0];
      y[0] = weight[s] * x[0];
    };
    f.backward = [&, s](int mb, auto, std::span<const float> dy, std::span<float> dx, std::span<float> dw) {
      if (!dx.empty()) dx[0] = weight[s] * dy[0];
      dw[0] = saved[s][mb] * dy[0];
    };
    f.optimizer_step = [&, s](std::span<const float> dw) { weight[s] -= 0.1f * dw[0]; };
  }
  stages.back().target_size = 1;
  stages.back().loss = [](int, std::span<const float> y, std::span<const float> t, std::span<float> dy) {
    const float d = y[0] - t[0];
    dy[0] = d / microbatches;
    return 0.5f * d * d;
  };
  const ppsched::Schedule schedule =
      ppsched::make_schedule("1f1b", {.ranks = ranks, .microbatches = microbatches});
  ppsched::CpuCluster cluster(ranks);
  std::vector<ppsched::CpuBackend*> backends{&cluster.rank(0), &cluster.rank(1)};
  ppsched::World<ppsched::CpuBackend> world(backends, schedule, stages);
  const std::vector<float> inputs(microbatches, 1.0f), targets(microbatches, 2.0f);
  const double first = world.run_step({inputs, targets}).mean_loss();
  CHECK(first == Approx(0.5));  // (1·1 − 2)² / 2 before any update
  // w0·w1 moves toward 2: after the step dw = x·dy summed, each weight grows by 0.1.
  CHECK(weight[0] == Approx(1.1f));
  CHECK(weight[1] == Approx(1.1f));
  CHECK(world.run_step({inputs, targets}).mean_loss() < first);
}
