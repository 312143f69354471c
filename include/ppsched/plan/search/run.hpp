// The schedule search itself: detail::run_search builds every candidate, bounds, simulates
// and ranks them, and search_schedule is its public form (search.hpp's comment describes it).
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/lower/lower.hpp"
#include "ppsched/plan/objective.hpp"
#include "ppsched/schedule/controllable_memory.hpp"
#include "ppsched/schedule/dualpipev.hpp"
#include "ppsched/schedule/generators.hpp"
#include "ppsched/schedule/request.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/sim/simulate.hpp"
#include "ppsched/validate/validate.hpp"
#include "ppsched/plan/search/costs.hpp"
#include "ppsched/plan/search/dependency_run.hpp"
#include "ppsched/plan/search/greedy.hpp"
#include "ppsched/plan/search/memory.hpp"
#include "ppsched/plan/search/detail/candidates.hpp"
#include "ppsched/plan/search/problem.hpp"
#include "ppsched/plan/search/detail/ranking.hpp"
#include "ppsched/plan/search/detail/run.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace plan {

// Searches schedules for `problem` (see the header comment) and returns the fastest one that
// keeps to the cap (or the best by SearchOptions::objective). Throws ppsched::error for unusable
// input (sizes, a cap that is not positive, costs that do not fit a placement — the message
// names the placement) and when no candidate keeps to the cap (the message gives the least
// memory any candidate needed) or, by memory, none that does finishes within the bound.
[[nodiscard]] inline SearchResult search_schedule(const SearchProblem& problem, const SearchOptions& options = {}) {
  SearchResult result;
  std::string no_fit;
  if (!detail::run_search(problem, options, result, no_fit)) detail::fail_no_fit(problem, options, no_fit);
  return result;
}

}  // namespace plan
}  // namespace ppsched
