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

namespace ppsched::inline PPSCHED_MODE {

// One stage of a cut: the layers it holds, what one micro-batch costs on it, and the bytes it
// keeps. The partitioner returns it (Partition::stages) and the planner cuts and prices with
// it (a PlanModel's cut is a Partition too): one type, so nothing is translated. Times are in
// the profile's unit and already divided by the stage's device speed; bytes are per device.
struct PartitionStage {
  // The rank the stage runs on: its index in the partitioner's Partition (one stage per
  // device), the placement's rank in a planner's cut (plan::PlanModel::partition).
  std::int32_t rank = 0;
  std::size_t begin = 0;  // first position (in the layer order) of the stage
  std::size_t end = 0;    // one past its last position
  std::string first_layer_name, last_layer_name;  // the layers at positions begin and end - 1
  double speed = 1.0;
  double forward = 0.0;          // its layers' forward times, summed, / speed
  double backward_input = 0.0;   // likewise for BI
  double backward_weight = 0.0;  // likewise for BW
  // The full backward B, / speed, when a layer of the stage has a measured one (the others
  // count BI + BW); absent when none has.
  std::optional<double> backward{};
  double compute_time = 0.0;     // the cost model's compute term: (P[end] - P[begin]) / speed
  // Receiving the tensors that cross the stage's first cut, and sending those that cross its
  // last. In a planner's cut both are 0 between two stages on one rank.
  double recv_time = 0.0;
  double send_time = 0.0;
  double recv_bytes = 0.0;       // the bytes of those tensors, per micro-batch (kept between
  double send_bytes = 0.0;       // two stages on one rank: what the stages hand over)
  double time = 0.0;             // (compute_time + recv_time) + send_time: what the bottleneck is taken over
  double param_bytes = 0.0;      // the parameters alone: what data parallelism all-reduces
  double static_bytes = 0.0;     // optimizer_state_factor * param_bytes: with gradients and optimizer state
  // Stored per micro-batch: its layers' activation_bytes, less the last layer's boundary_bytes
  // where a stage follows (Layer::boundary_bytes: what only the next layer keeps of its output).
  double activation_bytes = 0.0;
  double in_flight = 0.0;         // micro-batches of activations kept, as the cut was asked to count
  // static_bytes + in_flight * (its layers' activation_bytes, summed): what memory_cap is checked
  // against. The sum leaves out no boundary_bytes, so it may exceed the stage's activation_bytes
  // by that term: a cap is then met with room to spare, never missed. A schedule's own peak
  // (FamilyResult::peak_memory_bytes) is measured on its program instead.
  double peak_bytes = 0.0;
  double memory_cap = std::numeric_limits<double>::infinity();
  // Of activation_bytes, what the stage's BIs leave for BW, when every layer's was measured
  // (Layer::weight_bytes, summed, less the last layer's boundary_weight_bytes where a stage follows);
  // cost_model_of makes it the stage's weight_memory_fraction.
  std::optional<double> weight_bytes{};
  // Its layers' optimizer_step times, summed, / speed: paid once per step after the rank's
  // last action (cost_model_of makes it CostModel::optimizer_step); not in `time`.
  double optimizer_step = 0.0;

  [[nodiscard]] std::size_t size() const noexcept { return end - begin; }
  [[nodiscard]] double comm_time() const noexcept { return recv_time + send_time; }
  [[nodiscard]] bool fits_memory() const noexcept { return peak_bytes <= memory_cap; }

  friend bool operator==(const PartitionStage&, const PartitionStage&) = default;
};

// A cut into contiguous stages: the partitioner's result, and the planner's cut for a placement
// (plan::PlanModel::partition, which names its method in its own words and sets ranks and the
// times of a V's turn; plan::cut_text prints it the planner's way).
struct Partition {
  // "optimal", "uniform", "by-params" or "given" from the partitioner; a planner's phrase
  // (plan::partition_method_name) from a PlanModel.
  std::string method;
  std::vector<std::size_t> order;        // order[position] = layer index
  std::vector<std::size_t> boundaries;   // stages + 1 positions, from 0 to the layer count
  std::vector<PartitionStage> stages;
  double bottleneck = 0.0;               // the slowest stage's time
  std::size_t bottleneck_stage = 0;      // the first stage with that time
  double mean_time = 0.0;
  double imbalance = 1.0;                // bottleneck / mean_time (1 when every stage is free)

  [[nodiscard]] std::int32_t stage_count() const noexcept { return static_cast<std::int32_t>(stages.size()); }
  // The layer indices of stage s, in order.
  [[nodiscard]] std::vector<std::size_t> layers_of(std::size_t s) const {
    const PartitionStage& st = stages.at(s);
    return {order.begin() + static_cast<std::ptrdiff_t>(st.begin), order.begin() + static_cast<std::ptrdiff_t>(st.end)};
  }
  [[nodiscard]] bool fits_memory() const noexcept {
    return std::all_of(stages.begin(), stages.end(), [](const PartitionStage& s) { return s.fits_memory(); });
  }

  friend bool operator==(const Partition&, const Partition&) = default;
};

}  // namespace ppsched

#include "ppsched/partition/detail/partition.hpp"  // the internals below build on the types above

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
