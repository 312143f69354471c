// Data x pipeline parallelism: the all-reduce cost model and its overlap with the pipeline's
// drain (sim/data_parallel.hpp), and the planner for N devices (plan/devices.hpp). Expected
// values are derived here from the formulas and from the simulated timelines, not copied from
// a run.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ppsched/error.hpp"
#include "ppsched/graph/layer_graph.hpp"
#include "ppsched/plan/devices.hpp"
#include "ppsched/schedule/generators.hpp"
#include "ppsched/sim/data_parallel.hpp"
#include "ppsched/sim/simulate.hpp"
#include "run_tool.hpp"

using namespace ppsched;

namespace {

constexpr double GiB = 1024.0 * 1024.0 * 1024.0;

// The end of the last weight-gradient action (B or BW) of `stage` in a timeline.
double weights_done(const Timeline& t, std::int32_t stage) {
  double end = 0.0;
  for (const Span& s : t.spans) {
    if (s.action.stage == stage && (s.action.op == Op::B || s.action.op == Op::BW)) end = std::max(end, s.end);
  }
  return end;
}

// A chain of `n` identical layers, F = BI = BW = 1 per sample, `param` parameter bytes each.
Profile chain(int n, double param) {
  std::vector<Layer> layers;
  for (int i = 0; i < n; ++i) layers.push_back(Layer{"layer " + std::to_string(i), 1.0, 1.0, 1.0, param, 1024.0, 1024.0});
  Profile p;
  p.graph = LayerGraph(std::move(layers));
  p.time_unit = "ms";
  return p;
}

// ppsched-plan, from the environment (tests/meson.build) or next to this test in the build tree.
test_support::Run plan_tool(const std::vector<std::string>& args) {
  std::filesystem::path tool;
  if (const char* p = std::getenv("PPSCHED_PLAN"); p != nullptr && *p != '\0') {
    tool = p;
  } else {
    tool = std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path() / "examples" / "ppsched-plan";
  }
  return test_support::run_tool(tool, args);
}

}  // namespace

TEST_CASE("all-reduce time: ring and tree against the hand-derived formulas", "[data_parallel][sim]") {
  const Interconnect link{0.5, 100.0};
  // ring: 2(d-1) latency + 2(d-1)/d bytes / bandwidth
  CHECK(all_reduce_time(1200.0, {4, link, AllReduceAlgorithm::ring}) == Approx(2 * 3 * 0.5 + 2.0 * 3 / 4 * 12.0));
  CHECK(all_reduce_time(1200.0, {2, link, AllReduceAlgorithm::ring}) == Approx(2 * 1 * 0.5 + 1.0 * 12.0));
  // tree: 2 ceil(log2 d) latency + 2 bytes / bandwidth; 5 replicas need a tree of depth 3
  CHECK(all_reduce_time(1200.0, {4, link, AllReduceAlgorithm::tree}) == Approx(2 * 2 * 0.5 + 2 * 12.0));
  CHECK(all_reduce_time(1200.0, {5, link, AllReduceAlgorithm::tree}) == Approx(2 * 3 * 0.5 + 2 * 12.0));
  // One replica has nothing to sum; free bytes leave the latency terms.
  CHECK(all_reduce_time(1200.0, {1, link, AllReduceAlgorithm::ring}) == 0.0);
  CHECK(all_reduce_time(1200.0, {8, Interconnect{0.25}, AllReduceAlgorithm::ring}) == Approx(2 * 7 * 0.25));
  // Many replicas: the ring's bandwidth term tends to 2 bytes / bandwidth, the tree's latency grows slower.
  const double ring_big = all_reduce_time(1e6, {1024, Interconnect{0.0, 1.0}, AllReduceAlgorithm::ring});
  CHECK(ring_big < 2e6);
  CHECK(ring_big > 2e6 * 1023.0 / 1024.0 - 1.0);

  CHECK_THROWS_AS(all_reduce_time(-1.0, {2, link}), error);
  CHECK_THROWS_AS(all_reduce_time(1.0, {0, link}), error);
  CHECK_THROWS_AS(all_reduce_time(1.0, {2, Interconnect{0.0, 0.0}}), error);
  CHECK_THROWS_WITH(all_reduce_time(std::numeric_limits<double>::quiet_NaN(), {2, link}), Catch::Contains("finite size"));
}

