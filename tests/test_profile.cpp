// runtime/profile.hpp: profiling stage functions at several micro-batch sizes, measuring and
// fitting the runtime's fixed costs, and the measured profile the planner reads. No assertion
// here depends on how fast anything ran: the tests check what was called, how often, and that
// the fits reproduce the steps they were given.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "ppsched/backend/cpu.hpp"
#include "ppsched/graph/profile_json.hpp"
#include "ppsched/runtime/profile.hpp"
#include "ppsched/schedule/generators.hpp"
#include "../bench/machine_probe.hpp"

using namespace ppsched;
using namespace ppsched::profiling;

namespace {

struct Calls {
  std::map<std::string, int> count;
  std::vector<std::int32_t> rows_built;
};

// Two stages: the first with the split backward, the second with a full backward only.
StageFactory counting_stages(const std::shared_ptr<Calls>& calls) {
  return [calls](std::int32_t rows) {
    calls->rows_built.push_back(rows);
    std::vector<StageFunctions> out(2);
    for (std::size_t s = 0; s < 2; ++s) {
      StageFunctions& f = out[s];
      f.input_size = f.output_size = static_cast<std::size_t>(rows) * 4;
      f.weight_grad_size = 10 * (s + 1);
      f.forward = [calls, s](std::int32_t, std::span<const float>, std::span<float>) { ++calls->count["F" + std::to_string(s)]; };
    }
    out[0].backward_input = [calls](std::int32_t, std::span<const float>, std::span<const float>, std::span<float> gi) {
      CHECK(gi.empty());  // stage 0 has no input gradient to give
      ++calls->count["BI0"];
    };
    out[0].backward_weight = [calls](std::int32_t, std::span<const float>, std::span<const float>, std::span<float> wg) {
      CHECK(wg.size() == 10);
      ++calls->count["BW0"];
    };
    out[0].optimizer_step = [calls](const StageContext& c, std::span<const float> wg) {
      CHECK(c.microbatch == -1);  // as the executor calls it
      CHECK(c.call == StageCall::optimizer_step);
      CHECK(wg.size() == 10);
      CHECK(std::all_of(wg.begin(), wg.end(), [](float x) { return x == 0.0f; }));  // a zero gradient: plain SGD keeps its weights
      ++calls->count["OPT0"];
    };
    out[1].backward = [calls](std::int32_t, std::span<const float>, std::span<const float> go, std::span<float> gi,
                              std::span<float>) {
      CHECK(gi.size() == go.size());
      ++calls->count["B1"];
    };
    out[1].around_call = [calls](const StageContext&, StageCallRef call) {
      ++calls->count["around1"];
      call();
    };
    return out;
  };
}

}  // namespace

TEST_CASE("profile_stages runs every callable warm-up + repetitions times at every size", "[profile]") {
  auto calls = std::make_shared<Calls>();
  ProfileOptions o;
  o.rows = {2, 8};
  o.warmup = 1;
  o.repetitions = 5;
  o.names = {"front", "back"};
  const std::vector<StageProfile> p = profile_stages(counting_stages(calls), o);
  CHECK(calls->rows_built == std::vector<std::int32_t>{2, 8});
  const int runs = 2 * (1 + 5);
  CHECK(calls->count["F0"] == runs);
  CHECK(calls->count["BI0"] == runs);
  CHECK(calls->count["BW0"] == runs);
  CHECK(calls->count["F1"] == runs);
  CHECK(calls->count["B1"] == runs);
  CHECK(calls->count["OPT0"] == runs);  // once per repetition, where the stage has one
  CHECK(calls->count["around1"] == 2 * runs);  // every call of the stage, as the executor wraps it
  REQUIRE(p.size() == 2);
  CHECK(p[0].name == "front");
  CHECK(p[1].param_bytes == 80.0);
  REQUIRE(p[0].sizes.size() == 2);
  CHECK(p[0].sizes[1].rows == 8);
  CHECK(p[0].sizes[1].output_bytes == 8 * 4 * 4.0);
  CHECK_FALSE(p[0].sizes[0].backward.has_value());
  CHECK(p[1].sizes[0].backward.has_value());
  CHECK(p[0].sizes[0].optimizer_step.has_value());
  CHECK_FALSE(p[1].sizes[0].optimizer_step.has_value());
  for (const StageProfile& s : p) {
    for (const StageTiming& t : s.sizes) {
      for (const TimeSpread& x : {t.forward, t.backward_input, t.backward_weight}) {
        CHECK(x.min <= x.q1);
        CHECK(x.q1 <= x.median);
        CHECK(x.median <= x.q3);
        CHECK(x.q3 <= x.max);
      }
    }
  }
}

