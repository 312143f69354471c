// Generate + lower + validate + simulate for every schedule family at p = 64 ranks and
// m = 1024 micro-batches (v = 2 where the family has chunks). Target: under 50 ms for the
// four together on the 2-core development machine (validate() and simulate() there take
// lowering's proof: lower() returns a LoweredSchedule). all/ makes the plain calls, which
// borrow the library's scratch pool; all+workspace/ keeps one Workspace across calls, as a
// caller that lowers many schedules does (engine/workspace.hpp). Each phase is also timed alone
// (validate/ is the full proof of a plain Schedule, validate-lowered/ the proof taken), and
// the simulation reports the schedule's bubble and size as counters. The "gold" baseline is
// the unpipelined step: one rank running every stage's F and B for every micro-batch,
// simulated by the same engine.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ppsched/engine/workspace.hpp"
#include "ppsched/lower/lower.hpp"
#include "ppsched/schedule/generators.hpp"
#include "ppsched/sim/simulate.hpp"
#include "ppsched/validate/validate.hpp"

namespace {

using namespace ppsched;

constexpr std::int32_t bench_ranks = 64;
constexpr std::int32_t bench_microbatches = 1024;

ScheduleRequest request_for(std::string_view family) {
  // The looped families at depth 2; the V families (zb-v, v-half, v-min, dualpipev) take only 2.
  const bool chunked = family_info(family).placement == PlacementKind::looped ||
                       !accepts(family, ScheduleRequest{bench_ranks, bench_microbatches, 1});
  return ScheduleRequest{bench_ranks, bench_microbatches, chunked ? 2 : 1};
}

// Per-stage costs of a transformer-like layer block: B twice F, split evenly into BI and BW.
CostModel bench_costs(const Schedule& s) {
  const double v = static_cast<double>(s.stages()) / s.ranks;
  CostModel c = uniform_costs(1.0 / v, 1.0 / v, 1.0 / v, "ms");
  c.stages.front().activation_bytes = 64.0 * 1024 * 1024 / v;
  return c;
}

std::size_t action_count(const Schedule& s) {
  std::size_t n = 0;
  for (const auto& p : s.programs) n += p.size();
  return n;
}

// One step of the pipeline: generate, lower, validate, simulate. `reuse`: one Workspace of
// the caller's for every call of every iteration; otherwise the plain calls, without one.
void BM_all(benchmark::State& state, std::string family, bool reuse) {
  const ScheduleRequest r = request_for(family);
  double bubble = 0.0;
  std::size_t actions = 0;
  Workspace kept;
  for (auto _ : state) {
    const Schedule s = make_schedule(family, r);
    const CostModel c = bench_costs(s);
    const LowerOptions lo = lower_options_for(c, s.stages(), s.microbatches);
    const LoweredSchedule l = reuse ? lower(s, lo, kept) : lower(s, lo);
    const ValidationReport report = reuse ? validate(l, {}, kept) : validate(l);
    if (!report.ok()) state.SkipWithError("schedule did not validate");
    SimOptions o;
    o.record_timeline = false;
    const SimResult result = reuse ? simulate(l, c, o, kept) : simulate(l, c, o);
    bubble = result.bubble_fraction;
    actions = action_count(l);
    benchmark::DoNotOptimize(std::as_const(result.makespan));  // const: see bench_varlen.cpp
  }
  state.counters["bubble"] = bubble;
  state.counters["actions"] = static_cast<double>(actions);
  state.counters["ns_per_action"] =
      benchmark::Counter(static_cast<double>(actions) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_generate(benchmark::State& state, std::string family) {
  const ScheduleRequest r = request_for(family);
  for (auto _ : state) benchmark::DoNotOptimize(make_schedule(family, r));
}

// `reuse` (the +workspace/ variants): one Workspace kept across calls; otherwise the plain
// call, which borrows the scratch pool's.
void BM_lower(benchmark::State& state, std::string family, bool reuse) {
  const Schedule s = make_schedule(family, request_for(family));
  const LowerOptions o = lower_options_for(bench_costs(s), s.stages(), s.microbatches);
  Workspace ws;
  for (auto _ : state) benchmark::DoNotOptimize(reuse ? lower(s, o, ws) : lower(s, o));
}

// Lowering when transfers take time (half a chunk's forward, as in issue 16): lower() also
// runs its order and, when that falls short of the idealised run, lowers and runs the plainer
// orders too (lower/lower.hpp). The counter is the returned order's simulated makespan.
void BM_lower_link(benchmark::State& state, std::string family) {
  const Schedule s = make_schedule(family, request_for(family));
  CostModel c = bench_costs(s);
  c.link.latency = 0.5 * c.stages.front().forward;
  const LowerOptions o = lower_options_for(c, s.stages(), s.microbatches);
  Workspace ws;
  for (auto _ : state) benchmark::DoNotOptimize(lower(s, o, ws));
  state.counters["makespan"] = simulate(lower(s, o), c).makespan;
}

// The full proof: what validate() costs on a plain Schedule (a copy of lower()'s output).
void BM_validate(benchmark::State& state, std::string family, bool reuse) {
  const Schedule l = lower(make_schedule(family, request_for(family)));
  Workspace ws;
  for (auto _ : state) benchmark::DoNotOptimize(reuse ? validate(l, {}, ws) : validate(l));
}

// validate() of a LoweredSchedule: it takes lowering's proof and measures the memory only.
void BM_validate_lowered(benchmark::State& state, std::string family) {
  const LoweredSchedule l = lower(make_schedule(family, request_for(family)));
  for (auto _ : state) benchmark::DoNotOptimize(validate(l));
}

void BM_simulate(benchmark::State& state, std::string family, bool timeline, bool reuse) {
  const Schedule s = make_schedule(family, request_for(family));
  const CostModel c = bench_costs(s);
  const LoweredSchedule l = lower(s, lower_options_for(c, s.stages(), s.microbatches));
  SimOptions o;
  o.record_timeline = timeline;
  Workspace ws;
  for (auto _ : state) benchmark::DoNotOptimize(reuse ? simulate(l, c, o, ws) : simulate(l, c, o));
}

// The unpipelined baseline: every stage of the 1F1B model on one rank, simulated.
void BM_gold_unpipelined(benchmark::State& state) {
  Schedule s;
  s.name = "unpipelined";
  s.ranks = 1;
  s.microbatches = bench_microbatches;
  s.placement.assign(bench_ranks, 0);
  s.programs.resize(1);
  for (std::int32_t mb = 0; mb < bench_microbatches; ++mb) {
    for (std::int32_t st = 0; st < bench_ranks; ++st) s.programs[0].push_back(Action{Op::F, st, mb, 0});
    for (std::int32_t st = bench_ranks; st-- > 0;) s.programs[0].push_back(Action{Op::B, st, mb, 0});
  }
  const CostModel c = uniform_costs(1.0, 1.0, 1.0, "ms");
  SimOptions o;
  o.record_timeline = false;
  double makespan = 0.0;
  for (auto _ : state) makespan = simulate(s, c, o).makespan;
  state.counters["makespan"] = makespan;
}

const int registered = [] {
  for (std::string_view name : family_names()) {
    const std::string f(name);
    benchmark::RegisterBenchmark(("all/" + f).c_str(), BM_all, f, false)->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("all+workspace/" + f).c_str(), BM_all, f, true)->Unit(benchmark::kMillisecond);
  }
  for (std::string_view name : family_names()) {
    const std::string f(name);
    benchmark::RegisterBenchmark(("generate/" + f).c_str(), BM_generate, f)->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("lower/" + f).c_str(), BM_lower, f, false)->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("lower+workspace/" + f).c_str(), BM_lower, f, true)->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("lower+link/" + f).c_str(), BM_lower_link, f)->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("validate/" + f).c_str(), BM_validate, f, false)->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("validate+workspace/" + f).c_str(), BM_validate, f, true)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("validate-lowered/" + f).c_str(), BM_validate_lowered, f)->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("simulate/" + f).c_str(), BM_simulate, f, false, false)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("simulate+workspace/" + f).c_str(), BM_simulate, f, false, true)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("simulate+timeline/" + f).c_str(), BM_simulate, f, true, false)
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark("gold/unpipelined-1rank", BM_gold_unpipelined)->Unit(benchmark::kMillisecond);
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
