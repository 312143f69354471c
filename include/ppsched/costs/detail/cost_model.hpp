// Internals of <ppsched/costs/cost_model.hpp>: the cost model's checks and the per-action prices.
// They are in ppsched::detail and not part of the API: no example or page uses them, and they may
// change in any release (docs/architecture.md).
//
// They build on the part's types, which <ppsched/costs/cost_model_types.hpp> holds.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/costs/cost_model_types.hpp"
#include "ppsched/error.hpp"
#include "ppsched/graph/hardware.hpp"
#include "ppsched/schedule/action.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

// One wording for the three places that check weight_memory_fraction (the cost model, the
// planner's cost options and its request).
inline constexpr const char* weight_memory_fraction_hint =
    "give what a BI keeps for its BW per stored activation, 0 or more (0.5 by default; above 1 "
    "where BI holds more than its F left, as the libtorch adapter's does)";

PPSCHED_OUTLINE void check_cost_value(double v, const std::string& where, bool positive = false);

PPSCHED_OUTLINE void check_stage_cost(const StageCost& c, const std::string& where);

// Shared by the cost model, the planner's cost options and the profile, which carry it.
inline void check_concurrent_slowdown(const std::vector<double>& s, const char* what, const std::string& where) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (!(s[i] >= 1.0 && s[i] <= std::numeric_limits<double>::max())) {
      detail::fail({what, detail::concat("concurrent_slowdown[", i, "] is ", s[i]), detail::concat(where, "[", i, "]"),
            "give how many times longer a compute action takes while i + 1 ranks compute at once: a finite "
            "factor >= 1 (1: no slowdown)"});
    }
  }
}

// Options made for one schedule's sizes, used on another's, would read past the tables.
PPSCHED_OUTLINE void check_fits(const Action& a, std::int32_t stages, std::int32_t microbatches);

// The largest time or size of one StageCost, and its field name.
PPSCHED_OUTLINE void note_largest(const StageCost& c, const std::string& where, double& largest, std::string& largest_where);

// A makespan is at most the sum of every action's time, and the statistics multiply it by
// the rank count (at most the stage count); activation bytes add up over the stored
// micro-batches. Finite costs whose sums are not finite doubles would make lower() order by
// infinite times and the simulator reject its own lowering, so they are rejected here.
PPSCHED_OUTLINE void check_cost_sums(const CostModel& c, std::int32_t stages, std::int32_t microbatches);

}  // namespace detail

}  // namespace ppsched

