// Internals of <ppsched/plan/search/run.hpp>, which includes this file: the search's steps: what
// it built (every placement with its costs, every schedule with its figures) and how it gets
// there. They are in ppsched::detail and not part of the API: no example or page uses them, and
// they may change in any release (docs/architecture.md).
#pragma once

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

#include "ppsched/config.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/error.hpp"
#include "ppsched/lower/lower.hpp"
#include "ppsched/plan/objective.hpp"
#include "ppsched/plan/search/costs.hpp"
#include "ppsched/plan/search/dependency_run.hpp"
#include "ppsched/plan/search/detail/candidates.hpp"
#include "ppsched/plan/search/detail/ranking.hpp"
#include "ppsched/plan/search/greedy.hpp"
#include "ppsched/plan/search/memory.hpp"
#include "ppsched/plan/search/problem.hpp"
#include "ppsched/schedule/controllable_memory.hpp"
#include "ppsched/schedule/dualpipev.hpp"
#include "ppsched/schedule/generators.hpp"
#include "ppsched/schedule/request.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/sim/simulate.hpp"
#include "ppsched/validate/validate.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace detail {

// What the search built, for a caller that goes on from its candidates (search_plan prices
// the ones over the byte cap again with memory policies): every placement with its costs, and
// every built schedule with its figures.
struct SearchWork {
  std::vector<SearchPlacement> placements;
  std::vector<SearchEntry> entries;
  std::vector<plan::Candidate> rejected;  // never built, with the reason
};

// The search; false with `no_fit` set when no candidate keeps to the cap. `work`, when given,
// gets what was built, whether a candidate fits or not.
PPSCHED_OUTLINE bool run_search(const plan::SearchProblem& problem, const plan::SearchOptions& options, plan::SearchResult& result,
                       std::string& no_fit, SearchWork* work = nullptr);

// The error search_schedule throws when run_search finds no candidate within the cap.
[[noreturn]] inline void fail_no_fit(const plan::SearchProblem& problem, const plan::SearchOptions& options, const std::string& no_fit) {
  detail::fail({"schedule search",
        detail::concat("no schedule keeps to the memory cap (", cap_text(problem.cap, static_cast<bool>(problem.static_bytes)), ")",
               options.objective.kind == plan::ObjectiveKind::memory && !std::isinf(options.objective.makespan_bound)
                   ? detail::concat(" and finishes within makespan ", short_number(options.objective.makespan_bound))
                   : std::string()),
        detail::concat("p=", problem.ranks, ", m=", problem.microbatches), no_fit});
}

}  // namespace detail
}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/plan/search/impl/detail_run.ipp"
#endif
