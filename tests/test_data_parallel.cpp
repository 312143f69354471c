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
#include <functional>
#include <stop_token>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "../examples/mlp/mlp.hpp"
#include "../examples/mlp/mlp_stage.hpp"
#include "ppsched/backend/cpu.hpp"
#include "ppsched/error.hpp"
#include "ppsched/graph/layer_graph.hpp"
#include "ppsched/plan/devices.hpp"
#include "ppsched/runtime/data_parallel.hpp"
#include "ppsched/schedule/generators.hpp"
#include "ppsched/sim/data_parallel.hpp"
#include "ppsched/sim/simulate.hpp"
#include "run_tool.hpp"

using namespace ppsched;
using namespace ppsched::plan;

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
  const DevicePlan free_plan = plan_devices(model, 4, 16, {}, o);
  REQUIRE(free_plan.chosen);
  CHECK(free_plan.chosen->pipeline == 1);
  CHECK(free_plan.chosen->replicas == 4);
  CHECK(free_plan.chosen->step_time == Approx(8 * 3 * 16 / 4.0));

  const DevicePlan capped = plan_devices(model, 4, 16, MemoryCap{.total_bytes = 5 * GiB}, o);
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

  const DevicePlan impossible = plan_devices(model, 4, 16, MemoryCap{.total_bytes = 1 * GiB}, o);
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
  const DevicePlan plan = plan_devices(model, 4, 16, {}, o);
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
  CHECK_THROWS_WITH(plan_devices(model, 4, 16, {}, o), Catch::Contains("does not divide 4 devices"));
  o.pipeline_sizes = {1, 2};  // 4 and 2 replicas: neither divides 3 samples
  CHECK_THROWS_WITH(plan_devices(model, 4, 3, {}, o), Catch::Contains("splits evenly over none"));
  CHECK_THROWS_AS(plan_devices(model, 0, 16, {}, {}), error);
  CHECK_THROWS_AS(plan_devices(model, 4, 16, MemoryCap{.total_bytes = -1.0}, {}), error);
  Profile mixed = model;
  mixed.devices = {Device{1.0}, Device{2.0}};
  CHECK_THROWS_WITH(plan_devices(mixed, 4, 16, {}, {}), Catch::Contains("devices differ"));
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
    CHECK(j.at("tool") == "ppsched-plan");
    CHECK(j.at("devices") == 4);
    CHECK(j.at("global_batch") == 16);
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

