// A plan every step (issue 42): choosing the schedule for p = 8 ranks and m = 64 micro-batches
// of variable length (plan_microbatches, plan/varlen.hpp), against the goal of 1 ms, with the
// ratio of planning time to the simulated step it plans shown beside (counter "plan/step": a
// planner that runs before every step costs the step that share when it is not overlapped).
// The micro-batches hold lognormal lengths (mu 5.49, sigma 1.10, clipped to [16, 4096]: the
// distribution of examples/varlen_plan.cpp) packed up to 8192 tokens each; stage costs follow
// the fit of that example's model. Cases: the step plan's default search (the fixed families on
// one stage per rank and on the V), the same with the greedy construction, the full search (every
// candidate kind, chunks 1, 2, 4), and split_batch's balanced split of a 1024-sequence batch.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "ppsched/plan/varlen.hpp"

// DoNotOptimize is given const lvalues only: Debian's Google Benchmark 1.7.1 passes a mutable
// lvalue through `asm volatile("" : "+r,m"(value))`, and GCC 12, choosing a general register for a
// double held in memory, wrote back 0 or a stale pointer's bits (6.9e-310, 4.7e-310) into
// `r.simulation.makespan` after the loop while `r.best().makespan` stayed right. The const
// overload only reads its argument ("r,m" as an input). Reproduced 2026-12-06 in
// BM_plan_step_ordered (gone with the const overload); google/benchmark issue 903 and GCC PR 92597
// report the same write-back of a double through DoNotOptimize's output constraint.
namespace {

using namespace ppsched;
using namespace ppsched::plan;

constexpr std::int32_t ranks = 8;
constexpr std::int32_t microbatches = 64;

LengthCosts model() {
  std::vector<LengthSample> samples;
  for (const std::int64_t len : {256, 1024, 4096}) {
    for (const std::size_t count : {1, 2, 4, 8}) {
      LengthSample s;
      s.lengths.assign(count, len);
      const MicrobatchShape sh = shape_of(s.lengths);
      for (std::int32_t st = 0; st < ranks; ++st) {
        const double k = st == 0 ? 0.7 : st == ranks - 1 ? 1.4 : 1.0;
        const double f = k * (0.03 + 2.0e-4 * sh.tokens + 2.4e-8 * sh.squares);
        s.stages.push_back(StageCost{f, 1.1 * f, 0.9 * f, 64.0 * 1024 + 96.0 * 1024 * sh.tokens, 8.0 * 1024 * sh.tokens});
      }
      samples.push_back(s);
    }
  }
  return fit_length_costs(samples);
}

std::vector<std::int64_t> lengths(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> d(5.49, 1.10);
  std::vector<std::int64_t> out(n);
  for (auto& l : out) l = std::clamp<std::int64_t>(std::llround(d(rng)), 16, 4096);
  return out;
}

// Exactly 64 micro-batches: lengths drawn in turn, a micro-batch closed when the next would take
// it past 8192 tokens.
std::vector<Microbatch> sixty_four() {
  const std::vector<std::int64_t> ls = lengths(4096, 3);
  std::vector<Microbatch> out;
  std::vector<std::int64_t> cur;
  std::int64_t tokens = 0;
  for (const std::int64_t l : ls) {
    if (tokens + l > 8192) {
      out.push_back(Microbatch{{}, tokens, 0, shape_of(cur)});
      if (out.size() == microbatches) break;
      cur.clear();
      tokens = 0;
    }
    cur.push_back(l);
    tokens += l;
  }
  return out;
}

void report(benchmark::State& state, const SearchResult& r) {
  state.counters["step_ms"] = r.best().makespan;
  state.counters["candidates"] = static_cast<double>(r.candidates.size());
  state.SetLabel(r.best().name);
}

void BM_plan_step(benchmark::State& state) {
  const LengthCosts fit = model();
  const std::vector<Microbatch> mbs = sixty_four();
  SearchResult r;
  for (auto _ : state) {
    r = plan_microbatches(fit, mbs);
    benchmark::DoNotOptimize(std::as_const(r.simulation.makespan));
  }
  report(state, r);
  // Planning time over the step it plans: a rate counter would divide by the wall time, so the
  // ratio is formed from the iteration time the framework reports (ms per plan / step ms).
  state.counters["plan/step"] = benchmark::Counter(r.best().makespan / 1000.0,
                                                   benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_plan_step)->Unit(benchmark::kMicrosecond);

// plan_step: the same search, then the micro-batches' order (its 8 timed orders by default) and
// the search again where an order wins.
void BM_plan_step_ordered(benchmark::State& state) {
  const LengthCosts fit = model();
  const std::vector<Microbatch> mbs = sixty_four();
  StepPlan r;
  for (auto _ : state) {
    r = plan_step(fit, mbs);
    benchmark::DoNotOptimize(std::as_const(r.search.simulation.makespan));
  }
  report(state, r.search);
  state.counters["gain"] = r.given_order_makespan / r.search.simulation.makespan - 1.0;
}
BENCHMARK(BM_plan_step_ordered)->Unit(benchmark::kMicrosecond);

void BM_plan_step_greedy(benchmark::State& state) {
  const LengthCosts fit = model();
  const std::vector<Microbatch> mbs = sixty_four();
  StepPlanOptions o;
  o.search.greedy = true;
  SearchResult r;
  for (auto _ : state) {
    r = plan_microbatches(fit, mbs, o);
    benchmark::DoNotOptimize(std::as_const(r.simulation.makespan));
  }
  report(state, r);
  state.counters["plan/step"] = benchmark::Counter(r.best().makespan / 1000.0,
                                                   benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_plan_step_greedy)->Unit(benchmark::kMillisecond);

void BM_plan_step_full_search(benchmark::State& state) {
  const LengthCosts fit = model();
  const std::vector<Microbatch> mbs = sixty_four();
  StepPlanOptions o;
  o.search = SearchOptions{};
  SearchResult r;
  for (auto _ : state) {
    r = plan_microbatches(fit, mbs, o);
    benchmark::DoNotOptimize(std::as_const(r.simulation.makespan));
  }
  report(state, r);
  state.counters["plan/step"] = benchmark::Counter(r.best().makespan / 1000.0,
                                                   benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_plan_step_full_search)->Unit(benchmark::kMillisecond);

void BM_split_balanced(benchmark::State& state) {
  const LengthCosts fit = model();
  const std::vector<std::int64_t> batch = lengths(1024, 5);
  SplitOptions o;
  o.token_budget = 8192;
  Split s;
  for (auto _ : state) {
    s = split_batch(batch, fit, SplitMethod::balanced, o);
    benchmark::DoNotOptimize(s.microbatches.data());
  }
  state.counters["microbatches"] = static_cast<double>(s.microbatches.size());
}
BENCHMARK(BM_split_balanced)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
