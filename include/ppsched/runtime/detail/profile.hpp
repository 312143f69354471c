// Internals of <ppsched/runtime/profile.hpp>, which includes this file: the fixed part of a
// simulated step, and the fits that solve it for a measured one. They are in ppsched::detail and
// not part of the API: no example or page uses them, and they may change in any release
// (docs/architecture.md).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/error.hpp"
#include "ppsched/graph/layer_graph.hpp"
#include "ppsched/graph/profile.hpp"
#include "ppsched/graph/rows.hpp"
#include "ppsched/runtime/stage.hpp"
#include "ppsched/runtime/world.hpp"
#include "ppsched/schedule/generators.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/sim/simulate.hpp"
#include "ppsched/trace/stats.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

// The fixed part of the simulated step: the simulator's makespan of `schedule` with every
// stage free and the given fixed costs. The fits below solve it for the measured step.
[[nodiscard]] inline double fixed_cost_makespan(const Schedule& schedule, double action_overhead,
                                                double transfer_overhead) {
  CostModel c = uniform_costs(0.0, 0.0, 0.0);
  c.fixed_costs.action = action_overhead;
  c.fixed_costs.transfer = transfer_overhead;
  return simulate(schedule, c).makespan;
}

// The x >= 0 with f(x) = target for an f that grows with x (bisection; 0 when f(0) >= target).
template <class F>
[[nodiscard]] double solve_increasing(F f, double target) {
  if (f(0.0) >= target) return 0.0;
  double hi = 1.0;
  while (f(hi) < target && hi < 1e12) hi *= 2.0;
  double lo = 0.0;
  for (int i = 0; i < 100 && hi - lo > 1e-12 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (f(mid) < target ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

}  // namespace detail

}  // namespace ppsched