namespace {

std::vector<float> data(std::size_t n, std::uint32_t seed, float scale) {
  mlp::Random random(seed);
  std::vector<float> out(n);
  for (float& x : out) x = scale * random.next();
  return out;
}

double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return norm == 0.0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

std::vector<float> weights(const mlp::Mlp& model) {
  std::vector<float> out;
  for (const auto& layer : model.layers) {
    const auto p = layer.parameters();
    out.insert(out.end(), p.begin(), p.end());
  }
  return out;
}

// d replicas of the MLP on a `schedule` pipeline, trained `steps` steps on global batches of
// d x m micro-batches, against the same model trained unpipelined on each global batch: each
// replica's share summed in micro-batch order, the shares summed in replica order (exact),
// and one flat micro-batch-order sum over the whole batch (float rounding apart).
struct DataParallelOutcome {
  bool exact = true;            // losses, applied gradients and weights, every replica, bit for bit
  double flat_worst = 0.0;      // against the flat sum: largest relative difference
  bool replicas_agree = true;   // every replica's weights equal after each step
};

DataParallelOutcome train_data_parallel(const Schedule& schedule, int d, int steps) {
  const int stages = schedule.stages(), m = schedule.microbatches;
  const std::size_t rows = 2, layers = static_cast<std::size_t>(std::max(4, stages) + 1);
  std::vector<std::size_t> widths{3};
  for (std::size_t l = 1; l < layers; ++l) widths.push_back(4 + l % 3);
  widths.push_back(2);
  const float loss_scale = 1.0f / static_cast<float>(rows * static_cast<std::size_t>(m * d));
  const float learning_rate = 0.5f;

  std::vector<std::unique_ptr<mlp::Mlp>> models;
  std::vector<std::vector<std::unique_ptr<mlp::MlpStage>>> adapters(static_cast<std::size_t>(d));
  std::vector<std::vector<StageFunctions>> functions(static_cast<std::size_t>(d));
  // applied[r][s]: the gradient replica r's stage s applied in the last step
  std::vector<std::vector<std::vector<float>>> applied(static_cast<std::size_t>(d),
                                                       std::vector<std::vector<float>>(static_cast<std::size_t>(stages)));
  std::vector<std::unique_ptr<CpuCluster>> clusters;
  std::vector<std::vector<CpuBackend*>> backends(static_cast<std::size_t>(d));
  for (int r = 0; r < d; ++r) {
    const auto ri = static_cast<std::size_t>(r);
    models.push_back(std::make_unique<mlp::Mlp>(widths, 7));
    for (int s = 0; s < stages; ++s) {
      const std::size_t first = layers * static_cast<std::size_t>(s) / static_cast<std::size_t>(stages);
      const std::size_t last = layers * static_cast<std::size_t>(s + 1) / static_cast<std::size_t>(stages);
      adapters[ri].push_back(std::make_unique<mlp::MlpStage>(*models[ri], first, last, rows, m));
      StageFunctions f = adapters[ri].back()->functions(s + 1 == stages, loss_scale, learning_rate);
      f.optimizer_step = [apply = f.optimizer_step, &applied, ri, s](std::span<const float> g) {
        applied[ri][static_cast<std::size_t>(s)].assign(g.begin(), g.end());
        apply(g);
      };
      functions[ri].push_back(std::move(f));
    }
    clusters.push_back(std::make_unique<CpuCluster>(schedule.ranks));
    for (int k = 0; k < schedule.ranks; ++k) backends[ri].push_back(&clusters.back()->rank(k));
  }
  DataParallelWorld<CpuBackend> world(std::move(backends), schedule, std::move(functions));

  mlp::Mlp reference(widths, 7), flat(widths, 7);
  DataParallelOutcome out;
  const std::size_t in_floats = static_cast<std::size_t>(m) * rows * widths.front();
  const std::size_t out_floats = static_cast<std::size_t>(m) * rows * widths.back();
  for (int step = 0; step < steps; ++step) {
    const auto inputs = data(in_floats * static_cast<std::size_t>(d), 100u + static_cast<std::uint32_t>(step), 1.0f);
    const auto targets = data(out_floats * static_cast<std::size_t>(d), 200u + static_cast<std::uint32_t>(step), 0.8f);
    std::vector<Batch> batches;
    for (int r = 0; r < d; ++r) {
      const auto ri = static_cast<std::size_t>(r);
      batches.push_back({std::span<const float>(inputs).subspan(ri * in_floats, in_floats),
                         std::span<const float>(targets).subspan(ri * out_floats, out_floats)});
    }
    const DataParallelStepResult& result = world.run_step(batches);

    // The reference: each share's gradient alone (a learning rate of 0 leaves the weights),
    // summed in replica order from zero, then one SGD step.
    std::vector<float> losses, total;
    for (int r = 0; r < d; ++r) {
      std::vector<float> g;
      const auto l = mlp::train_step_unpipelined(reference, batches[static_cast<std::size_t>(r)].inputs,
                                                 batches[static_cast<std::size_t>(r)].targets, rows, m, loss_scale, 0.0f, &g);
      losses.insert(losses.end(), l.begin(), l.end());
      if (total.empty()) total.assign(g.size(), 0.0f);
      for (std::size_t i = 0; i < g.size(); ++i) total[i] += g[i];
    }
    std::size_t offset = 0;
    for (auto& layer : reference.layers) {
      layer.step(std::span<const float>(total).subspan(offset, layer.parameter_count()), learning_rate);
      offset += layer.parameter_count();
    }
    std::vector<float> flat_gradient;
    (void)mlp::train_step_unpipelined(flat, inputs, targets, rows, m * d, loss_scale, learning_rate, &flat_gradient);

    out.exact = out.exact && result.losses == losses;
    for (int r = 0; r < d; ++r) {
      std::vector<float> gradient;
      for (const auto& g : applied[static_cast<std::size_t>(r)]) gradient.insert(gradient.end(), g.begin(), g.end());
      out.exact = out.exact && gradient == total;
      out.flat_worst = std::max(out.flat_worst, relative_difference(gradient, flat_gradient));
      out.replicas_agree = out.replicas_agree && weights(*models[static_cast<std::size_t>(r)]) == weights(*models[0]);
    }
  }
  out.exact = out.exact && weights(*models[0]) == weights(reference);
  out.flat_worst = std::max(out.flat_worst, relative_difference(weights(*models[0]), weights(flat)));
  return out;
}

}  // namespace