TEST_CASE("profile_stages: an around_call that does not run its call is an error naming the stage and the call",
          "[profile]") {
  auto calls = std::make_shared<Calls>();
  const StageFactory make = [calls](std::int32_t rows) {
    std::vector<StageFunctions> out = counting_stages(calls)(rows);
    out[1].around_call = [](const StageContext&, StageCallRef) {};  // forgets to call
    return out;
  };
  ProfileOptions o;
  o.rows = {2};
  CHECK_THROWS_WITH(profile_stages(make, o), Catch::Contains("around_call of stage 1") &&
                                                 Catch::Contains("returned without running forward (in profile_stages)"));
  CHECK(calls->count["F1"] == 0);
}

TEST_CASE("the spread of repetitions: median, quartiles between order statistics, extremes", "[profile]") {
  const TimeSpread s = detail::spread_of({5, 1, 4, 2, 3});
  CHECK(s == TimeSpread{3, 2, 4, 1, 5});
  CHECK(s.relative_spread() == Approx(4.0 / 3.0));
  CHECK(detail::spread_of({1, 2, 3, 4}).median == 2.5);
}

TEST_CASE("bad profiling options are errors naming the option", "[profile]") {
  auto calls = std::make_shared<Calls>();
  ProfileOptions o;
  o.rows = {8, 4};
  CHECK_THROWS_WITH(profile_stages(counting_stages(calls), o), Catch::Contains("ProfileOptions::rows"));
  o.rows = {4};
  o.unit = "minutes";
  CHECK_THROWS_WITH(profile_stages(counting_stages(calls), o),
                    Catch::Contains("cannot convert \"s\" to \"minutes\"") && Catch::Contains("ProfileOptions::unit"));
  o.unit = "ms";
  o.names = {"one"};
  CHECK_THROWS_WITH(profile_stages(counting_stages(calls), o), Catch::Contains("1 names for 2 stages"));
}

TEST_CASE("fit_backend_overheads recovers the fixed costs a step was made of", "[profile][overhead]") {
  const Schedule one = lower(make_schedule("gpipe", ScheduleRequest{1, 8, 1}));
  const Schedule two = lower(make_schedule("1f1b", ScheduleRequest{2, 8, 1}));
  // Steps the simulator predicts with 0.006 per action and 0.011 per transfer, as if measured.
  const double t1 = detail::fixed_cost_makespan(one, 0.006, 0.0);
  const double t2 = detail::fixed_cost_makespan(two, 0.006, 0.011);
  CHECK(t1 == Approx(16 * 0.006));  // 8 F and 8 B on one rank
  const BackendOverheads o = fit_backend_overheads(one, {t1, t1 * 1.5, t1 * 0.9}, two, {t2}, "ms");
  CHECK(o.fixed_costs.action == Approx(0.006).epsilon(1e-9));
  CHECK(o.fixed_costs.transfer == Approx(0.011).epsilon(1e-6));
  CHECK(o.one_rank_step.max == Approx(t1 * 1.5));
  // A step no longer than its actions' share leaves nothing for the transfers.
  CHECK(fit_backend_overheads(one, {t1}, two, {t1}, "ms").fixed_costs.transfer == 0.0);
}

