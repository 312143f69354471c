// Internals of <ppsched/plan/plan_search.hpp>, which includes this file: the interleaving depths
// search_plan tries, the caps in the search's terms, and the search again with memory policies
// over a byte cap. They are in ppsched::detail and not part of the API: no example or page uses
// them, and they may change in any release (docs/architecture.md).
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
#include "ppsched/plan/search/memory.hpp"
#include "ppsched/plan/search/search.hpp"
#include "ppsched/schedule/request.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace detail {

// Interleaving depths worth trying: 2 (the V and two looped chunks), 4, and the request's,
// each only when the model has a layer for every virtual stage.
[[nodiscard]] inline std::vector<std::int32_t> search_depths(const plan::PlanRequest& request, const plan::PlanModel& model) {
  std::vector<std::int32_t> depths{1};
  for (const std::int32_t v : {2, 4, request.chunks}) {
    const bool fills =
        model.layers == 0 || static_cast<std::size_t>(request.ranks) * static_cast<std::size_t>(v) <= model.layers;
    if (v > 1 && fills && std::find(depths.begin(), depths.end(), v) == depths.end()) depths.push_back(v);
  }
  return depths;
}

// The caps in the search's terms: the request's and the devices', whichever is lower, per rank
// where either gives a byte limit (infinity where neither applies). search_plan gives the
// search each placement's static bytes, which it takes off the total limits.
[[nodiscard]] inline plan::MemoryCap search_cap(const plan::PlanRequest& request, const plan::PlanModel& model) {
  const plan::MemoryCap& a = request.cap;
  const plan::MemoryCap& d = model.device_cap;
  plan::MemoryCap cap;
  cap.microbatches = std::min(a.microbatches, d.microbatches);
  cap.activation_bytes = std::min(a.activation_bytes, d.activation_bytes);
  const auto ranks = static_cast<std::size_t>(request.ranks);
  if (!a.rank_activation_bytes.empty() || !d.rank_activation_bytes.empty()) {
    for (std::size_t r = 0; r < ranks; ++r) {
      cap.rank_activation_bytes.push_back(std::min(a.activation_bytes_of(static_cast<std::int32_t>(r)), d.activation_bytes_of(static_cast<std::int32_t>(r))));
    }
  }
  if (!std::isinf(a.total_bytes) || !std::isinf(d.total_bytes) || !a.rank_total_bytes.empty() || !d.rank_total_bytes.empty()) {
    for (std::size_t r = 0; r < ranks; ++r) {
      cap.rank_total_bytes.push_back(std::min(a.total_bytes_of(static_cast<std::int32_t>(r)), d.total_bytes_of(static_cast<std::int32_t>(r))));
    }
  }
  return cap;
}

}  // namespace detail
namespace detail {

// search_plan's memory policies (PlanMemoryPolicy automatic, makespan objective): the search's
// candidates over the byte cap whose M_B keep to the M_B cap (on a placement whose parameters
// alone break the cap, one stage per rank only), best bound first, each priced as
// compare_families prices a family (priced_with_memory_policy: the ladder of every stage,
// choose_memory_policies, the cut made again under the cap where the last rung was needed),
// while its bound is below the fastest makespan found (a policy only adds work, so the plain
// bound bounds it too), at most PlanMemoryPolicy::search_candidates of them. Each one tried has
// its note say what the policies gave. The fastest that fits, or nothing.
[[nodiscard]] inline std::optional<plan::ScheduleResult> search_memory_policies(SearchWork& work, const plan::PlanModel& model,
                                                                          const plan::PlanRequest& request, PartitionCache& partition_for,
                                                                          double plain_makespan, std::int32_t& tried) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < work.entries.size(); ++i) {
    const SearchEntry& e = work.entries[i];
    const bool units_fit =
        e.candidate.peak_microbatches <= std::min(request.cap.microbatches, model.device_cap.microbatches) + plan::memory_slack;
    // A placement whose static bytes alone break the cap is tried on one stage per rank only,
    // where the model may be cut again under the cap (priced_with_memory_policy).
    const SearchPlacement& at = work.placements[e.placement];
    const bool usable = at.unusable.empty() || at.kind == PlacementKind::one_per_rank;
    if (e.candidate.built && !e.candidate.fits && units_fit && usable) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return work.entries[a].candidate.bound < work.entries[b].candidate.bound; });
  std::optional<plan::ScheduleResult> best;
  double best_makespan = plain_makespan;
  Workspace ws;
  tried = 0;
  for (const std::size_t i : order) {
    SearchEntry& e = work.entries[i];
    if (tried >= request.memory_policy.search_candidates) break;
    if (!(e.candidate.bound < best_makespan * (1.0 - 1e-9))) break;  // neither it nor any after it is faster
    ++tried;
    const Partition& cut = partition_for(work.placements[e.placement].placement);
    plan::ScheduleResult plain = plan::evaluate_schedule(e.schedule, model, cut, request, ws);
    plain.family = e.candidate.family;
    if (!plain.valid || !plain.training) continue;
    plan::ScheduleResult r = priced_with_memory_policy(std::move(plain), model, cut, request, ws);
    if (!r.memory) {
      e.candidate.note += "; no memory policy makes it fit";
      continue;
    }
    e.candidate.note += detail::concat("; with memory policies: makespan ", short_number(r.makespan), r.fits ? ", fits" : ", does not fit");
    if (r.fits && r.makespan < best_makespan) {
      best_makespan = r.makespan;
      best = std::move(r);
    }
  }
  return best;
}

}  // namespace detail
}  // namespace ppsched
