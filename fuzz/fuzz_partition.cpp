// libFuzzer harness: the partitioner (partition/partition.hpp) fed arbitrary layer costs,
// skip connections, device speeds, memory caps, link costs and in-flight counts — NaN,
// infinite, negative and huge values included. A ppsched::error is the expected answer to
// bad input; anything else is a bug. Every accepted result is checked against what a
// partition is: contiguous non-empty stages covering every layer, and the optimal split's
// bottleneck no worse than the uniform or by-parameter split's when those fit the caps.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <ppsched/error.hpp>
#include <ppsched/graph/layer_graph.hpp>
#include <ppsched/partition/partition.hpp>
#include <string>
#include <vector>

#include "fuzz_input.hpp"

namespace {

void check_shape(const ppsched::Partition& p, std::size_t layers, std::size_t stages) {
  PPSCHED_FUZZ_CHECK(p.boundaries.size() == stages + 1 && p.stages.size() == stages, "one boundary per cut, one entry per stage");
  PPSCHED_FUZZ_CHECK(p.boundaries.front() == 0 && p.boundaries.back() == layers, "the stages cover every layer");
  for (std::size_t j = 0; j < stages; ++j) {
    PPSCHED_FUZZ_CHECK(p.boundaries[j] < p.boundaries[j + 1], "a stage holds at least one layer");
  }
  PPSCHED_FUZZ_CHECK(p.order.size() == layers, "the order lists every layer");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ppsched::fuzz::FuzzInput in(data, size);
  const std::size_t layers = static_cast<std::size_t>(in.in_range(0, 24));
  std::vector<ppsched::Layer> ls(layers);
  for (std::size_t i = 0; i < layers; ++i) {
    ls[i].name = "l" + std::to_string(i);
    ls[i].forward = in.cost();
    ls[i].backward_input = in.cost();
    ls[i].backward_weight = in.cost();
    ls[i].param_bytes = in.cost();
    ls[i].activation_bytes = in.cost();
    ls[i].output_bytes = in.cost();
  }
  std::vector<ppsched::Edge> edges;
  for (std::size_t i = 1; i < layers; ++i) edges.push_back({i - 1, i});
  const std::int32_t extra_edges = in.in_range(0, 6);
  for (std::int32_t e = 0; e < extra_edges && layers > 0; ++e) {
    // Mostly forward skips; now and then any pair (a cycle or a self-loop the graph rejects).
    const auto from = static_cast<std::size_t>(in.in_range(0, static_cast<std::int32_t>(layers)));
    const auto to = static_cast<std::size_t>(in.in_range(0, static_cast<std::int32_t>(layers)));
    edges.push_back({from, to});
  }

  const std::int32_t stages = in.in_range(0, 9);
  ppsched::PartitionCostModel cost;
  const std::int32_t devices = in.in_range(0, 2) == 2 ? stages : in.in_range(0, 1);
  for (std::int32_t d = 0; d < devices; ++d) {
    ppsched::Device dev;
    dev.speed = in.byte() % 4u == 0 ? in.cost() : 1.0 + static_cast<double>(in.byte() % 4u);
    if (in.byte() % 2u == 0) dev.memory_bytes = in.cost();
    cost.devices.push_back(dev);
  }
  if (in.byte() % 2u == 0) {
    cost.link.latency = in.cost();
    cost.link.bandwidth = in.cost();
  }
  if (in.byte() % 4u == 0) cost.optimizer_state_factor = in.cost();
  if (in.byte() % 4u == 0) {
    const std::int32_t n = in.byte() % 8u == 0 ? in.in_range(0, 9) : stages;
    for (std::int32_t j = 0; j < n; ++j) cost.inflight.push_back(in.cost());
  }

  try {
    const ppsched::LayerGraph graph(ls, edges);
    double optimal = std::nan("");
    try {
      const ppsched::Partition p = ppsched::partition_optimal(graph, stages, cost);
      check_shape(p, layers, static_cast<std::size_t>(stages));
      PPSCHED_FUZZ_CHECK(p.fits_memory(), "the optimal split honours the caps or throws");
      optimal = p.bottleneck;
    } catch (const ppsched::error&) {
    }
    for (int method = 0; method < 2; ++method) {
      try {
        const ppsched::Partition p = method == 0 ? ppsched::partition_uniform(graph, stages, cost)
                                                 : ppsched::partition_by_params(graph, stages, cost);
        check_shape(p, layers, static_cast<std::size_t>(stages));
        // Optimal is the least bottleneck among the splits that fit; allow rounding in the
        // sums (relative 1e-9) since the two are priced through different running sums.
        PPSCHED_FUZZ_CHECK(!(p.fits_memory() && std::isfinite(optimal) && std::isfinite(p.bottleneck) &&
                             optimal > p.bottleneck * (1.0 + 1e-9) + 1e-300),
                           "no fitting split has a smaller bottleneck than the optimal one");
      } catch (const ppsched::error&) {
      }
    }
  } catch (const ppsched::error&) {
  }
  return 0;
}