TEST_CASE("measure_backend_overheads on the CPU backend: a fit that reproduces the measured steps", "[profile][overhead]") {
  CpuOptions co;
  co.checking = false;
  CpuCluster single(1, co), pair(2, co);
  OverheadOptions o;
  o.microbatches = 8;
  o.warmup = 1;
  o.repetitions = 5;
  const BackendOverheads m = measure_backend_overheads<CpuBackend>({&single.rank(0)}, {&pair.rank(0), &pair.rank(1)}, o);
  CHECK(m.fixed_costs.action + m.fixed_costs.step > 0.0);  // a step of empty stages takes some time
  CHECK(m.fixed_costs.action >= 0.0);
  CHECK(m.fixed_costs.step >= 0.0);
  CHECK(std::isfinite(m.fixed_costs.transfer));
  CHECK(m.few_step.median > 0.0);  // 2 micro-batches as well as 8, to separate the two costs
  const Schedule one = lower(make_schedule("gpipe", ScheduleRequest{1, 8, 1}));
  const Schedule few = lower(make_schedule("gpipe", ScheduleRequest{1, 2, 1}));
  if (m.fixed_costs.action > 0.0 && m.fixed_costs.step > 0.0) {  // not clamped: two points, two constants, an exact fit
    CHECK(detail::fixed_cost_makespan(one, m.fixed_costs.action, 0.0) + m.fixed_costs.step ==
          Approx(m.one_rank_step.median).epsilon(1e-6));
    CHECK(detail::fixed_cost_makespan(few, m.fixed_costs.action, 0.0) + m.fixed_costs.step ==
          Approx(m.few_step.median).epsilon(1e-6));
  }
  o.few_microbatches = 9;
  CHECK_THROWS_WITH(measure_backend_overheads<CpuBackend>({&single.rank(0)}, {&pair.rank(0), &pair.rank(1)}, o),
                    Catch::Contains("few_microbatches"));
}

TEST_CASE("measure_backend_overheads with weight_grad_floats: the empty stages carry the model's weight gradients", "[profile][overhead]") {
  // The executor zeroes and sums a stage's weight-gradient parts only when the stage declares
  // them; stages without weights measured none of that work (docs/accuracy.md, what remains at
  // one rank).
  for (const std::size_t floats : {std::size_t{0}, std::size_t{1000}}) {
    const std::vector<StageFunctions> stages = detail::empty_stages(2, floats);
    REQUIRE(stages.size() == 2);
    for (const StageFunctions& f : stages) CHECK(f.weight_grad_size == floats);
  }
  CpuOptions co;
  co.checking = true;  // the parts the executor writes and reads are declared uses
  CpuCluster plain(1, co), carrying(1, co);
  World<CpuBackend> bare({&plain.rank(0)}, make_gpipe(ScheduleRequest{1, 4, 1}), detail::empty_stages(1));
  World<CpuBackend> weighted({&carrying.rank(0)}, make_gpipe(ScheduleRequest{1, 4, 1}), detail::empty_stages(1, 256));
  const std::vector<float> data(4, 0.0f);
  (void)bare.run_step({data, data});
  (void)weighted.run_step({data, data});
  CHECK(bare.executor(0).gradient_floats() == 0);
  CHECK(weighted.executor(0).gradient_floats() >= 2 * 256);  // the total and at least one part
  OverheadOptions o;
  o.microbatches = 4;
  o.warmup = 1;
  o.repetitions = 3;
  o.weight_grad_floats = 1000;
  CpuCluster one(1, co), two(2, co);
  const BackendOverheads m = measure_backend_overheads<CpuBackend>({&one.rank(0)}, {&two.rank(0), &two.rank(1)}, o);
  CHECK(m.fixed_costs.action >= 0.0);
  CHECK(m.fixed_costs.step >= 0.0);
  CHECK(std::isfinite(m.fixed_costs.transfer));
  CHECK(m.one_rank_step.median > 0.0);
}

