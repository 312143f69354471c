// What a partition costs besides the layers themselves: the devices the stages run on (in
// pipeline order), the link between neighbouring stages, how many bytes each parameter byte
// becomes once gradients and optimizer state are added, and how many micro-batches of
// activations each stage keeps alive under the chosen schedule. One small value, so that the
// optimal splitter, the simple splits and the evaluation of a hand-made split all price
// stages the same way.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/graph/hardware.hpp"

namespace ppsched::inline PPSCHED_MODE {

// Bytes a rank holds per parameter byte unless told otherwise, in the partitioner, the
// planner (GraphModelOptions, DevicePlanOptions) and ppsched-plan alike: mixed-precision Adam
// (bf16 weights and gradients, fp32 master weights and two moments: 16 / 2). One default, so
// the same model priced by two entry points holds the same bytes.
inline constexpr double default_optimizer_state_factor = 8.0;

struct PartitionCostModel {
  // One per stage in pipeline order, a single one for every stage, or none (speed 1, no cap).
  std::vector<Device> devices;
  Interconnect link{};
  // Bytes a stage holds per parameter byte: 1 counts the weights alone.
  double optimizer_state_factor = default_optimizer_state_factor;
  // Per stage, the micro-batches whose activations it keeps at its peak; fractions are fine
  // (a zero-bubble schedule keeps part of an activation between BI and BW). Empty means
  // 1F1B's counts: stage j of k keeps k - j.
  std::vector<double> inflight;
};

namespace detail {
PPSCHED_OUTLINE void check_inflight_sizes(const char* subject, std::int32_t stages, std::int32_t microbatches);
}  // namespace detail

// 1F1B: stage j of `stages` keeps min(stages - j, microbatches) micro-batches in flight.
[[nodiscard]] PPSCHED_OUTLINE std::vector<double> inflight_1f1b(
    std::int32_t stages, std::int32_t microbatches = std::numeric_limits<std::int32_t>::max());

// GPipe (all forwards, then all backwards): every stage keeps every micro-batch.
[[nodiscard]] PPSCHED_OUTLINE std::vector<double> inflight_gpipe(std::int32_t stages, std::int32_t microbatches);

namespace detail {

// Throws, naming the field, unless the model can price `stages` stages.
PPSCHED_OUTLINE void check_partition_cost_model(const PartitionCostModel& c, std::size_t stages);

}  // namespace detail

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/partition/impl/cost_model.ipp"
#endif
