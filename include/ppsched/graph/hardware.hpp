// The hardware a pipeline runs on, as the partitioner sees it: devices in pipeline order, each
// with a relative speed and a memory cap, joined by one kind of point-to-point interconnect.
// Kept apart from the layer graph so that a profile (graph + hardware) and a cost model can
// share it, and small enough that a planner can build one by hand.
#pragma once

#include "ppsched/config.hpp"

#include <limits>

namespace ppsched::inline PPSCHED_MODE {

// One accelerator. A stage placed on it takes its layers' profiled time divided by `speed`
// (a device twice as fast as the one profiled has speed 2). `memory_bytes` caps what the
// stage may hold; infinity means no cap.
struct Device {
  double speed = 1.0;
  double memory_bytes = std::numeric_limits<double>::infinity();

  friend constexpr bool operator==(const Device&, const Device&) = default;
};

// The link between neighbouring stages. Sending one tensor of `bytes` takes
// latency + bytes / bandwidth, in the profile's time unit; bandwidth is in bytes per time
// unit, and infinity means bytes cost nothing. The simulator's CostModel::link is one too.
struct Interconnect {
  double latency = 0.0;
  double bandwidth = std::numeric_limits<double>::infinity();

  [[nodiscard]] constexpr double transfer_time(double bytes) const noexcept { return latency + bytes / bandwidth; }
  // True when no transfer ever costs anything, so the partitioner can leave communication out.
  [[nodiscard]] constexpr bool is_free() const noexcept {
    return latency == 0.0 && bandwidth == std::numeric_limits<double>::infinity();
  }

  friend constexpr bool operator==(const Interconnect&, const Interconnect&) = default;
};

}  // namespace ppsched
