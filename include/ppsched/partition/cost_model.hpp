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
inline void check_inflight_sizes(const char* subject, std::int32_t stages, std::int32_t microbatches) {
  if (stages < 0 || microbatches < 0) {
    fail({subject, concat(stages, " stages and ", microbatches, " micro-batches"), stages < 0 ? "stages" : "microbatches",
          "give counts >= 0"});
  }
}
}  // namespace detail

// 1F1B: stage j of `stages` keeps min(stages - j, microbatches) micro-batches in flight.
[[nodiscard]] inline std::vector<double> inflight_1f1b(
    std::int32_t stages, std::int32_t microbatches = std::numeric_limits<std::int32_t>::max()) {
  detail::check_inflight_sizes("inflight_1f1b", stages, microbatches);
  std::vector<double> counts(static_cast<std::size_t>(stages));
  for (std::int32_t j = 0; j < stages; ++j) {
    counts[static_cast<std::size_t>(j)] = static_cast<double>(std::min(stages - j, microbatches));
  }
  return counts;
}

// GPipe (all forwards, then all backwards): every stage keeps every micro-batch.
[[nodiscard]] inline std::vector<double> inflight_gpipe(std::int32_t stages, std::int32_t microbatches) {
  detail::check_inflight_sizes("inflight_gpipe", stages, microbatches);
  return std::vector<double>(static_cast<std::size_t>(stages), static_cast<double>(microbatches));
}

namespace detail {

// Throws, naming the field, unless the model can price `stages` stages.
inline void check_partition_cost_model(const PartitionCostModel& c, std::size_t stages) {
  const std::string subject = "partition cost model";
  if (c.devices.size() > 1 && c.devices.size() != stages) {
    fail({subject, concat("lists ", c.devices.size(), " devices for ", stages, " stages"), "devices",
          "give one device per stage (in pipeline order), a single device for all stages, or none"});
  }
  for (std::size_t d = 0; d < c.devices.size(); ++d) {
    const Device& dev = c.devices[d];
    if (!(dev.speed > 0.0 && dev.speed <= std::numeric_limits<double>::max())) {
      fail({subject, concat("device ", d, " has speed ", dev.speed), concat("devices[", d, "].speed"),
            "a speed is a finite number > 0 (1 = as fast as the device the layers were profiled on)"});
    }
    if (!(dev.memory_bytes >= 0.0)) {
      fail({subject, concat("device ", d, " has memory cap ", dev.memory_bytes), concat("devices[", d, "].memory_bytes"),
            "a memory cap is a number of bytes >= 0, or infinity for no cap"});
    }
  }
  if (!(c.link.latency >= 0.0 && c.link.latency <= std::numeric_limits<double>::max())) {
    fail({subject, concat("link latency is ", c.link.latency), "link.latency", "a latency is a finite time >= 0"});
  }
  if (!(c.link.bandwidth > 0.0)) {
    fail({subject, concat("link bandwidth is ", c.link.bandwidth), "link.bandwidth",
          "a bandwidth is bytes per time unit > 0, or infinity for free bytes"});
  }
  if (!(c.optimizer_state_factor >= 0.0 && c.optimizer_state_factor <= std::numeric_limits<double>::max())) {
    fail({subject, concat("optimizer_state_factor is ", c.optimizer_state_factor), "optimizer_state_factor",
          "give the finite number of bytes held per parameter byte, >= 0 (1 = weights only)"});
  }
  if (!c.inflight.empty() && c.inflight.size() != stages) {
    fail({subject, concat("lists in-flight counts for ", c.inflight.size(), " stages, but there are ", stages), "inflight",
          "give one count per stage, or none for 1F1B's counts"});
  }
  for (std::size_t j = 0; j < c.inflight.size(); ++j) {
    if (!(c.inflight[j] >= 0.0 && c.inflight[j] <= std::numeric_limits<double>::max())) {
      fail({subject, concat("stage ", j, " keeps ", c.inflight[j], " micro-batches in flight"), concat("inflight[", j, "]"),
            "an in-flight count is a finite number >= 0"});
    }
  }
}

}  // namespace detail

}  // namespace ppsched