TEST_CASE("fit_backend_overheads separates the cost per step from the cost per action with two shapes", "[profile][overhead]") {
  const Schedule few = lower(make_schedule("gpipe", ScheduleRequest{1, 2, 1}));
  const Schedule mid = lower(make_schedule("gpipe", ScheduleRequest{1, 8, 1}));
  const Schedule many = lower(make_schedule("gpipe", ScheduleRequest{1, 32, 1}));
  const Schedule two = lower(make_schedule("1f1b", ScheduleRequest{2, 8, 1}));
  // Steps made of 0.3 per step, 0.004 per action and 0.02 per transfer, as if measured.
  const auto step = [](const Schedule& s, double a, double t) { return detail::fixed_cost_makespan(s, a, t) + 0.3; };
  const double t_two = step(two, 0.004, 0.02);
  const BackendOverheads o = fit_backend_overheads(
      {{few, {step(few, 0.004, 0.0)}}, {many, {step(many, 0.004, 0.0), 5.0, 0.1}}}, {two, {t_two}}, "ms");
  CHECK(o.fixed_costs.step == Approx(0.3).epsilon(1e-9));
  CHECK(o.fixed_costs.action == Approx(0.004).epsilon(1e-9));
  CHECK(o.fixed_costs.transfer == Approx(0.02).epsilon(1e-6));
  CHECK(o.few_step.median == Approx(step(few, 0.004, 0.0)));
  CHECK(o.one_rank_step.median == Approx(step(many, 0.004, 0.0)));
  // Three shapes with noise: the least-squares line through them.
  const BackendOverheads three = fit_backend_overheads(
      {{few, {step(few, 0.004, 0.0) + 0.01}}, {mid, {step(mid, 0.004, 0.0) - 0.02}}, {many, {step(many, 0.004, 0.0) + 0.01}}},
      {two, {t_two}}, "ms");
  CHECK(three.fixed_costs.step == Approx(0.3).margin(0.02));
  CHECK(three.fixed_costs.action == Approx(0.004).margin(0.0005));
  // The old single-shape fit puts the whole step on the actions; the joint one does not.
  const BackendOverheads single = fit_backend_overheads(many, {step(many, 0.004, 0.0)}, two, {t_two}, "ms");
  CHECK(single.fixed_costs.step == 0.0);
  CHECK(single.fixed_costs.action == Approx((0.3 + 64 * 0.004) / 64).epsilon(1e-9));
  // Noise that would make a cost negative: the better one-constant fit instead, never below 0.
  const BackendOverheads flat = fit_backend_overheads({{few, {1.0}}, {many, {0.9}}}, {two, {t_two}}, "ms");
  CHECK(flat.fixed_costs.action == 0.0);
  CHECK(flat.fixed_costs.step == Approx(0.95));
  CHECK_THROWS_WITH(fit_backend_overheads({{two, {1.0}}}, {two, {t_two}}, "ms"), Catch::Contains("one_rank[0]"));
}

