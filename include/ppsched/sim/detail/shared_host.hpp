// Internals of <ppsched/sim/simulate.hpp>: ranks that slow each other down on one host
// (CostModel::fixed_costs.concurrent_slowdown). They are in ppsched::detail and not part of the API.
//
// Ranks that share cores run each compute action at a rate that depends on how many ranks
// compute at the same moment: processor sharing. The abstract execution takes one duration per
// action, so the simulator reaches the shared-rate times by a fixed point: run, give each
// compute action the mean slowdown over its interval in that run (the count of ranks computing
// at each instant, its own rank included), run again with its time multiplied by that factor,
// until no factor moves. Every factor is >= 1 and the order of every rank is fixed, so no
// action starts earlier than in the run without sharing: the dependency-only run stays a lower
// bound (the search relies on it).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/engine/abstract_execution.hpp"
#include "ppsched/engine/detail/flat_schedule.hpp"
#include "ppsched/schedule/action.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

// How many times longer a compute action takes while k >= 1 ranks compute.
[[nodiscard]] inline double concurrent_factor(const std::vector<double>& slowdown, std::int32_t k) {
  if (slowdown.empty() || k < 1) return 1.0;
  const auto K = static_cast<std::int32_t>(slowdown.size());
  if (k <= K) return slowdown[static_cast<std::size_t>(k - 1)];
  return slowdown.back() * static_cast<double>(k) / static_cast<double>(K);  // saturated: shared in proportion
}

// Whether a schedule on `ranks` ranks can be slowed by sharing at all.
[[nodiscard]] inline bool shares_host(const std::vector<double>& slowdown, std::int32_t ranks) {
  if (slowdown.empty() || ranks < 1) return false;
  for (std::int32_t k = 1; k <= ranks; ++k) {
    if (concurrent_factor(slowdown, k) != 1.0) return true;
  }
  return false;
}

// The curve one replica's pipeline of `ranks` ranks sees when `replicas` replicas share the
// host: its replicas run the same schedule in step, so while k of its ranks compute, k x
// replicas do.
[[nodiscard]] inline std::vector<double> replicated_slowdown(const std::vector<double>& slowdown, std::int32_t ranks,
                                                             std::int32_t replicas) {
  if (slowdown.empty() || replicas <= 1) return slowdown;
  std::vector<double> out;
  for (std::int32_t k = 1; k <= ranks; ++k) out.push_back(concurrent_factor(slowdown, k * replicas));
  return out;
}

// How many ranks compute at each moment, from their compute intervals (one per rank at a
// time), and the mean slowdown over any interval: the integral of the slowdown over the counts.
// Shared by the simulator's fixed point and by calibration, which divides a measured span by
// the slowdown the other ranks' measured spans put on it.
class SharedHostLoad {
 public:
  void clear() { events_.clear(); }
  void add(double start, double end) {
    if (!(end > start)) return;
    events_.emplace_back(start, 1);
    events_.emplace_back(end, -1);
  }
  // The counts over time, and their slowdown's integral (sim/impl/simulate.ipp).
  PPSCHED_OUTLINE void build(const std::vector<double>& slowdown);
  // The mean over [start, end], both times of intervals added; `otherwise` for an empty one.
  [[nodiscard]] double mean(double start, double end, double otherwise) const {
    if (!(end > start) || times_.empty()) return otherwise;
    return (at(end) - at(start)) / (end - start);
  }

 private:
  [[nodiscard]] double at(double t) const {
    const auto i = static_cast<std::size_t>(std::lower_bound(times_.begin(), times_.end(), t) - times_.begin());
    return integral_[std::min(i, integral_.size() - 1)];
  }
  std::vector<std::pair<double, std::int32_t>> events_;
  std::vector<double> times_, integral_;
};

// One step of the fixed point: from `run`'s compute intervals, each compute action's mean
// slowdown over its interval, written to `factor` (one per flat action; 1 for communication
// and copies) with damping after the first step. Returns the largest change of a factor.
PPSCHED_OUTLINE double update_shared_factors(const FlatSchedule& flat, const AbstractExecution& run,
                                    const std::vector<double>& slowdown, std::vector<double>& factor, bool first,
                                    SharedHostLoad& load);

}  // namespace detail

}  // namespace ppsched