TEST_CASE("data x pipeline training equals unpipelined training on the global batch", "[data_parallel][runtime]") {
  struct Case {
    const char* family;
    int p, d, m, chunks;
  };
  for (const Case c : {Case{"1f1b", 2, 2, 4, 1}, Case{"1f1b", 4, 1, 4, 1}, Case{"zb-h1", 2, 2, 4, 1},
                       Case{"interleaved-1f1b", 2, 2, 4, 2}, Case{"zb-v", 2, 2, 4, 2}, Case{"gpipe", 1, 4, 2, 1}}) {
    const Schedule s = make_schedule(c.family, {c.p, c.m, c.chunks});
    const DataParallelOutcome o = train_data_parallel(s, c.d, 3);
    INFO(c.family << " p=" << c.p << " x d=" << c.d << ", m=" << c.m << "; against the flat sum " << o.flat_worst);
    CHECK(o.exact);
    CHECK(o.replicas_agree);
    CHECK(o.flat_worst <= 1e-6);
  }
}

namespace {

// A stage of one float: forward copies, backward passes the gradient through, the weight
// gradient is input x output gradient; the last stage's loss is half the squared error.
StageFunctions scalar_stage(bool last) {
  StageFunctions f;
  f.input_size = f.output_size = 1;
  f.target_size = last ? 1 : 0;
  f.weight_grad_size = 1;
  f.forward = [](std::int32_t, std::span<const float> in, std::span<float> out) { out[0] = in[0]; };
  f.backward_input = [](std::int32_t, std::span<const float>, std::span<const float> g, std::span<float> gi) {
    if (!gi.empty()) gi[0] = g[0];
  };
  f.backward_weight = [](std::int32_t, std::span<const float> in, std::span<const float> g, std::span<float> w) {
    w[0] = in[0] * g[0];
  };
  if (last) {
    f.loss = [](std::int32_t, std::span<const float> out, std::span<const float> t, std::span<float> g) {
      g[0] = out[0] - t[0];
      return 0.5f * g[0] * g[0];
    };
  }
  f.optimizer_step = [](std::span<const float>) {};
  return f;
}

// A GradientAllReduce of one replica that only says when each stage's sum began.
struct StartRecorder {
  struct Call {
    StartRecorder* self = nullptr;
    std::int32_t stage = 0;
  };
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<bool> started;
  std::vector<Call> calls;

  explicit StartRecorder(std::int32_t stages) : started(static_cast<std::size_t>(stages)), calls(static_cast<std::size_t>(stages)) {}

  void all_reduce(CpuBackend& b, CpuBackend::stream& stream, std::int32_t stage, CpuBackend::buffer&, std::stop_token) {
    calls[static_cast<std::size_t>(stage)] = {this, stage};
    b.launch(stream, HostTask{[](void* c) {
                                auto* call = static_cast<Call*>(c);
                                {
                                  const std::lock_guard<std::mutex> lock(call->self->mutex);
                                  call->self->started[static_cast<std::size_t>(call->stage)] = true;
                                }
                                call->self->changed.notify_all();
                              },
                              &calls[static_cast<std::size_t>(stage)], "record"},
             {});
  }
  // Waits (bounded) for `stage`'s sum to begin.
  bool wait_started(std::int32_t stage) {
    std::unique_lock<std::mutex> lock(mutex);
    return changed.wait_for(lock, std::chrono::seconds(20), [&] { return started[static_cast<std::size_t>(stage)]; });
  }
};
static_assert(GradientAllReduce<StartRecorder, CpuBackend>);
static_assert(GradientAllReduce<InProcessAllReduce::Replica, CpuBackend>);

}  // namespace

