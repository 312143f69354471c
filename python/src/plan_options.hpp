// What the planner's bindings share: the objective and the schedule search's settings from
// Python keywords (bind_plan.cpp's plan and search_plan, bind_search.cpp's search_schedule,
// bind_varlen.cpp's plan_microbatches). A keyword left as None keeps the C++ default of the
// function called, which differs: plan_microbatches searches less than search_schedule so
// that a step's plan stays within about a millisecond (plan/varlen.hpp, StepPlanOptions).
#pragma once

#include "common.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/plan/objective.hpp"
#include "ppsched/plan/search/problem.hpp"

namespace ppsched_py {

inline ppsched::plan::Objective objective_of(const std::string& name, double makespan_bound) {
  namespace pl = ppsched::plan;
  pl::Objective o;
  o.makespan_bound = makespan_bound;
  if (name == "makespan") {
    o.kind = pl::ObjectiveKind::makespan;
  } else if (name == "span") {
    o.kind = pl::ObjectiveKind::span;
  } else if (name == "memory") {
    o.kind = pl::ObjectiveKind::memory;
  } else {
    ppsched::detail::fail({"plan", ppsched::detail::concat("unknown objective '", name, "'"), "objective",
                   "use 'makespan', 'span' or 'memory'"});
  }
  return o;
}

// The search's knobs as Python passes them; None: `base`'s value.
struct SearchKnobs {
  std::optional<std::vector<std::int32_t>> chunks;
  std::optional<bool> fixed_families, greedy, dualpipev, v_blocks, split_backward, comm_on_compute_stream;
  std::optional<double> fb_overlap;
  std::optional<std::int32_t> max_simulations;

  [[nodiscard]] ppsched::plan::SearchOptions applied_to(ppsched::plan::SearchOptions base) const {
    if (chunks) base.chunks = *chunks;
    if (fixed_families) base.fixed_families = *fixed_families;
    if (greedy) base.greedy = *greedy;
    if (dualpipev) base.dualpipev = *dualpipev;
    if (v_blocks) base.v_blocks = *v_blocks;
    if (split_backward) base.split_backward = *split_backward;
    if (comm_on_compute_stream) base.comm_on_compute_stream = *comm_on_compute_stream;
    if (fb_overlap) base.fb_overlap = *fb_overlap;
    if (max_simulations) base.max_simulations = *max_simulations;
    return base;
  }
};

}  // namespace ppsched_py
