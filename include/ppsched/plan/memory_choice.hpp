// The planner's choice of memory policies (issue 23, item 2): for one schedule and cost model,
// the per-stage policies (plan/memory_policy.hpp) under which every rank's peak memory —
// its static bytes (parameters, gradients, optimizer state: no activation policy moves them)
// plus its activations over the simulated time — fits a cap, at the least step time the
// greedy search below finds.
//
//   MemoryChoice c = choose_memory_policies(schedule, costs, static_bytes_per_rank(cut, p), 21 * GiB);
//   if (c.fits) simulate(c.plan.schedule, c.plan.costs);
//
// The search: every stage starts with no policy; while a rank is over the cap, each stage of
// the fullest rank tries the next policy of the ladder (by default offload half, offload all,
// recompute half, recompute all), and the try with the least step time that lowers that rank's
// peak is kept (ties: the lower peak). It stops when every rank fits or no step of the ladder
// lowers the fullest rank; each try is one apply_memory_policies and one simulate.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "ppsched/costs/cost_model.hpp"
#include "ppsched/error.hpp"
#include "ppsched/plan/memory_policy.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/sim/simulate.hpp"

namespace ppsched::inline PPSCHED_MODE {

struct MemoryChoiceOptions {
  // The policies a stage may take, from the least to the most memory saved; each stage climbs
  // it one step at a time.
  std::vector<MemoryPolicy> ladder{MemoryPolicy::offload(0.5), MemoryPolicy::offload(1.0), MemoryPolicy::selective(0.5),
                                   MemoryPolicy::full_recompute()};
  // A ladder per stage, where a stage has options of its own (a profile's "recompute this part:
  // saves X bytes, costs Y", as MemoryPolicy::selective_part); empty, or one per stage, an
  // empty one taking `ladder`.
  std::vector<std::vector<MemoryPolicy>> stage_ladders{};
  MemoryPolicyOptions placement{};
};

struct MemoryChoice {
  MemoryPlan plan;                 // the schedule with its memory actions, the costs, the policies
  double makespan = 0.0;           // simulated step time of plan.schedule
  std::vector<double> peak_bytes;  // per rank: static bytes + the activations' peak over time
  bool fits = false;               // every rank within the cap
  std::int32_t tries = 0;          // simulations run
};

// See the header comment. `static_bytes`: one per rank of the schedule (empty: none).
[[nodiscard]] inline MemoryChoice choose_memory_policies(const Schedule& schedule, const CostModel& costs,
                                                         std::span<const double> static_bytes, double cap_bytes,
                                                         const MemoryChoiceOptions& options = {}) {
  using detail::concat;
  const std::int32_t S = schedule.stages();
  if (!static_bytes.empty() && static_bytes.size() != static_cast<std::size_t>(schedule.ranks)) {
    fail({"choose_memory_policies", concat("has ", static_bytes.size(), " static sizes for ", schedule.ranks, " ranks"), "",
          "give one static byte count per rank (static_bytes_per_rank), or none"});
  }
  if (!(cap_bytes > 0.0)) {
    fail({"choose_memory_policies", concat("cap ", cap_bytes, " bytes"), "", "give a positive memory cap per rank"});
  }
  if (!options.stage_ladders.empty() && options.stage_ladders.size() != static_cast<std::size_t>(S)) {
    fail({"choose_memory_policies", concat("has ", options.stage_ladders.size(), " stage ladders for ", S, " stages"),
          "MemoryChoiceOptions::stage_ladders", "give one ladder per stage (an empty one takes `ladder`), or none"});
  }
  const auto ladder_of = [&options](std::int32_t s) -> const std::vector<MemoryPolicy>& {
    const auto si = static_cast<std::size_t>(s);
    return options.stage_ladders.empty() || options.stage_ladders[si].empty() ? options.ladder : options.stage_ladders[si];
  };
  MemoryChoice best;
  const auto evaluate = [&](const std::vector<MemoryPolicy>& policies) {
    MemoryChoice c;
    c.plan = apply_memory_policies(schedule, costs, policies, options.placement);
    SimOptions so;
    so.record_timeline = true;  // the placement and the timed memory read it
    const SimResult r = simulate(c.plan.schedule, c.plan.costs, so);
    c.makespan = r.makespan;
    c.peak_bytes.resize(static_cast<std::size_t>(schedule.ranks));
    c.fits = true;
    for (std::size_t k = 0; k < c.peak_bytes.size(); ++k) {
      c.peak_bytes[k] = (static_bytes.empty() ? 0.0 : static_bytes[k]) + (k < r.timed_peak.size() ? r.timed_peak[k].bytes : 0.0);
      c.fits = c.fits && c.peak_bytes[k] <= cap_bytes;
    }
    return c;
  };
  std::vector<MemoryPolicy> policies(static_cast<std::size_t>(S), MemoryPolicy::none());
  std::vector<std::size_t> step(static_cast<std::size_t>(S), 0);  // next rung of the ladder per stage
  best = evaluate(policies);
  std::int32_t tries = 1;
  while (!best.fits) {
    const auto fullest = static_cast<std::int32_t>(
        std::max_element(best.peak_bytes.begin(), best.peak_bytes.end()) - best.peak_bytes.begin());
    MemoryChoice chosen;
    std::int32_t chosen_stage = -1;
    for (std::int32_t s = 0; s < S; ++s) {
      const auto si = static_cast<std::size_t>(s);
      if (schedule.rank_of(s) != fullest || step[si] >= ladder_of(s).size()) continue;
      std::vector<MemoryPolicy> trial = policies;
      trial[si] = ladder_of(s)[step[si]];
      MemoryChoice c = evaluate(trial);
      ++tries;
      if (!(c.peak_bytes[static_cast<std::size_t>(fullest)] < best.peak_bytes[static_cast<std::size_t>(fullest)])) continue;
      const bool better = chosen_stage < 0 || c.makespan < chosen.makespan ||
                          (c.makespan == chosen.makespan &&
                           c.peak_bytes[static_cast<std::size_t>(fullest)] < chosen.peak_bytes[static_cast<std::size_t>(fullest)]);
      if (better) {
        chosen = std::move(c);
        chosen_stage = s;
      }
    }
    if (chosen_stage < 0) {
      // No rung lowers the fullest rank: climb every stage of it once more before giving up.
      bool climbed = false;
      for (std::int32_t s = 0; s < S; ++s) {
        const auto si = static_cast<std::size_t>(s);
        if (schedule.rank_of(s) == fullest && step[si] < ladder_of(s).size()) {
          policies[si] = ladder_of(s)[step[si]++];
          climbed = true;
        }
      }
      if (!climbed) break;
      best = evaluate(policies);
      ++tries;
      continue;
    }
    policies[static_cast<std::size_t>(chosen_stage)] = ladder_of(chosen_stage)[step[static_cast<std::size_t>(chosen_stage)]++];
    best = std::move(chosen);
  }
  best.tries = tries;
  return best;
}

}  // namespace ppsched