TEST_CASE("a stage's all-reduce starts when its last weight gradient is done, under the rank's other work",
          "[data_parallel][runtime]") {
  // Interleaved 1F1B on 2 ranks: rank 0 holds stages 0 and 2, and stage 2's weights are done
  // before stage 0's last backward. That backward waits until stage 2's sum has begun: were the
  // sums run after the rank's compute (at the flush), it would wait in vain and the check fail.
  const Schedule s = make_schedule("interleaved-1f1b", {2, 4, 2});
  std::vector<StageFunctions> stages;
  for (int k = 0; k < 4; ++k) stages.push_back(scalar_stage(k == 3));
  StartRecorder recorder(4);
  bool overlapped = false;
  stages[0].backward_weight = [&recorder, &overlapped, inner = stages[0].backward_weight](
                                  std::int32_t mb, std::span<const float> in, std::span<const float> g, std::span<float> w) {
    if (mb == 3) overlapped = recorder.wait_started(2);
    inner(mb, in, g, w);
  };
  CpuCluster cluster(2);
  World<CpuBackend> world({&cluster.rank(0), &cluster.rank(1)}, s, stages);
  for (int rank = 0; rank < 2; ++rank) world.set_gradient_reducer(rank, gradient_reducer<CpuBackend>(recorder));
  const std::vector<float> inputs(4, 1.0f), targets(4, 0.5f);
  (void)world.run_step({inputs, targets});
  CHECK(overlapped);
  for (std::int32_t st = 0; st < 4; ++st) CHECK(recorder.wait_started(st));
}

TEST_CASE("a fault on one replica ends every replica's step with the first error", "[data_parallel][runtime]") {
  // Replica 1's first stage, or replica 0's (run on the caller's thread) last stage, throws
  // at its last weight gradient: the other replica's ranks are then waiting in (or heading to)
  // their all-reduces and must stop rather than wait. Three faults in a row, each followed by
  // a healthy step: nothing of a failed step leaks into the next.
  const auto [bad_replica, bad_stage] = GENERATE(std::pair{1, 0}, std::pair{0, 1});
  const Schedule s = make_schedule("1f1b", {2, 4, 1});
  const int threads_before = live_threads();
  {
    bool fail_now = false;
    std::vector<std::vector<StageFunctions>> stages(2);
    for (int r = 0; r < 2; ++r) {
      for (int k = 0; k < 2; ++k) stages[static_cast<std::size_t>(r)].push_back(scalar_stage(k == 1));
    }
    StageFunctions& bad = stages[static_cast<std::size_t>(bad_replica)][static_cast<std::size_t>(bad_stage)];
    bad.backward_weight = [&fail_now, inner = bad.backward_weight](std::int32_t mb, std::span<const float> in,
                                                                   std::span<const float> g, std::span<float> w) {
      if (fail_now && mb == 3) throw std::runtime_error("injected fault");
      inner(mb, in, g, w);
    };
    CpuCluster a(2), b(2);
    DataParallelWorld<CpuBackend> world({{&a.rank(0), &a.rank(1)}, {&b.rank(0), &b.rank(1)}}, s, std::move(stages));
    const std::vector<float> inputs(4, 1.0f), targets(4, 0.5f);
    const std::vector<Batch> batches{{inputs, targets}, {inputs, targets}};
    (void)world.run_step(batches);
    for (int round = 0; round < 3; ++round) {
      fail_now = true;
      CHECK_THROWS_WITH(world.run_step(batches), Catch::StartsWith("replica " + std::to_string(bad_replica) + ": ") &&
                                                     Catch::Contains("injected fault") &&
                                                     Catch::Contains("stage " + std::to_string(bad_stage)));
      fail_now = false;
      const DataParallelStepResult& again = world.run_step(batches);  // usable after the fault
      CHECK(again.losses.size() == 8);
      CHECK(again.losses[0] == again.losses[4]);
    }
  }
  CHECK(live_threads() == threads_before);
}

