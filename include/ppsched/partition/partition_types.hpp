// The types of the partitioner (<ppsched/partition/partition.hpp>): a stage of a split,
// PartitionStage, and the split, Partition. Include <ppsched/partition/partition.hpp>; they sit
// in a header of their own so that the internals in partition/detail/partition.hpp build on them
// without including the public header back.
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
