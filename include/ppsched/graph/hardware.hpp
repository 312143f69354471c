// The hardware a pipeline runs on, as the partitioner sees it: devices in pipeline order, each
// with a relative speed and a memory cap, joined by one kind of point-to-point interconnect;
// and what the runtime on it costs besides the layers (FixedCosts). Kept apart from the layer
// graph so that a profile (graph + hardware) and a cost model can share it, and small enough
// that a planner can build one by hand.
#pragma once

#include "ppsched/config.hpp"

#include <limits>
#include <vector>

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

// What the runtime costs on top of the layers' own times, in the time unit of the value that
// holds it (Profile, CostModel, plan::PlanModel, plan::PlanCostOptions,
// profiling::BackendOverheads: one type, copied whole): every compute action pays `action`,
// every transfer `transfer`, every step `step` once (in the makespan, not in any action's
// span), and while k ranks compute at once on one host each compute runs
// `concurrent_slowdown[k-1]` times slower (entry 0 is 1; empty: ranks never slow each other).
// Measured by profiling::measure_backend_overheads and measure_concurrent_slowdown; a
// profile's JSON keeps them as action_overhead, transfer_overhead, step_overhead and
// concurrent_slowdown, and CostModel::fixed_costs says how the simulator prices each.
struct FixedCosts {
  double action = 0.0;
  double transfer = 0.0;
  double step = 0.0;
  std::vector<double> concurrent_slowdown{};

  friend bool operator==(const FixedCosts&, const FixedCosts&) = default;
};

}  // namespace ppsched
