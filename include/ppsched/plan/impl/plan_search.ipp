// The bodies of <ppsched/plan/plan_search.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace plan {

[[nodiscard]] PPSCHED_OUTLINE SearchedPlan search_plan(const PlanModel& model, const PlanRequest& request,
                                              SearchOptions options) {
  SearchedPlan out;
  PlanResult& plan = out.plan;
  plan = detail::start_plan("search_plan", model, request);
  if (request.memory_policy.mode == MemoryPolicyMode::given) {
    // The candidates have p, 2p or 4p stages: a stage index names a different part of the
    // model in each, so per-stage policies belong to one schedule.
    detail::fail({"search_plan", "PlanRequest::memory_policy gives policies per stage, and the search's candidates differ in their stages",
          "PlanRequest::memory_policy.mode",
          "use automatic (the search chooses per candidate), or compare_families with the families named"});
  }
  const bool policies = request.memory_policy.mode == MemoryPolicyMode::automatic &&
                        detail::smallest_byte_cap(request, model).has_value();
  if (policies && request.objective.kind != ObjectiveKind::makespan) {
    detail::fail({"search_plan", detail::concat("memory policies are chosen for the makespan, and the objective is ", to_string(request.objective)),
          "PlanRequest::objective", "use the makespan objective with memory policies, or compare_families"});
  }
  if (policies && request.memory_policy.search_candidates < 1) {
    detail::fail({"search_plan", detail::concat("PlanMemoryPolicy::search_candidates is ", request.memory_policy.search_candidates),
          "PlanRequest::memory_policy.search_candidates", "give at least 1 candidate to price with memory policies"});
  }
  if (policies) (void)detail::host_link_for(request, model);  // a unit it cannot be given in is the request's error
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
  bool plain_found = true;
  detail::SearchWork work;
  std::optional<ScheduleResult> plain_result, with_policies;
  std::int32_t tried = 0;
  try {
    if (!policies) {
      found = search_schedule(problem, options);
    } else {
      std::string no_fit;
      plain_found = detail::run_search(problem, options, found, no_fit, &work);
      // The plain winner's makespan as evaluate_schedule gives it: the policies' figures come
      // from the same evaluation.
      if (plain_found) plain_result = evaluate_schedule(found.schedule, model, partition_for(found.schedule.placement), request);
      const double plain_makespan = plain_result ? plain_result->makespan : std::numeric_limits<double>::infinity();
      with_policies = detail::search_memory_policies(work, model, request, partition_for, plain_makespan, tried);
      if (!plain_found && !with_policies) detail::fail_no_fit(problem, options, no_fit);
    }
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
  if (policies) {
    // The candidates with the notes the policies added (the search's own list moved them out).
    out.search.candidates.clear();
    for (detail::SearchEntry& e : work.entries) out.search.candidates.push_back(std::move(e.candidate));
    for (Candidate& c : work.rejected) out.search.candidates.push_back(std::move(c));
  } else {
    out.search.candidates = found.candidates;
  }
  out.search.why = found.why;
  if (with_policies) {
    const std::string plain_text =
        plain_found ? detail::concat("; the fastest plain candidate that fits, ", found.best().name, ", takes ",
                                     detail::short_number(found.best().makespan))
                    : std::string("; no candidate fits plainly");
    out.search.why = detail::concat(with_policies->name, " with memory policies, makespan ", detail::short_number(with_policies->makespan),
                                    ": the fastest of the ", tried, " candidates over the byte cap priced with policies", plain_text);
    plan.schedules.push_back(std::move(*with_policies));
    plan.recommended.index = 0;
    plan.recommended.reason = out.search.why;
    return out;
  }
  const Partition& partition = partition_for(found.schedule.placement);
  plan.schedules.push_back(plain_result ? std::move(*plain_result) : evaluate_schedule(found.schedule, model, partition, request));
  plan.schedules.back().family = found.best().family;  // nullptr for a greedy schedule
  plan.recommended.index = 0;
  plan.recommended.reason = found.why;
  return out;
}

}  // namespace plan
}  // namespace ppsched