TEST_CASE("data-parallel step: a stage whose weights finish early hides its all-reduce under the drain",
          "[data_parallel][sim]") {
  // 1F1B on 2 ranks: the last stage's final B ends one B before the first stage's, so its
  // all-reduce has that gap to hide in; the first stage's all-reduce is always exposed.
  const SimResult sim = simulate(make_schedule("1f1b", {2, 4, 1}), uniform_costs(1.0, 1.0, 1.0));
  const double t0 = weights_done(sim.timeline, 0), t1 = weights_done(sim.timeline, 1);
  REQUIRE(t0 == Approx(sim.makespan));
  REQUIRE(t1 < t0);
  const double gap = t0 - t1;
  // Two replicas, a free-latency ring of bandwidth 1: an all-reduce of n bytes takes n.
  const AllReduceModel two{2, Interconnect{0.0, 1.0}, AllReduceAlgorithm::ring};

  SECTION("hidden: the last stage's all-reduce fits in the gap") {
    const std::vector<double> bytes{0.0, gap / 2};
    const DataParallelStep step = data_parallel_step(sim.timeline, bytes, two);
    CHECK(step.pipeline_time == Approx(sim.makespan));
    CHECK(step.step_time == Approx(sim.makespan));
    CHECK(step.all_reduce_exposed == Approx(0.0).margin(1e-12));
    CHECK(step.stages[1].start == Approx(t1));
    CHECK(step.stages[1].end == Approx(t1 + gap / 2));
    CHECK(step.stages[1].rank == 1);
  }
  SECTION("partly exposed: longer than the gap by 1.5") {
    const std::vector<double> bytes{0.0, gap + 1.5};
    const DataParallelStep step = data_parallel_step(sim.timeline, bytes, two);
    CHECK(step.step_time == Approx(sim.makespan + 1.5));
    CHECK(step.all_reduce_exposed == Approx(1.5));
  }
  SECTION("the same bytes on the first stage are all exposed") {
    const std::vector<double> bytes{gap / 2, 0.0};
    const DataParallelStep step = data_parallel_step(sim.timeline, bytes, two);
    CHECK(step.step_time == Approx(sim.makespan + gap / 2));
    CHECK(step.all_reduce_exposed == Approx(gap / 2));
  }
  SECTION("the optimizer runs after a rank's all-reduce; what the all-reduce adds excludes it") {
    const std::vector<double> bytes{0.0, gap + 1.0}, optimizer{2.0, 0.5};
    const DataParallelStep step = data_parallel_step(sim.timeline, bytes, two, optimizer);
    CHECK(step.rank_end[0] == Approx(t0 + 2.0));
    CHECK(step.rank_end[1] == Approx(t1 + gap + 1.0 + 0.5));
    CHECK(step.step_time == Approx(std::max(t0 + 2.0, t0 + 1.5)));
    CHECK(step.all_reduce_exposed == Approx(0.0).margin(1e-12));  // rank 0's optimizer is the later end
  }
  SECTION("one replica adds nothing") {
    const std::vector<double> bytes{1e9, 1e9};
    const DataParallelStep step = data_parallel_step(sim.timeline, bytes, {1, Interconnect{0.0, 1.0}});
    CHECK(step.step_time == Approx(sim.makespan));
    CHECK(step.all_reduce_longest == 0.0);
  }
  SECTION("errors name the input") {
    CHECK_THROWS_WITH(data_parallel_step(sim.timeline, std::vector<double>{1.0}, two), Catch::Contains("gradient sizes"));
    const SimResult forward = simulate(make_schedule("forward-only", {2, 4, 1}), uniform_costs(1.0, 1.0, 1.0));
    CHECK_THROWS_WITH(data_parallel_step(forward.timeline, std::vector<double>{1.0, 1.0}, two),
                      Catch::Contains("no weight-gradient action"));
  }
}

TEST_CASE("data-parallel step: a rank's all-reduces share one channel, in the order their gradients are ready",
          "[data_parallel][sim]") {
  // Interleaved 1F1B puts two stages on each rank: their all-reduces queue on the rank.
  const SimResult sim = simulate(make_schedule("interleaved-1f1b", {2, 4, 2}), uniform_costs(1.0, 1.0, 1.0));
  const AllReduceModel two{2, Interconnect{0.0, 1.0}};
  const std::vector<double> bytes(4, 100.0);
  const DataParallelStep step = data_parallel_step(sim.timeline, bytes, two);
  for (std::int32_t rank = 0; rank < 2; ++rank) {
    std::vector<StageAllReduce> mine;
    for (const StageAllReduce& s : step.stages) {
      if (s.rank == rank) mine.push_back(s);
    }
    REQUIRE(mine.size() == 2);
    std::sort(mine.begin(), mine.end(), [](const auto& a, const auto& b) { return a.start < b.start; });
    CHECK(mine[0].start == Approx(mine[0].weights_done));
    CHECK(mine[1].start == Approx(std::max(mine[1].weights_done, mine[0].end)));
    CHECK(mine[1].end - mine[1].start == Approx(100.0));
  }
}

