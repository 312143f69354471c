// Partitioning a layer graph into pipeline stages. The layers are laid out in a topological
// order (the graph's own, or one the caller gives) and cut into contiguous, non-empty stages.
// `partition_optimal` returns the split with the smallest bottleneck — exactly, under speed,
// memory caps and communication costs; `partition_uniform` and `partition_by_params` give the
// splits Megatron-LM and DeepSpeed users know; `evaluate_partition` prices any given split
// with the same cost model, so a manual split can be set beside the optimum. Every result is
// a `Partition`: boundaries plus, per stage, the times and bytes a schedule simulator needs.
//
// The cost of a stage (see docs/partition.md): its layers' forward + backward times divided
// by its device's speed, plus the time to receive every tensor crossing its first cut and to
// send every tensor crossing its last cut. A tensor is one layer's output; it crosses cut b
// when its layer is before b and some layer it feeds is at or after b, so a skip connection
// spanning several stages is paid at every cut it spans (each stage between relays it), once
// per cut however many layers beyond it read it.
#pragma once

#include "ppsched/config.hpp"

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

#include "ppsched/error.hpp"
#include "ppsched/graph/hardware.hpp"
#include "ppsched/graph/layer_graph.hpp"
#include "ppsched/partition/chain.hpp"
#include "ppsched/partition/cost_model.hpp"
#include "ppsched/partition/detail/partition.hpp"
#include "ppsched/partition/partition_types.hpp"

namespace ppsched::inline PPSCHED_MODE {

// The split with the smallest bottleneck (see chain.hpp for the exact cost formulas and the
// tie rule). `order` is a topological order to cut; empty means the graph's own.
// Throws when no split fits the memory caps, saying what cap would.
[[nodiscard]] PPSCHED_OUTLINE Partition partition_optimal(const LayerGraph& graph, std::int32_t stages,
                                                 const PartitionCostModel& cost = {},
                                                 std::span<const std::size_t> order = {});

// Equal layer counts, as Megatron-LM splits; when the count does not divide, the first
// (layers % stages) stages get one layer more (as DeepSpeed's partition_method="uniform").
[[nodiscard]] PPSCHED_OUTLINE Partition partition_uniform(const LayerGraph& graph, std::int32_t stages,
                                                 const PartitionCostModel& cost = {},
                                                 std::span<const std::size_t> order = {});

// Balanced parameter bytes, as DeepSpeed's partition_method="parameters" intends: the split
// whose largest stage holds the fewest parameter bytes (exact, same tie rule), then priced
// with the full cost model.
[[nodiscard]] PPSCHED_OUTLINE Partition partition_by_params(const LayerGraph& graph, std::int32_t stages,
                                                   const PartitionCostModel& cost = {},
                                                   std::span<const std::size_t> order = {});

// Prices a given split: stage j holds positions boundaries[j] .. boundaries[j+1]-1 of the
// order. Memory caps are reported (PartitionStage::fits_memory), not enforced.
[[nodiscard]] PPSCHED_OUTLINE Partition evaluate_partition(const LayerGraph& graph, std::span<const std::size_t> boundaries,
                                                  const PartitionCostModel& cost = {},
                                                  std::span<const std::size_t> order = {});

// A table, one row per stage:
//   partition (optimal): 12 layers, 4 stages, bottleneck 6.5 at stage 2, mean 6.1, imbalance 1.066
//   stage  positions  layers  first .. last  speed  compute  comm  time  memory  cap
PPSCHED_OUTLINE std::ostream& operator<<(std::ostream& out, const Partition& p);

[[nodiscard]] PPSCHED_OUTLINE std::string to_string(const Partition& p);

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/partition/impl/partition.ipp"
#endif