TEST_CASE("AllOrNoneOptimizer: a failed step applies no stage's optimizer step, a good one every stage's",
          "[data_parallel][runtime]") {
  // Issue 24, item 8: a step that failed in stage 0's last backward left the ranks that had
  // finished stepped. Deferred, a failed step applies none, on one pipeline and on replicas.
  const Schedule s = make_schedule("1f1b", {2, 4, 1});
  std::mutex mutex;
  std::vector<std::vector<float>> applied;  // per (replica, stage): each applied gradient[0]
  bool fail_now = false;
  const auto stages_of = [&](int replica) {
    std::vector<StageFunctions> out;
    for (int k = 0; k < 2; ++k) {
      StageFunctions f = scalar_stage(k == 1);
      const std::size_t slot = static_cast<std::size_t>(2 * replica + k);
      f.optimizer_step = [&, slot](std::span<const float> g) {
        const std::lock_guard<std::mutex> lock(mutex);
        applied[slot].push_back(g[0]);
      };
      if (k == 0 && replica == 1) {
        f.backward_weight = [&fail_now, inner = f.backward_weight](std::int32_t mb, std::span<const float> in,
                                                                    std::span<const float> g, std::span<float> w) {
          if (fail_now && mb == 3) throw std::runtime_error("injected fault in the last backward");
          inner(mb, in, g, w);
        };
      }
      out.push_back(std::move(f));
    }
    return out;
  };
  const std::vector<float> inputs(4, 1.0f), targets(4, 0.5f);
  const auto sizes = [&] {
    std::vector<std::size_t> n;
    for (const auto& a : applied) n.push_back(a.size());
    return n;
  };

  SECTION("one pipeline (a World): the failing stage's rank and the one that finished") {
    applied.assign(4, {});
    CpuCluster plain_cluster(2), cluster(2);
    World<CpuBackend> plain({&plain_cluster.rank(0), &plain_cluster.rank(1)}, s, stages_of(0));
    (void)plain.run_step({inputs, targets});
    const std::vector<std::vector<float>> reference = applied;
    applied.assign(4, {});
    AllOrNoneOptimizer optimizer;
    World<CpuBackend> world({&cluster.rank(0), &cluster.rank(1)}, s, optimizer.defer(stages_of(1)));
    (void)optimizer.step([&]() -> const StepResult& { return world.run_step({inputs, targets}); });
    CHECK(sizes() == std::vector<std::size_t>{0, 0, 1, 1});
    CHECK(applied[2] == reference[0]);  // the same gradients as applied undeferred
    CHECK(applied[3] == reference[1]);
    fail_now = true;
    CHECK_THROWS_WITH(optimizer.step([&]() -> const StepResult& { return world.run_step({inputs, targets}); }),
                      Catch::Contains("injected fault in the last backward"));
    CHECK(sizes() == std::vector<std::size_t>{0, 0, 1, 1});  // neither stage applied a step
    CHECK(optimizer.pending() == 0);
    fail_now = false;
    (void)optimizer.step([&]() -> const StepResult& { return world.run_step({inputs, targets}); });
    CHECK(sizes() == std::vector<std::size_t>{0, 0, 2, 2});
  }

  SECTION("two replicas (a DataParallelWorld): the fault while the other replica waits in the sum") {
    applied.assign(4, {});
    AllOrNoneOptimizer optimizer;
    CpuCluster a(2), b(2);
    DataParallelWorld<CpuBackend> world({{&a.rank(0), &a.rank(1)}, {&b.rank(0), &b.rank(1)}}, s,
                                        {optimizer.defer(stages_of(0)), optimizer.defer(stages_of(1))});
    const std::vector<Batch> batches{{inputs, targets}, {inputs, targets}};
    for (int round = 0; round < 2; ++round) {
      fail_now = true;
      CHECK_THROWS_WITH(optimizer.step([&]() -> const DataParallelStepResult& { return world.run_step(batches); }),
                        Catch::Contains("injected fault in the last backward"));
      CHECK(sizes() == std::vector<std::size_t>(4, static_cast<std::size_t>(round)));
      fail_now = false;
      (void)optimizer.step([&]() -> const DataParallelStepResult& { return world.run_step(batches); });
      CHECK(sizes() == std::vector<std::size_t>(4, static_cast<std::size_t>(round + 1)));
    }
  }

  SECTION("an optimizer step that throws in the commit names its stage and what was applied") {
    applied.assign(4, {});
    AllOrNoneOptimizer optimizer;
    std::vector<StageFunctions> stages = stages_of(0);
    stages[1].optimizer_step = [](std::span<const float>) { throw std::runtime_error("optimizer refused"); };
    CpuCluster cluster(2);
    World<CpuBackend> world({&cluster.rank(0), &cluster.rank(1)}, s, optimizer.defer(std::move(stages)));
    CHECK_THROWS_WITH(optimizer.step([&]() -> const StepResult& { return world.run_step({inputs, targets}); }),
                      Catch::Contains("stage 1's optimizer_step threw during the commit: optimizer refused") &&
                          Catch::Contains("The 1 optimizer steps before it"));
    CHECK(sizes() == std::vector<std::size_t>{1, 0, 0, 0});
  }
}

