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

namespace ppsched::inline PPSCHED_MODE {

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

namespace detail {

// Interleaving depths worth trying: 2 (the V and two looped chunks), 4, and the request's,
// each only when the model has a layer for every virtual stage.
[[nodiscard]] inline std::vector<std::int32_t> search_depths(const PlanRequest& request, const PlanModel& model) {
  std::vector<std::int32_t> depths{1};
  for (const std::int32_t v : {2, 4, request.chunks}) {
    const bool fills =
        model.layers == 0 || static_cast<std::size_t>(request.ranks) * static_cast<std::size_t>(v) <= model.layers;
    if (v > 1 && fills && std::find(depths.begin(), depths.end(), v) == depths.end()) depths.push_back(v);
  }
  return depths;
}

// The caps in the search's terms: M_B as given; per rank, a total limit (static plus activation
// bytes): the byte cap and the device's, whichever is lower (infinity where neither applies).
// search_plan gives the search each placement's static bytes, which it takes off these.
[[nodiscard]] inline MemoryCap search_cap(const PlanRequest& request, const PlanModel& model) {
  MemoryCap cap;
  if (request.cap.microbatches) cap.microbatches = *request.cap.microbatches;
  if (request.cap.total_bytes || !model.rank_memory_cap.empty()) {
    for (std::size_t r = 0; r < static_cast<std::size_t>(request.ranks); ++r) {
      double limit = request.cap.total_bytes.value_or(std::numeric_limits<double>::infinity());
      if (r < model.rank_memory_cap.size()) limit = std::min(limit, model.rank_memory_cap[r]);
      cap.rank_total_bytes.push_back(limit);
    }
  }
  return cap;
}

}  // namespace detail

// Plans with the schedule search. Its depths (SearchOptions::chunks) are 1, 2, 4 and
// request.chunks, each where the model has a layer for every virtual stage, and its objective
// is request.objective; the other `options` apply as given. request.families is not used: the search chooses. Throws ppsched::error for a bad request,
// and for bad input the search rejects when no cap applies.
[[nodiscard]] PPSCHED_OUTLINE SearchedPlan search_plan(const PlanModel& model, const PlanRequest& request,
                                              SearchOptions options = {})
#if PPSCHED_OUTLINE_BODY
{
  SearchedPlan out;
  PlanResult& plan = out.plan;
  plan = detail::start_plan("search_plan", model, request);
  if (request.memory_policy.mode != MemoryPolicyMode::none) {
    // The search prices thousands of candidates; choosing policies for each is not built yet.
    fail({"search_plan", "PlanRequest::memory_policy is not none", "PlanRequest::memory_policy.mode",
          "use compare_families for memory policies, or leave the mode none"});
  }
  detail::PartitionCache partition_for(model);
  plan.partition = partition_for(one_stage_per_rank_placement(request.ranks));

  SearchProblem problem;
  problem.ranks = request.ranks;
  problem.microbatches = request.microbatches;
  problem.costs = [&](std::span<const std::int32_t> placement) {
    return cost_model_of(partition_for(placement), plan_cost_options(model, request.weight_memory_fraction));
  };
  problem.cap = detail::search_cap(request, model);
  if (!problem.cap.rank_total_bytes.empty()) {
    // Each placement's own static bytes: a V puts the first and the last chunk on rank 0, so
    // rank 0 holds other parameters than with one stage per rank.
    problem.static_bytes = [&](std::span<const std::int32_t> placement) {
      return static_bytes_per_rank(partition_for(placement), request.ranks);
    };
  }
  options.chunks = detail::search_depths(request, model);
  options.objective = request.objective;

  SearchResult found;
  try {
    found = search_schedule(problem, options);
  } catch (const error& e) {
    // Not a memory or time problem: bad input.
    const bool timed = request.objective.kind == ObjectiveKind::memory && !std::isinf(request.objective.makespan_bound);
    if (problem.cap.unlimited() && !timed) throw;
    plan.recommended.reason = e.what();
    // Parameters that alone break the cap are the plainer reason.
    const std::vector<double> fixed = static_bytes_per_rank(plan.partition, request.ranks);
    for (std::size_t r = 0; r < fixed.size() && r < problem.cap.rank_total_bytes.size(); ++r) {
      if (fixed[r] >= problem.cap.rank_total_bytes[r]) {
        plan.recommended.reason =
            detail::concat("no schedule fits the memory cap: the parameters with optimizer state alone need ",
                           bytes_text(fixed[r]), " on rank ", r, " with one stage per rank > cap ",
                           bytes_text(problem.cap.rank_total_bytes[r]));
        break;
      }
    }
    return out;
  }
  out.search.candidates = found.candidates;
  out.search.why = found.why;
  const PartitionPlan& partition = partition_for(found.schedule.placement);
  plan.schedules.push_back(evaluate_schedule(found.schedule, model, partition, request));
  plan.schedules.back().family = found.best().family;  // nullptr for a greedy schedule
  plan.recommended.index = 0;
  plan.recommended.reason = found.why;
  return out;
}
#else
;
#endif

}  // namespace ppsched
