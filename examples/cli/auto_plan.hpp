// --schedule auto: instead of comparing the fixed families, ask the library's planner to run
// the schedule search (ppsched/plan/plan_search.hpp): the fastest schedule that keeps to the caps,
// evaluated exactly like a family, so the report and the JSON read the same.
#pragma once

#include <utility>

#include "plan.hpp"
#include "plan_options.hpp"
#include "ppsched/plan/plan_search.hpp"

namespace ppsched::cli {
using namespace ppsched::plan;  // the planner library, which these tools only parse for and print

// Plans with the schedule search: PlanResult::schedules holds the winner alone, and `summary`
// every candidate. When nothing keeps to the cap, nothing is recommended and the reason says
// what the least hungry candidate needed.
[[nodiscard]] inline PlanResult make_auto_plan(const PlanOptions& options, const PlanModel& model,
                                               SearchSummary& summary) {
  SearchedPlan found = search_plan(model, plan_request(options));
  summary = std::move(found.search);
  return std::move(found.plan);
}

}  // namespace ppsched::cli