TEST_CASE("plan_devices: the memory cap forces a pipeline", "[data_parallel][plan]") {
  // 8 layers of 1 GiB parameters on 4 devices, 16 samples. Every split does the same work per
  // device (8 layers x 3 x 16 / 4 = 96), and one stage per replica has no bubble: with free
  // all-reduces p = 1 wins. A 5 GiB cap leaves p = 1 (8 GiB of parameters) out.
  const Profile model = chain(8, GiB);
  DevicePlanOptions o;
  o.optimizer_state_factor = 1.0;
  o.all_reduce_link = Interconnect{};
  const DevicePlan free_plan = plan_devices(model, 4, 16, std::nullopt, o);
  REQUIRE(free_plan.chosen);
  CHECK(free_plan.chosen->pipeline == 1);
  CHECK(free_plan.chosen->replicas == 4);
  CHECK(free_plan.chosen->step_time == Approx(8 * 3 * 16 / 4.0));

  const DevicePlan capped = plan_devices(model, 4, 16, 5 * GiB, o);
  REQUIRE(capped.chosen);
  CHECK(capped.chosen->pipeline > 1);
  CHECK(capped.chosen->peak_memory_bytes <= 5 * GiB);
  CHECK(capped.chosen->pipeline * capped.chosen->replicas == 4);
  CHECK(capped.chosen->microbatches * capped.chosen->microbatch_size * capped.chosen->replicas == 16);
  CHECK_THAT(capped.reason, Catch::Contains("p=1 does not fit"));
  for (const DeviceSplit& a : capped.alternatives) {
    CHECK(a.fits);
    CHECK(a.step_time >= capped.chosen->step_time);
  }
  CHECK(capped.alternatives.size() == o.alternatives);

  const DevicePlan impossible = plan_devices(model, 4, 16, 1 * GiB, o);
  CHECK_FALSE(impossible.chosen);
  CHECK_THAT(impossible.reason, Catch::Contains("no split fits the memory cap"));
}

TEST_CASE("plan_devices: a slow all-reduce makes the deeper pipeline win", "[data_parallel][plan]") {
  const Profile model = chain(8, GiB);
  DevicePlanOptions o;
  o.optimizer_state_factor = 1.0;
  o.families = {"1f1b"};
  o.alternatives = 50;
  // p = 4 x d = 1 needs no all-reduce; its 1F1B bubble with 16 micro-batches of 1 is
  // (p - 1)(F + B) = 3 x 6 = 18 over 96 of work. A ring over 4 replicas of the whole model
  // taking 100 puts p = 1 at 196.
  o.all_reduce_link = Interconnect{0.0, 2.0 * 3 / 4 * 8 * GiB / 100.0};
  const DevicePlan plan = plan_devices(model, 4, 16, std::nullopt, o);
  REQUIRE(plan.chosen);
  CHECK(plan.chosen->pipeline == 4);
  CHECK(plan.chosen->step_time == Approx(96.0 + 18.0));
  CHECK(plan.chosen->all_reduce_exposed == 0.0);
  CHECK_THAT(plan.reason, Catch::Contains("all-reduce"));
  const auto p1 = std::find_if(plan.alternatives.begin(), plan.alternatives.end(),
                               [](const DeviceSplit& s) { return s.pipeline == 1 && s.microbatches == 4; });
  REQUIRE(p1 != plan.alternatives.end());
  CHECK(p1->step_time == Approx(96.0 + 100.0));
  CHECK(p1->all_reduce_exposed == Approx(100.0));
  for (const DeviceSplit& s : plan.alternatives) CHECK(s.step_time == Approx(s.pipeline_time + s.all_reduce_exposed));
}

TEST_CASE("plan_devices: errors name what cannot split", "[data_parallel][plan]") {
  const Profile model = chain(8, 1.0);
  DevicePlanOptions o;
  o.pipeline_sizes = {3};
  CHECK_THROWS_WITH(plan_devices(model, 4, 16, std::nullopt, o), Catch::Contains("does not divide 4 devices"));
  o.pipeline_sizes = {1, 2};  // 4 and 2 replicas: neither divides 3 samples
  CHECK_THROWS_WITH(plan_devices(model, 4, 3, std::nullopt, o), Catch::Contains("splits evenly over none"));
  CHECK_THROWS_AS(plan_devices(model, 0, 16, std::nullopt, {}), error);
  CHECK_THROWS_AS(plan_devices(model, 4, 16, -1.0, {}), error);
  Profile mixed = model;
  mixed.devices = {Device{1.0}, Device{2.0}};
  CHECK_THROWS_WITH(plan_devices(mixed, 4, 16, std::nullopt, {}), Catch::Contains("devices differ"));
}