TEST_CASE("a replica whose stage keeps its gradient fails at construction, not in the sum",
          "[data_parallel][runtime]") {
  // Issue 24, item 4: replica 1's stage 1 had no weight gradient, so it never called its
  // all-reduce and replica 0 waited in its sum until the watchdog (forever without one).
  const std::size_t other = GENERATE(std::size_t{0}, std::size_t{2});
  const Schedule s = make_schedule("1f1b", {2, 4, 1});
  std::vector<std::vector<StageFunctions>> stages(2);
  for (int r = 0; r < 2; ++r) {
    for (int k = 0; k < 2; ++k) stages[static_cast<std::size_t>(r)].push_back(scalar_stage(k == 1));
  }
  StageFunctions& odd = stages[1][1];
  odd.weight_grad_size = other;
  odd.backward_weight = [](std::int32_t, std::span<const float>, std::span<const float>, std::span<float> w) {
    for (float& x : w) x = 0.0f;
  };
  CpuCluster a(2), b(2);
  const auto build = [&] {
    DataParallelWorld<CpuBackend> world({{&a.rank(0), &a.rank(1)}, {&b.rank(0), &b.rank(1)}}, s, stages);
  };
  CHECK_THROWS_WITH(build(), Catch::Contains("stage 1's weight gradient is " + std::to_string(other) +
                                             " floats on replica 1 but 1 on replica 0") &&
                                 Catch::Contains("weight_grad_size"));
}

namespace {

// A gradient sum that never completes until the step is stopped: a replica that does not
// reach its all-reduce, as the others see it.
struct StuckAllReduce {
  std::mutex mutex;
  std::condition_variable_any never;
  std::vector<std::unique_ptr<std::function<void()>>> tasks;
  template <class B>
  void all_reduce(B& backend, typename B::stream& stream, std::int32_t, typename B::buffer&, std::stop_token stop) {
    const std::lock_guard<std::mutex> lock(mutex);
    tasks.push_back(std::make_unique<std::function<void()>>([this, stop] {
      std::unique_lock<std::mutex> wait(mutex);
      (void)never.wait_for(wait, stop, std::chrono::seconds(20), [] { return false; });
    }));
    backend.launch(stream, host_task(*tasks.back(), "stuck all-reduce"));
  }
};

}  // namespace

TEST_CASE("a step stuck in the gradient sum names the sum, not the optimizer step", "[data_parallel][runtime]") {
  // Issue 24, item 4: every action had completed and the rank waited in its stage's sum over
  // the replicas, but the watchdog said "the step's final work did not (the optimizer step?)".
  const Schedule s = make_schedule("1f1b", {2, 4, 1});
  std::vector<StageFunctions> stages;
  for (int k = 0; k < 2; ++k) stages.push_back(scalar_stage(k == 1));
  CpuCluster cluster(2);
  ExecutorOptions o;
  o.watchdog = std::chrono::milliseconds(200);
  World<CpuBackend> world({&cluster.rank(0), &cluster.rank(1)}, s, stages, o);
  StuckAllReduce stuck;
  for (int rank = 0; rank < 2; ++rank) world.set_gradient_reducer(rank, gradient_reducer<CpuBackend>(stuck));
  const std::vector<float> inputs(4, 1.0f), targets(4, 0.5f);
  CHECK_THROWS_WITH(world.run_step({inputs, targets}),
                    Catch::Contains("'s gradient sum over the replicas did not") &&
                        Catch::Contains("a replica that has not reached it") && !Catch::Contains("optimizer step?"));
}