TEST_CASE("measured_profile: one layer per stage, a point per size, the reference size's costs, the overheads", "[profile]") {
  auto calls = std::make_shared<Calls>();
  ProfileOptions o;
  o.rows = {2, 8};
  o.repetitions = 3;
  std::vector<StageProfile> stages = profile_stages(counting_stages(calls), o);
  // Known times instead of the measured ones, so the interpolation can be checked.
  for (StageProfile& s : stages) {
    s.sizes[0].forward.median = 1.0;
    s.sizes[1].forward.median = 4.0;
  }
  stages[0].sizes[0].optimizer_step->median = 0.125;
  stages[0].sizes[1].optimizer_step->median = 0.5;  // the reference size's is the layer's
  BackendOverheads overheads;
  overheads.fixed_costs.action = 0.005;
  overheads.fixed_costs.transfer = 0.01;
  overheads.fixed_costs.step = 0.25;
  const Profile p = measured_profile(stages, "ms", 8, overheads);
  CHECK(p.rows == 8);
  CHECK(p.time_unit == "ms");
  CHECK(p.fixed_costs.action == 0.005);
  CHECK(p.fixed_costs.transfer == 0.01);
  CHECK(p.fixed_costs.step == 0.25);
  REQUIRE(p.graph.size() == 2);
  CHECK(p.graph.layer(0).forward == 4.0);
  CHECK(p.graph.layer(0).points.size() == 2);
  CHECK_FALSE(p.graph.layer(0).backward.has_value());
  CHECK(p.graph.layer(1).backward.has_value());
  CHECK(p.graph.layer(0).optimizer_step == 0.5);
  CHECK(p.graph.layer(1).optimizer_step == 0.0);  // a stage without one
  CHECK(profile_at_rows(p, 4).graph.layer(0).forward == Approx(2.0));
  CHECK(profile_at_rows(p, 4).graph.layer(0).optimizer_step == 0.5);  // once per step, whatever the rows
  CHECK(parse_profile(profile_to_json(p)) == p);  // what ppsched-plan --profile reads
  CHECK_THROWS_WITH(measured_profile(stages, "ms", 5), Catch::Contains("no size of 5 rows"));
  // Overheads in another scale are converted into the profile's (TimeUnit's converter), each
  // way and in every spelling; a unit of the model's own is refused, naming both units.
  overheads.fixed_costs.concurrent_slowdown = {1.0, 1.5};  // a ratio: kept as it is
  const std::vector<std::pair<std::string, double>> units = {
      {"s", 1.0}, {"ms", 1e-3}, {"us", 1e-6}, {"\xC2\xB5s", 1e-6}, {"ns", 1e-9}};
  for (const auto& [overheads_unit, overheads_seconds] : units) {
    for (const auto& [profile_unit, profile_seconds] : units) {
      INFO("overheads in " << overheads_unit << ", profile in " << profile_unit);
      overheads.unit = overheads_unit;
      const Profile q = measured_profile(stages, profile_unit, 8, overheads);
      CHECK(q.time_unit.text() == profile_unit);
      const double k = overheads_seconds / profile_seconds;
      CHECK(q.fixed_costs.action == Approx(0.005 * k).epsilon(1e-12));
      CHECK(q.fixed_costs.transfer == Approx(0.01 * k).epsilon(1e-12));
      CHECK(q.fixed_costs.step == Approx(0.25 * k).epsilon(1e-12));
      CHECK(q.fixed_costs.concurrent_slowdown == std::vector<double>{1.0, 1.5});
      CHECK(q.graph.layer(0).forward == 4.0);  // the stages' times are in the profile's unit already
    }
    overheads.unit = "cycles";
    CHECK_THROWS_WITH(measured_profile(stages, overheads_unit, 8, overheads),
                      Catch::Contains("measured_profile: cannot convert \"cycles\" to \"" + overheads_unit + "\"") &&
                          Catch::Contains("BackendOverheads::unit"));
    overheads.unit = overheads_unit;
    CHECK_THROWS_WITH(measured_profile(stages, "cycles", 8, overheads),
                      Catch::Contains("cannot convert \"" + overheads_unit + "\" to \"cycles\""));
  }
  overheads.unit = "cycles";
  CHECK(measured_profile(stages, "cycles", 8, overheads).fixed_costs.action == 0.005);  // one name: one unit
}