TEST_CASE("ppsched-plan --devices: the report, the JSON and the errors", "[data_parallel][cli]") {
  // --layers 8: 1 MiB of parameters per layer, 8 bytes held per parameter byte: p = 1 needs
  // 64 MiB before activations, over a 48 MiB cap.
  const std::vector<std::string> base{"--devices", "4", "--layers", "8", "--global-batch", "16", "--memory-cap-bytes", "48MiB",
                                      "--all-reduce-bandwidth", "8388608"};
  SECTION("report") {
    const test_support::Run run = plan_tool(base);
    REQUIRE(run.status == 0);
    CHECK_THAT(run.out, Catch::Contains("4 devices, global batch 16, cap 48 MiB per device"));
    CHECK_THAT(run.out, Catch::Contains("p=1 x d=4: nothing fits the memory cap"));
    CHECK_THAT(run.out, Catch::Contains("chosen: p="));
    CHECK_THAT(run.out, Catch::Contains("why: fastest of"));
  }
  SECTION("json: the chosen split and its runners-up agree with each other") {
    std::vector<std::string> args = base;
    args.push_back("--json");
    const test_support::Run run = plan_tool(args);
    REQUIRE(run.status == 0);
    const nlohmann::json j = nlohmann::json::parse(run.out);
    const nlohmann::json& c = j.at("chosen");
    CHECK(c.at("pipeline").get<int>() * c.at("replicas").get<int>() == 4);
    CHECK(c.at("pipeline").get<int>() > 1);
    CHECK(c.at("microbatches").get<double>() * c.at("microbatch_size").get<double>() * c.at("replicas").get<double>() == 16);
    CHECK(c.at("peak_memory_bytes").get<double>() <= 48.0 * 1048576);
    // 8 equal layers cut into p x v equal stages of 1 MiB per layer, summed by a ring of d at
    // 8 MiB per time unit: 2 (d - 1) / d x 8 / (p v) / 8.
    const double d = c.at("replicas").get<double>(), stages = c.at("pipeline").get<double>() * c.at("chunks").get<double>();
    CHECK(c.at("all_reduce_longest").get<double>() == Approx(2.0 * (d - 1) / d * 8.0 / stages / 8.0));
    CHECK(c.at("all_reduce_longest").get<double>() > 0.0);
    REQUIRE(!j.at("alternatives").empty());
    for (const nlohmann::json& a : j.at("alternatives")) {
      CHECK(a.at("step_time").get<double>() >= c.at("step_time").get<double>());
      CHECK(a.at("step_time").get<double>() ==
            Approx(a.at("pipeline_time").get<double>() + a.at("all_reduce_exposed").get<double>()));
    }
  }
  SECTION("a pipeline size that does not divide the devices") {
    const test_support::Run run = plan_tool({"--devices", "6", "--stages", "4", "--layers", "8"});
    CHECK(run.status == 2);
    CHECK_THAT(run.err, Catch::Contains("does not divide 6 devices"));
  }
  SECTION("a cap nothing fits: the report, then exit 2 naming the least need") {
    const test_support::Run run =
        plan_tool({"--devices", "4", "--layers", "8", "--global-batch", "16", "--memory-cap-bytes", "4MiB"});
    CHECK(run.status == 2);
    CHECK_THAT(run.out, Catch::Contains("chosen: none"));
    CHECK_THAT(run.err, Catch::Contains("no split of 4 devices fits"));
    CHECK_THAT(run.err, Catch::Contains("> cap 4 MiB"));
  }
  SECTION("flags that need --devices, and models it cannot split") {
    const test_support::Run batch = plan_tool({"--global-batch", "16"});
    CHECK(batch.status == 2);
    CHECK_THAT(batch.err, Catch::Contains("add --devices N"));
    const test_support::Run cost = plan_tool({"--devices", "4", "--stage-cost", "1,1,1"});
    CHECK(cost.status == 2);
    CHECK_THAT(cost.err, Catch::Contains("--stage-cost has no layers"));
    const test_support::Run algo = plan_tool({"--devices", "4", "--all-reduce", "butterfly"});
    CHECK(algo.status == 2);
    CHECK_THAT(algo.err, Catch::Contains("valid algorithms: ring, tree"));
  }
}
