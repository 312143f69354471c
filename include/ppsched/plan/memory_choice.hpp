// The planner's choice of memory policies (issue 23, item 2): for one schedule and cost model,
// the per-stage policies (plan/memory_policy.hpp) under which every rank's peak memory —
// its static bytes (parameters, gradients, optimizer state: no activation policy moves them)
// plus its activations (capped_activation_bytes: in program order as validate() walks them,
// and over the simulated time where copies may fall behind) — fits a cap, at the least step
// time the greedy search below finds. compare_families and search_plan check a cap alike.
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
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ppsched/costs/cost_model.hpp"
#include "ppsched/error.hpp"
#include "ppsched/plan/memory_policy.hpp"
#include "ppsched/plan/model.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/sim/simulate.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace plan {

// The activation bytes rank `rank` of a simulated schedule holds at its peak, as a memory cap
// judges it — one definition for choose_memory_policies, compare_families (check_fit) and
// search_plan: the program order's walk (validate's, SimResult::memory), and, for a schedule
// with copies (`copies`: any OFFLOAD or RELOAD), the larger of that and the memory over the
// simulated time (SimResult::timed_peak). The walk counts each copy as ending where it is
// issued; a copy lane that falls behind holds the offloaded bytes longer than that.
[[nodiscard]] inline double capped_activation_bytes(const SimResult& r, std::size_t rank, bool copies) {
  const double walk = rank < r.memory.size() ? r.memory[rank].peak_bytes : 0.0;
  if (!copies || rank >= r.timed_peak.size()) return walk;
  return std::max(walk, r.timed_peak[rank].bytes);
}

// Whether `s` has an OFFLOAD or RELOAD (capped_activation_bytes).
[[nodiscard]] inline bool has_copies(const Schedule& s) {
  return std::any_of(s.programs.begin(), s.programs.end(),
                     [](const std::vector<Action>& p) { return std::any_of(p.begin(), p.end(), [](const Action& a) { return is_copy(a.op); }); });
}

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
  std::vector<double> peak_bytes;  // per rank: static bytes + capped_activation_bytes
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
    detail::fail({"choose_memory_policies", detail::concat("has ", static_bytes.size(), " static sizes for ", schedule.ranks, " ranks"), "",
          "give one static byte count per rank (static_bytes_per_rank), or none"});
  }
  if (!(cap_bytes > 0.0)) {
    detail::fail({"choose_memory_policies", detail::concat("cap ", cap_bytes, " bytes"), "", "give a positive memory cap per rank"});
  }
  if (!options.stage_ladders.empty() && options.stage_ladders.size() != static_cast<std::size_t>(S)) {
    detail::fail({"choose_memory_policies", detail::concat("has ", options.stage_ladders.size(), " stage ladders for ", S, " stages"),
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
    so.record_timeline = false;  // the memory over time is counted without it
    const SimResult r = simulate(c.plan.schedule, c.plan.costs, so);
    c.makespan = r.makespan;
    c.peak_bytes.resize(static_cast<std::size_t>(schedule.ranks));
    c.fits = true;
    const bool copies = has_copies(c.plan.schedule);
    for (std::size_t k = 0; k < c.peak_bytes.size(); ++k) {
      // As compare_families checks a cap: one definition of "fits" (its relative slack too).
      c.peak_bytes[k] = (static_bytes.empty() ? 0.0 : static_bytes[k]) + capped_activation_bytes(r, k, copies);
      c.fits = c.fits && c.peak_bytes[k] <= cap_bytes * (1.0 + 1e-9);
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

// Layer-wise recomputation of one stage (MemoryPolicyKind::layerwise_recompute), priced from
// the model's layers (PlanModel::layer_memory): the stage keeps the input of each of its
// layers but the first (whose input, the stage's own, every recompute policy keeps with the
// received activation), and its backward holds one layer's activation at a time, the largest
// at most; the recomputation costs the stage's forward. Empty when the model has no layers,
// or when it would save nothing over the stage's activation.
[[nodiscard]] inline std::optional<MemoryPolicy> layerwise_recompute_policy(const PlanModel& model, const PartitionStage& stage) {
  if (model.layer_memory.empty() || stage.end > model.layer_memory.size() || stage.begin >= stage.end) {
    return std::nullopt;
  }
  double kept = 0.0, largest = 0.0;
  for (std::size_t k = stage.begin; k < stage.end; ++k) {
    if (k > stage.begin) kept += model.layer_memory[k].input_bytes;
    largest = std::max(largest, model.layer_memory[k].activation_bytes);
  }
  const double act = stage.activation_bytes;
  const double saved = std::max(0.0, act - kept);
  largest = std::min(largest, act);
  if (!(kept + largest < act)) return std::nullopt;
  return MemoryPolicy::layerwise(saved, largest, stage.forward);
}

// The stage's selective recomputation from its layers' parts in the profile ("recompute this
// part: saves X bytes, costs Y": Layer::recompute_saves_bytes, recompute_time), summed, the time
// at the stage's device speed. Empty when none of its layers has a part.
[[nodiscard]] inline std::optional<MemoryPolicy> profile_recompute_part(const PlanModel& model, const PartitionStage& stage) {
  if (model.layer_memory.empty() || stage.end > model.layer_memory.size() || stage.begin >= stage.end) {
    return std::nullopt;
  }
  double saves = 0.0, time = 0.0, forward = 0.0;
  for (std::size_t k = stage.begin; k < stage.end; ++k) {
    saves += model.layer_memory[k].part_saves_bytes;
    time += model.layer_memory[k].part_time;
    forward += model.layer_memory[k].forward;
  }
  if (!(saves > 0.0)) return std::nullopt;
  const double speed = forward > 0.0 && stage.forward > 0.0 ? forward / stage.forward : 1.0;
  return MemoryPolicy::selective_part(std::min(saves, stage.activation_bytes), time / speed);
}

// MemoryChoiceOptions::stage_ladders for a partition: `ladder` for every stage, with the
// profile's parts of the stage's layers (profile_recompute_part) before its full
// recomputation, and layer-wise recomputation added where the stage's layers make it save
// memory, then the same with its checkpoints offloaded (MemoryPolicyKind::layerwise_offload),
// the last rung.
[[nodiscard]] inline std::vector<std::vector<MemoryPolicy>> stage_ladders(const PlanModel& model, const Partition& partition,
                                                                          const std::vector<MemoryPolicy>& ladder = MemoryChoiceOptions{}.ladder) {
  std::vector<std::vector<MemoryPolicy>> out;
  out.reserve(partition.stages.size());
  for (const PartitionStage& st : partition.stages) {
    out.push_back(ladder);
    std::vector<MemoryPolicy>& l = out.back();
    if (const std::optional<MemoryPolicy> part = profile_recompute_part(model, st)) {
      const auto full = std::find(l.begin(), l.end(), MemoryPolicy::full_recompute());
      l.insert(full, *part);
    }
    if (const std::optional<MemoryPolicy> p = layerwise_recompute_policy(model, st)) {
      l.push_back(*p);
      l.push_back(p->with_offloaded_checkpoints());
    }
  }
  return out;
}

}  // namespace plan
}  // namespace ppsched
