// --schedule auto: instead of comparing the fixed families, ask ppsched's schedule search
// (ppsched/search/search.hpp) for the fastest schedule that keeps to the memory cap. The
// search also builds DualPipeV and greedy zero-bubble schedules on every placement, with
// the model cut by the same partitioner for each placement it tries; its winner is then
// evaluated exactly like a family, so the report and the JSON read the same.
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

#include "plan.hpp"
#include "plan_options.hpp"
#include "ppsched/error.hpp"
#include "ppsched/schedule/request.hpp"
#include "ppsched/search/memory.hpp"
#include "ppsched/search/search.hpp"

namespace ppsched::cli {

// What the search considered, for the report and the JSON.
struct SearchSummary {
  std::vector<Candidate> candidates;
  std::string why;
};

namespace detail {

// Interleaving depths worth trying: 2 (the V and two looped chunks), 4, and --chunks, each
// only when the model has a layer for every virtual stage.
[[nodiscard]] inline std::vector<std::int32_t> search_depths(const PlanOptions& options, const PlanModel& model) {
  std::vector<std::int32_t> depths{1};
  for (const std::int32_t v : {2, 4, options.chunks}) {
    const bool fills = model.layers == 0 || static_cast<std::size_t>(options.stages) * static_cast<std::size_t>(v) <= model.layers;
    if (v > 1 && fills && std::find(depths.begin(), depths.end(), v) == depths.end()) depths.push_back(v);
  }
  return depths;
}

// The caps in the search's terms. The search caps activation bytes; a byte cap here covers
// parameters too, so each rank's parameters (as the one-stage-per-rank cut places them) are
// taken off it first.
[[nodiscard]] inline MemoryCap search_cap(const PlanOptions& options, const PlanModel& model,
                                          const PartitionPlan& one_per_rank) {
  MemoryCap cap;
  if (options.memory_cap_microbatches) cap.microbatches = *options.memory_cap_microbatches;
  const bool any_bytes = options.memory_cap_bytes || !model.rank_memory_cap.empty();
  if (any_bytes) {
    const std::vector<double> fixed = static_bytes_per_rank(one_per_rank, options.stages);
    for (std::size_t r = 0; r < fixed.size(); ++r) {
      double limit = options.memory_cap_bytes.value_or(std::numeric_limits<double>::infinity());
      if (r < model.rank_memory_cap.size()) limit = std::min(limit, model.rank_memory_cap[r]);
      cap.rank_bytes.push_back(std::max(0.0, limit - fixed[r]));
    }
  }
  return cap;
}

}  // namespace detail

// Plans with the schedule search: PlanResult::schedules holds the winner alone (evaluated
// like any family, so its fit is judged with this planner's own memory rule), and `summary`
// every candidate. When nothing keeps to the cap, nothing is recommended and the reason says
// what the least hungry candidate needed.
[[nodiscard]] inline PlanResult make_auto_plan(const PlanOptions& options, const PlanModel& model,
                                               SearchSummary& summary) {
  PlanResult plan;
  plan.model = model.description;
  plan.unit = model.unit;
  plan.ranks = options.stages;
  plan.microbatches = options.microbatches;
  plan.chunks = options.chunks;
  plan.memory_cap_microbatches = options.memory_cap_microbatches;
  plan.memory_cap_bytes = options.memory_cap_bytes;
  plan.rank_memory_cap = model.rank_memory_cap;

  std::map<std::vector<std::int32_t>, PartitionPlan> partitions;
  const auto partition_for = [&](std::span<const std::int32_t> placement) -> const PartitionPlan& {
    std::vector<std::int32_t> key(placement.begin(), placement.end());
    auto it = partitions.find(key);
    if (it == partitions.end()) it = partitions.emplace(key, model.partition(key)).first;
    return it->second;
  };
  plan.partition = partition_for(one_stage_per_rank_placement(options.stages));

  SearchProblem problem;
  problem.ranks = options.stages;
  problem.microbatches = options.microbatches;
  problem.costs = [&](std::span<const std::int32_t> placement) {
    return detail::cost_model_of(partition_for(placement), model, options.w_memory_ratio);
  };
  problem.cap = detail::search_cap(options, model, plan.partition);
  SearchOptions search;
  search.chunks = detail::search_depths(options, model);

  SearchResult found;
  try {
    found = search_schedule(problem, search);
  } catch (const ppsched::error& e) {
    if (problem.cap.unlimited()) throw;  // not a memory problem: bad input
    plan.recommended.reason = e.what();
    return plan;
  }
  summary.candidates = found.candidates;
  summary.why = found.why;
  const Candidate& best = found.best();
  const PartitionPlan& partition = partition_for(found.schedule.placement);
  ScheduleResult result = evaluate_schedule(found.schedule, model, partition, plan, options.w_memory_ratio, best.chunks,
                                            detail::static_bytes_per_rank(partition, options.stages));
  plan.schedules.push_back(std::move(result));
  plan.recommended.index = 0;
  plan.recommended.reason = found.why;
  return plan;
}

}  // namespace ppsched::cli
