// Partitioner speed: 10^3, 10^5 and 10^6 layers into 8, 64 and 1024 stages, as a bare chain of
// costs and as a layer graph with and without memory caps and cut costs. Every partition row
// carries its own baseline: one prefix-sum pass over the same costs into an array allocated
// beforehand (the partitioner's time includes its own allocations), timed right before each
// partition (prefix_ms), and the ratio of the two (x_prefix). Timings on a shared machine drift; ratios
// taken side by side drift less. The prefix_sum rows time that pass on its own.
//
//   ./build/bench/bench_partition --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/graph/layer_graph.hpp"
#include "ppsched/partition/chain.hpp"
#include "ppsched/partition/partition.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// Per-layer costs uniform in [0.5, 1.5): the balanced case a transformer stack resembles.
const std::vector<double>& chain_costs(std::size_t n) {
  static std::vector<double> costs;
  if (costs.size() != n) {
    std::mt19937_64 rng(42);
    std::uniform_real_distribution<double> cost(0.5, 1.5);
    costs.resize(n);
    for (double& c : costs) c = cost(rng);
  }
  return costs;
}

// The same costs as layers (forward, BI and BW a third each), with parameters, activations
// and outputs that vary per layer, so cut costs differ from cut to cut.
const ppsched::LayerGraph& layer_graph(std::size_t n) {
  static std::unique_ptr<ppsched::LayerGraph> graph;
  if (!graph || graph->size() != n) {
    graph.reset();
    const std::vector<double>& costs = chain_costs(n);
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> spread(1.0, 2.0);
    std::vector<ppsched::Layer> layers(n);
    for (std::size_t i = 0; i < n; ++i) {
      const double third = costs[i] / 3.0;
      layers[i] = ppsched::Layer{"layer" + std::to_string(i), third, third, third,
                                 1e6 * spread(rng), 1e5 * spread(rng), 1e5 * spread(rng)};
    }
    graph = std::make_unique<ppsched::LayerGraph>(ppsched::LayerGraph::chain(std::move(layers)));
  }
  return *graph;
}

// One pass of running sums into `prefix` (n + 1 entries, allocated by the caller, so that the
// pass is timed without the allocator).
void prefix_sums(const std::vector<double>& costs, std::vector<double>& prefix) {
  prefix[0] = 0.0;
  std::inclusive_scan(costs.begin(), costs.end(), prefix.begin() + 1);
}

void prefix_sums(const ppsched::LayerGraph& graph, std::vector<double>& prefix) {
  double sum = 0.0;
  prefix[0] = 0.0;
  for (std::size_t i = 0; i < graph.size(); ++i) prefix[i + 1] = sum = sum + graph.layers()[i].compute();
}

// Times one prefix pass and one partition, back to back, so that a busy machine slows both
// alike; the benchmark's time is the partition's alone.
template <class Costs, class Partition>
void time_against_prefix(benchmark::State& state, const Costs& costs, Partition&& partition) {
  double partition_seconds = 0.0, prefix_seconds = 0.0;
  std::int64_t runs = 0;
  std::vector<double> p(static_cast<std::size_t>(state.range(0)) + 1);
  for (auto _ : state) {
    const auto start = Clock::now();
    prefix_sums(costs, p);
    benchmark::DoNotOptimize(p.data());
    benchmark::ClobberMemory();
    const auto middle = Clock::now();
    partition();
    const auto end = Clock::now();
    const double seconds = std::chrono::duration<double>(end - middle).count();
    state.SetIterationTime(seconds);
    partition_seconds += seconds;
    prefix_seconds += std::chrono::duration<double>(middle - start).count();
    ++runs;
  }
  state.counters["layers"] = static_cast<double>(state.range(0));
  state.counters["stages"] = static_cast<double>(state.range(1));
  state.counters["prefix_ms"] = prefix_seconds / static_cast<double>(runs) * 1e3;
  state.counters["x_prefix"] = partition_seconds / prefix_seconds;
}

void BM_prefix_sum(benchmark::State& state) {
  const std::vector<double>& costs = chain_costs(static_cast<std::size_t>(state.range(0)));
  std::vector<double> p(costs.size() + 1);
  for (auto _ : state) {
    prefix_sums(costs, p);
    benchmark::DoNotOptimize(p.data());
    benchmark::ClobberMemory();
  }
  state.counters["layers"] = static_cast<double>(state.range(0));
}

void BM_partition_chain(benchmark::State& state) {
  const std::vector<double>& costs = chain_costs(static_cast<std::size_t>(state.range(0)));
  const auto stages = static_cast<std::int32_t>(state.range(1));
  time_against_prefix(state, costs, [&] {
    ppsched::ChainSplit split = ppsched::partition_chain(costs, stages);
    benchmark::DoNotOptimize(std::as_const(split.bottleneck));  // const: see bench_varlen.cpp
  });
}

// range(2): 0 plain, 1 memory caps, 2 cut costs, 3 both.
void BM_partition_graph(benchmark::State& state) {
  const ppsched::LayerGraph& graph = layer_graph(static_cast<std::size_t>(state.range(0)));
  const auto stages = static_cast<std::int32_t>(state.range(1));
  const bool caps = (state.range(2) & 1) != 0, cuts = (state.range(2) & 2) != 0;
  ppsched::PartitionCostModel cost;
  if (cuts) cost.link = {1e-3, 1e8};  // a cut costs about 0.3% of a layer
  if (caps) {
    // Mixed-precision Adam, 1F1B in-flight counts, and a cap every device shares: the
    // fullest stage of the equal-count split, which the time-optimal split then has to respect.
    cost.optimizer_state_factor = 8.0;
    const ppsched::Partition uniform = ppsched::partition_uniform(graph, stages, cost);
    double cap = 0.0;
    for (const ppsched::PartitionStage& s : uniform.stages) cap = std::max(cap, s.peak_bytes);
    cost.devices = {ppsched::Device{1.0, cap}};
  }
  time_against_prefix(state, graph, [&] {
    ppsched::Partition p = ppsched::partition_optimal(graph, stages, cost);
    benchmark::DoNotOptimize(std::as_const(p.bottleneck));
  });
  state.SetLabel(caps && cuts ? "caps+cuts" : caps ? "caps" : cuts ? "cuts" : "plain");
}

void sizes(benchmark::internal::Benchmark* b, bool variants) {
  for (const std::int64_t n : {1000, 100000, 1000000}) {
    for (const std::int64_t k : {8, 64, 1024}) {
      if (k > n) continue;  // 1024 non-empty stages need at least 1024 layers
      if (!variants) {
        b->Args({n, k});
        continue;
      }
      for (const std::int64_t v : {0, 1, 2, 3}) b->Args({n, k, v});
    }
  }
}

}  // namespace

BENCHMARK(BM_prefix_sum)->Arg(1000)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_partition_chain)->Apply([](auto* b) { sizes(b, false); })->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_partition_graph)->Apply([](auto* b) { sizes(b, true); })->UseManualTime()->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
