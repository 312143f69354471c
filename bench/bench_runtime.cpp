// The runtime on the CPU backend.
//
// BM_ExecutorOverhead: one training step of empty stages (every F / B / BI / BW returns at
// once), so the time is the executor's and the backend's own: issuing, events, stream
// workers, rendezvous. Reported per action: `us_per_action` divides the step's wall time by
// every action of every rank (the machine's 2 cores share all ranks), `us_per_rank_action`
// by the actions of the busiest rank. Target: <= 5 us per action. Variants: ranks, checking
// mode, timeline recording, deterministic mode.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include <ppsched/backend/cpu.hpp>
#include <ppsched/runtime/synthetic.hpp>
#include <ppsched/runtime/world.hpp>
#include <ppsched/schedule/generators.hpp>
#include <ppsched/schedule/lower.hpp>

namespace {

std::vector<ppsched::CpuBackend*> backends(ppsched::CpuCluster& c) {
  std::vector<ppsched::CpuBackend*> out;
  for (int r = 0; r < c.ranks(); ++r) out.push_back(&c.rank(r));
  return out;
}

// args: ranks, checking (0/1), timeline (0/1), deterministic (0/1)
void BM_ExecutorOverhead(benchmark::State& state) {
  const int p = static_cast<int>(state.range(0));
  const int m = 16;
  ppsched::ScheduleRequest req;
  req.ranks = p;
  req.microbatches = m;
  const ppsched::Schedule schedule = ppsched::lower(ppsched::make_schedule("1f1b", req));
  ppsched::CpuOptions co;
  co.checking = state.range(1) != 0;
  co.mode = state.range(3) != 0 ? ppsched::CpuMode::deterministic : ppsched::CpuMode::threaded;
  ppsched::CpuCluster cluster(p, co);
  ppsched::ExecutorOptions eo;
  eo.record_timeline = state.range(2) != 0;
  const auto stages = ppsched::synthetic_stages(ppsched::uniform_costs(0, 0, 0), p, m, std::chrono::milliseconds(1));
  ppsched::World<ppsched::CpuBackend> world(backends(cluster), schedule, stages, eo);
  const std::vector<float> inputs(static_cast<std::size_t>(m), 1.0f);
  const std::vector<float> targets(static_cast<std::size_t>(m), 0.0f);
  (void)world.run_step({inputs, targets});  // warm-up
  for (auto _ : state) {
    benchmark::DoNotOptimize(world.run_step({inputs, targets}).losses.data());
  }
  std::size_t actions = 0;
  std::size_t busiest = 0;
  for (const auto& prog : schedule.programs) {
    actions += prog.size();
    busiest = std::max(busiest, prog.size());
  }
  const double steps = static_cast<double>(state.iterations());
  state.counters["actions"] = static_cast<double>(actions);
  state.counters["us_per_action"] = benchmark::Counter(
      static_cast<double>(actions) * steps * 1e-6, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["us_per_rank_action"] = benchmark::Counter(
      static_cast<double>(busiest) * steps * 1e-6, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

BENCHMARK(BM_ExecutorOverhead)
    ->ArgNames({"ranks", "checking", "timeline", "deterministic"})
    ->Args({1, 0, 0, 0})
    ->Args({1, 1, 1, 0})
    ->Args({2, 0, 0, 0})
    ->Args({2, 1, 1, 0})
    ->Args({4, 0, 0, 0})
    ->Args({4, 0, 1, 0})
    ->Args({4, 1, 1, 0})
    ->Args({8, 0, 0, 0})
    ->Args({4, 1, 1, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
