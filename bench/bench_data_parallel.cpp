// Data x pipeline parallelism on the CPU backend: the simulator's predicted all-reduce overlap
// against a measured one.
//
// BM_AllReduceOverlap: d = 2 replicas of a p = 2 pipeline (1F1B, or interleaved 1F1B with two
// chunks per rank), m = 8, synthetic stages whose F, BI and BW take 1 ms (timed waits), run
// by DataParallelWorld. Each stage's gradient all-reduce is the in-process sum followed by a
// timed wait of `ar_us` (a network all-reduce of that duration), on the rank's data-parallel
// stream, started after the stage's last weight gradient. Predicted: data_parallel_step over
// the simulated one-replica timeline, each stage's all-reduce taking `ar_us`. Counters:
// predicted and measured step (ms), and the all-reduce's exposed time — predicted, and
// measured as the step minus the step of the same world with ar_us = 0, run just before it
// in the same iteration (means over the iterations). Unpipelined gold baseline: `unpipelined_ms`, the same work on one rank
// with the all-reduce after it (nothing to hide it under).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <ppsched/backend/cpu.hpp>
#include <ppsched/runtime/data_parallel.hpp>
#include <ppsched/runtime/synthetic.hpp>
#include <ppsched/schedule/generators.hpp>
#include <ppsched/sim/data_parallel.hpp>
#include <ppsched/sim/simulate.hpp>
#include <string>
#include <vector>

namespace {

// The in-process sum, then `micros` of modelled network time on the same stream.
struct TimedAllReduce {
  ppsched::InProcessAllReduce::Replica inner;
  double micros = 0.0;

  void all_reduce(ppsched::CpuBackend& b, ppsched::CpuBackend::stream& s, std::int32_t stage,
                  ppsched::CpuBackend::buffer& g, std::stop_token stop) {
    inner.all_reduce(b, s, stage, g, stop);
    if (micros > 0.0) {
      b.launch(s, ppsched::HostTask{[](void* c) {
                                      ppsched::detail::busy_for(*static_cast<double*>(c), std::chrono::microseconds(1));
                                    },
                                    &micros, "modelled all-reduce"},
               {});
    }
  }
};

struct Case {
  const char* family;
  int chunks;
};
constexpr Case cases[] = {{"1f1b", 1}, {"interleaved-1f1b", 2}};

double step_ms(ppsched::DataParallelWorld<ppsched::CpuBackend>& world, const std::vector<ppsched::Batch>& batches) {
  const auto start = std::chrono::steady_clock::now();
  (void)world.run_step(batches);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

void BM_AllReduceOverlap(benchmark::State& state) {
  const Case& c = cases[state.range(0)];
  const double ar_us = static_cast<double>(state.range(1));
  state.SetLabel(c.family);
  const int p = 2, d = 2, m = 8;
  const ppsched::Schedule schedule = ppsched::make_schedule(c.family, {p, m, c.chunks});
  const auto cost = ppsched::uniform_costs(1.0, 1.0, 1.0, "ms");
  const ppsched::SimResult sim = ppsched::simulate(schedule, cost);
  // A ring of 2 over a link of 1 byte per ms, no latency: n bytes take n ms.
  const ppsched::AllReduceModel ar{d, ppsched::Interconnect{0.0, 1.0}, ppsched::AllReduceAlgorithm::ring};
  const std::vector<double> bytes(static_cast<std::size_t>(schedule.stages()), ar_us / 1000.0);
  const ppsched::DataParallelStep predicted = ppsched::data_parallel_step(sim.timeline, bytes, ar);

  ppsched::CpuOptions co;
  co.checking = false;
  std::vector<std::unique_ptr<ppsched::CpuCluster>> clusters;
  std::vector<std::vector<ppsched::CpuBackend*>> backends(d);
  std::vector<std::vector<ppsched::StageFunctions>> stages(d);
  for (int r = 0; r < d; ++r) {
    clusters.push_back(std::make_unique<ppsched::CpuCluster>(p, co));
    for (int k = 0; k < p; ++k) backends[static_cast<std::size_t>(r)].push_back(&clusters.back()->rank(k));
    stages[static_cast<std::size_t>(r)] =
        ppsched::synthetic_stages(cost, schedule.stages(), m, std::chrono::milliseconds(1));
    for (auto& f : stages[static_cast<std::size_t>(r)]) f.weight_grad_size = 1;  // a gradient to sum
  }
  ppsched::DataParallelWorld<ppsched::CpuBackend> world(backends, schedule, stages);
  // The world's own in-process reducer, wrapped with the modelled network time.
  ppsched::InProcessAllReduce sums(d, schedule.stages());
  std::vector<TimedAllReduce> engines;
  for (int r = 0; r < d; ++r) engines.push_back({sums.replica(r), 0.0});
  for (int r = 0; r < d; ++r) {
    for (int k = 0; k < p; ++k) {
      world.replica(r).set_gradient_reducer(k, ppsched::gradient_reducer<ppsched::CpuBackend>(engines[static_cast<std::size_t>(r)]));
    }
  }
  const std::vector<float> inputs(static_cast<std::size_t>(m), 1.0f), targets(static_cast<std::size_t>(m), 0.0f);
  const std::vector<ppsched::Batch> batches(d, ppsched::Batch{inputs, targets});
  (void)world.run_step(batches);  // warm-up
  // Each iteration runs the step twice, without and with the modelled all-reduce, one right
  // after the other, so that the difference sees the same load on the machine.
  double measured = 0.0, free_ms = 0.0;
  for (auto _ : state) {
    for (auto& e : engines) e.micros = 0.0;
    free_ms += step_ms(world, batches);
    for (auto& e : engines) e.micros = ar_us;
    const double ms = step_ms(world, batches);
    state.SetIterationTime(ms / 1000.0);
    measured += ms;
  }
  const auto n = static_cast<double>(state.iterations());
  measured /= n;
  free_ms /= n;
  state.counters["predicted_step_ms"] = predicted.step_time;
  state.counters["measured_step_ms"] = measured;
  state.counters["predicted_exposed_ms"] = predicted.all_reduce_exposed;
  state.counters["measured_exposed_ms"] = measured - free_ms;
  state.counters["free_step_ms"] = free_ms;
  // One rank doing every stage's work of one replica (F + BI + BW = 3 ms per stage and
  // micro-batch), then every stage's all-reduce, one after the other.
  const double stage_count = schedule.stages();
  state.counters["unpipelined_ms"] = 3.0 * m * stage_count + stage_count * ar_us / 1000.0;
}

}  // namespace

BENCHMARK(BM_AllReduceOverlap)
    ->ArgNames({"case", "ar_us"})
    ->ArgsProduct({{0, 1}, {0, 1000, 3000, 8000}})
    ->Iterations(10)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
