// The planner's entry to the schedule search (plan/search/search.hpp): instead of comparing the
// fixed families, ask for the fastest schedule that keeps to the caps. The search also builds
// DualPipeV, greedy zero-bubble schedules and V building blocks on every placement, with the
// model cut by the PlanModel for each placement it tries, priced by the same bridge
// (cost_model_of) and held to a byte cap with that cut's static bytes; its winner is then evaluated exactly like a family (evaluate_schedule), so
// it reads like compare_families' results.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/error.hpp"
#include "ppsched/plan/compare.hpp"
#include "ppsched/plan/costs.hpp"
#include "ppsched/plan/model.hpp"
#include "ppsched/schedule/request.hpp"
#include "ppsched/plan/search/memory.hpp"
#include "ppsched/plan/search/search.hpp"
#include "ppsched/plan/detail/plan_search.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace plan {

// What the search considered: every candidate, and its one-line reason for the winner.
struct SearchSummary {
  std::vector<Candidate> candidates;
  std::string why;
};

// A plan made by the search: `plan.schedules` holds the winner alone (plan.recommended points
// at it), or nothing when no candidate keeps to the caps (plan.recommended.reason says what the
// least hungry one needed).
struct SearchedPlan {
  PlanResult plan;
  SearchSummary search;
};

// Plans with the schedule search. Its depths (SearchOptions::chunks) are 1, 2, 4 and
// request.chunks, each where the model has a layer for every virtual stage, and its objective
// is request.objective; the other `options` apply as given. request.families is not used: the
// search chooses. With PlanRequest::memory_policy automatic and a byte cap (the request's or
// the devices'), a candidate over it is priced again with the memory policies
// choose_memory_policies picks for it, as compare_families does, and the fastest plan that
// fits wins, plain or with policies (ScheduleResult::memory says what each stage does);
// detail::search_memory_policies says which candidates are tried. Throws ppsched::error for a
// bad request (given per-stage policies, which name the stages of one schedule; automatic
// policies with an objective other than the makespan), and for bad input the search rejects
// when no cap applies.
[[nodiscard]] PPSCHED_OUTLINE SearchedPlan search_plan(const PlanModel& model, const PlanRequest& request,
                                              SearchOptions options = {});

}  // namespace plan
}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/plan/impl/plan_search.ipp"
#endif
