// Internals of <ppsched/partition/partition.hpp>: the splitter's steps over a layer graph: cut
// costs, device speeds and memory caps. They are in ppsched::detail and not part of the API: no
// example or page uses them, and they may change in any release (docs/architecture.md).
//
// They build on the part's types, which <ppsched/partition/partition_types.hpp> holds.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/error.hpp"
#include "ppsched/graph/hardware.hpp"
#include "ppsched/graph/layer_graph.hpp"
#include "ppsched/partition/chain.hpp"
#include "ppsched/partition/cost_model.hpp"
#include "ppsched/partition/partition_types.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

// A graph and a cost model flattened into the solver's arrays, over one topological order.
// The per-layer arrays share one allocation: fewer, larger blocks are what a malloc keeps
// for the next call instead of returning them to the system (and faulting them in again).
// Move-only, since the views point into `storage`.
struct PartitionInput {
  std::size_t layers = 0;
  std::size_t stages = 0;
  std::vector<std::size_t> order;
  std::vector<double> storage;
  std::span<double> compute, params, activations, comm;  // views into storage; comm may be empty
  std::vector<double> speed, cap, inflight;
  double optimizer_state_factor = 1.0;
  double largest_layer = 0.0;
  bool plain_chain = false;  // see is_plain_chain

  PartitionInput() = default;
  PartitionInput(const PartitionInput&) = delete;
  PartitionInput& operator=(const PartitionInput&) = delete;
  PartitionInput(PartitionInput&&) noexcept = default;
  PartitionInput& operator=(PartitionInput&&) noexcept = default;

  [[nodiscard]] ChainModel model() const noexcept {
    ChainModel m;
    m.layers = layers;
    m.stages = stages;
    m.compute = compute;
    m.params = params;
    m.activations = activations;
    m.comm = comm;
    m.speed = speed;
    m.memory_cap = cap;
    m.inflight = inflight;
    m.optimizer_state_factor = optimizer_state_factor;
    return m;
  }
};

PPSCHED_OUTLINE void check_partition_shape(const LayerGraph& graph, std::int32_t stages, std::string_view subject);

PPSCHED_OUTLINE void check_running_sum(double total, std::string_view subject, const char* what);

// For each cut b, the sum of per_tensor(output_bytes) over the tensors crossing it, in the
// order of their producing layers (0 at both ends).
template <class PerTensor>
void sum_over_crossing_tensors(const LayerGraph& graph, std::span<const std::size_t> order, bool plain_chain,
                               std::span<double> sums, PerTensor per_tensor) {
  const std::size_t n = graph.size();
  const Layer* layers = graph.layers().data();
  sums[0] = sums[n] = 0.0;
  if (plain_chain) {  // one tensor per cut: the previous layer's output
    for (std::size_t b = 1; b < n; ++b) sums[b] = 0.0 + per_tensor(layers[b - 1].output_bytes);
    return;
  }
  std::vector<std::size_t> position(n);
  for (std::size_t p = 0; p < n; ++p) position[order[p]] = p;
  // last_reader[p]: the position of the last layer reading position p's output, or p if none.
  std::vector<std::size_t> last_reader(n);
  for (std::size_t p = 0; p < n; ++p) last_reader[p] = p;
  for (const Edge& e : graph.edges()) {
    const std::size_t from = position[e.from];
    last_reader[from] = std::max(last_reader[from], position[e.to]);
  }
  std::vector<std::size_t> live;  // positions whose output crosses the current cut, ascending
  for (std::size_t b = 1; b < n; ++b) {
    if (last_reader[b - 1] >= b) live.push_back(b - 1);
    std::erase_if(live, [&](std::size_t p) { return last_reader[p] < b; });
    double sum = 0.0;
    for (const std::size_t p : live) sum = sum + per_tensor(layers[order[p]].output_bytes);
    sums[b] = sum;
  }
}

// True when the graph is a chain cut in its own numbering: then the tensor crossing cut b is
// simply layer b-1's output.
[[nodiscard]] PPSCHED_OUTLINE bool is_plain_chain(const LayerGraph& graph, std::span<const std::size_t> order);

[[nodiscard]] PPSCHED_OUTLINE PartitionInput prepare_partition(const LayerGraph& graph, std::int32_t stage_count,
                                                      const PartitionCostModel& cost, std::span<const std::size_t> order,
                                                      std::string_view subject);

// Prices `boundaries` and hands over the input's order (so the input is spent).
[[nodiscard]] PPSCHED_OUTLINE Partition make_partition(const LayerGraph& graph, PartitionInput&& in,
                                              std::vector<std::size_t> boundaries, std::string method);

// The least memory cap that, given to every device, admits a split (time ignored), and the
// stage that needs it in such a split. The search runs over doubles, like the time search.
struct SmallestCap {
  double bytes = 0.0;
  std::size_t stage = 0;
};

[[nodiscard]] PPSCHED_OUTLINE SmallestCap smallest_uniform_cap(const PartitionInput& in);

[[noreturn]] PPSCHED_OUTLINE void fail_memory(const PartitionInput& in, std::string_view subject);

PPSCHED_OUTLINE void check_boundaries(const LayerGraph& graph, std::span<const std::size_t> boundaries);

}  // namespace detail

}  // namespace ppsched