TEST_CASE("measure_concurrent_slowdown: one factor per rank count, from the work run on that many threads at once",
          "[profile][shared]") {
  std::mutex m;
  std::map<std::int32_t, int> calls;  // per thread index
  SlowdownOptions o;
  o.ranks = 3;
  o.calls = 3;
  o.rounds = 2;
  o.min_seconds = 0.0;  // exactly `calls` per round
  const std::vector<double> s = measure_concurrent_slowdown(
      [&](std::int32_t thread) {
        volatile double x = 0.0;
        for (int i = 0; i < 20000; ++i) x = x + std::sqrt(static_cast<double>(i));
        const std::lock_guard<std::mutex> lock(m);
        ++calls[thread];
      },
      o);
  REQUIRE(s.size() == 3);
  CHECK(s[0] == 1.0);
  for (const double f : s) CHECK(f >= 1.0);
  // Thread t runs in every round of every count above t, `calls` times each; thread 0 also runs
  // the two calls that size the rounds.
  CHECK(calls[0] == 2 * 3 * 3 + 2);
  CHECK(calls[1] == 2 * 2 * 3);
  CHECK(calls[2] == 2 * 1 * 3);
  // A failing call ends the measurement with its error; no thread is left waiting.
  CHECK_THROWS_WITH(measure_concurrent_slowdown([](std::int32_t t) {
                      if (t == 1) throw std::runtime_error("stage 1 failed");
                    }),
                    "stage 1 failed");
  CHECK_THROWS_WITH(measure_concurrent_slowdown({}), Catch::Contains("no work"));
  o.calls = 1;
  CHECK_THROWS_WITH(measure_concurrent_slowdown([](std::int32_t) {}, o), Catch::Contains("SlowdownOptions"));
  o.calls = 3;
  o.min_seconds = -1.0;
  CHECK_THROWS_WITH(measure_concurrent_slowdown([](std::int32_t) {}, o), Catch::Contains("min_seconds"));
}

// bench/machine_probe.hpp, which the accuracy reports use to keep apart the steps taken while
// a core ran at another speed than usual: its arithmetic, and that the probes report each core
// once and judge it against its own median (no timing asserted).
TEST_CASE("machine probes: the phases of a core's probes, and each core judged against its usual speed") {
  SECTION("phases_of") {
    const machine::Phases p = machine::phases_of({1.0, 1.0, 2.0, 2.0, 2.0, 1.0, 1.1, 3.0}, 10.0, 1.15);
    CHECK(p.slow_fraction == Approx(0.5));
    CHECK(p.worst == Approx(3.0));
    CHECK(p.longest_slow_ms == Approx(30.0));
    const machine::Phases none = machine::phases_of({}, 10.0, 1.15);
    CHECK(none.slow_fraction == 0.0);
    CHECK(none.worst == 1.0);
    const machine::Phases steady = machine::phases_of({2.0, 2.1, 2.2}, 5.0, 1.15);
    CHECK(steady.slow_fraction == 0.0);
    CHECK(steady.longest_slow_ms == 0.0);
  }
  SECTION("CoreProbes") {
    machine::CoreProbes probes;
    const std::size_t n = probes.cores().size();
    REQUIRE(n >= 1);
    CHECK(probes.usual() == std::vector<double>(n, 0.0));  // nothing run yet
    std::vector<std::vector<double>> runs;
    for (int k = 0; k < 5; ++k) runs.push_back(probes.run());
    for (const auto& ms : runs) {
      REQUIRE(ms.size() == n);
      for (const double t : ms) CHECK(t > 0.0);
    }
    const std::vector<double> usual = probes.usual(), fastest = probes.fastest();
    for (std::size_t k = 0; k < n; ++k) {
      std::vector<double> core;
      for (const auto& ms : runs) core.push_back(ms[k]);
      std::sort(core.begin(), core.end());
      CHECK(usual[k] == core[2]);  // the median of the five
      CHECK(fastest[k] == core[0]);
    }
    CHECK(probes.steady(usual, 1.15));
    std::vector<double> slow = usual, fast = usual;
    slow[0] *= 1.2;
    fast[n - 1] /= 1.2;
    CHECK_FALSE(probes.steady(slow, 1.15));  // either way from the usual speed
    CHECK_FALSE(probes.steady(fast, 1.15));
    // Other work is timed but not kept: the usual speed stays the throughput probe's.
    REQUIRE(probes.run(machine::latency_probe_ms).size() == n);
    CHECK(probes.usual() == usual);
  }
}
