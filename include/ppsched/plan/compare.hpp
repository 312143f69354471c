// Comparing schedule families on a model and recommending one: for every family asked for,
// build its schedule, cut the model for its placement (PlanModel), lower it with the cut's
// costs, prove it (validate: dependencies, deadlock freedom under rendezvous, memory), simulate
// it, count its memory per rank against the caps, and pick the fastest that fits. Every step is
// also a function of its own (evaluate_schedule, recommend) for a caller with its own schedule.
//
// Units. Times are in the model's unit. Activation memory is counted in M_B: one micro-batch's
// activations of one rank's share of the model; a schedule with v chunks per rank stores 1/v of
// that per chunk (chunk_weights), so interleaved and V-shaped schedules compare directly with
// one-stage-per-rank ones (the zero-bubble paper's convention). Bytes are bytes: per rank, the
// static bytes (parameters with optimizer state) plus the simulated peak of stored activations.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/engine/workspace.hpp"
#include "ppsched/error.hpp"
#include "ppsched/plan/costs.hpp"
#include "ppsched/plan/memory_choice.hpp"
#include "ppsched/plan/memory_policy.hpp"
#include "ppsched/plan/model.hpp"
#include "ppsched/plan/objective.hpp"
#include "ppsched/plan/search/memory.hpp"
#include "ppsched/schedule/generators.hpp"
#include "ppsched/lower/lower.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/validate/validate.hpp"
#include "ppsched/sim/analytic.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/sim/simulate.hpp"
#include "ppsched/trace/stats.hpp"
#include "ppsched/trace/timeline.hpp"
#include "ppsched/plan/detail/compare.hpp"
#include "ppsched/plan/compare_types.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace plan {

// Proves and simulates one schedule (compute-only or lowered, generated or read from a file)
// on `partition` (the model cut for the schedule's placement), and measures it against the
// request's caps and the model's device caps. A schedule with problems comes back with `valid`
// false and its problems listed, not simulated. Throws ppsched::error when the partition does
// not have one stage per stage of the schedule. `ws` lends the checks, the lowering and the
// simulation their arrays (engine/workspace.hpp): keep one across many schedules.
[[nodiscard]] PPSCHED_OUTLINE ScheduleResult evaluate_schedule(Schedule schedule, const PlanModel& model,
                                                      const Partition& partition, const PlanRequest& request,
                                                      Workspace& ws);
[[nodiscard]] PPSCHED_OUTLINE ScheduleResult evaluate_schedule(Schedule schedule, const PlanModel& model,
                                                      const Partition& partition, const PlanRequest& request);

// The valid training schedule that fits and is best by `objective` (plan/objective.hpp), and
// one line saying why. By makespan (the default): the smallest makespan (ties, as sums of the
// same costs in another order differ in the last bits: the one storing less, then the one
// listed first); the line names the faster schedule that does not fit and the cap it breaks,
// or the runner-up and its margin. By span or memory: detail::recommend_by. `capped` says
// whether any cap applied (for the wording). No index when nothing valid fits (or, by memory,
// nothing finishes within the bound).
[[nodiscard]] inline Recommendation recommend(std::span<const ScheduleResult> schedules, bool capped,
                                              const Objective& objective = {}) {
  using detail::concat;
  if (objective.kind != ObjectiveKind::makespan) return detail::recommend_by(schedules, capped, objective);
  Recommendation rec;
  std::optional<std::size_t> fastest;
  std::optional<std::size_t> best;
  std::size_t candidates = 0;
  const auto better = [&](std::size_t a, std::size_t b) {
    const ScheduleResult& x = schedules[a];
    const ScheduleResult& y = schedules[b];
    if (std::abs(x.makespan - y.makespan) > 1e-9 * std::max(x.makespan, y.makespan)) return x.makespan < y.makespan;
    return *std::max_element(x.peak_activations.begin(), x.peak_activations.end()) <
           *std::max_element(y.peak_activations.begin(), y.peak_activations.end()) - 1e-9;
  };
  for (std::size_t i = 0; i < schedules.size(); ++i) {
    const ScheduleResult& r = schedules[i];
    if (!r.training || !r.valid) continue;
    ++candidates;
    if (!fastest || better(i, *fastest)) fastest = i;
    if (r.fits && (!best || better(i, *best))) best = i;
  }
  if (candidates == 0) {
    rec.reason = "no valid training schedule was evaluated (forward-only runs inference only)";
    return rec;
  }
  if (!best) {
    const ScheduleResult& f = schedules[*fastest];
    rec.reason = detail::concat("no schedule fits the memory cap; the fastest, ", f.name, ", ", f.fit_problem);
    return rec;
  }
  rec.index = best;
  const ScheduleResult& b = schedules[*best];
  const ScheduleResult& f = schedules[*fastest];
  if (better(*fastest, *best)) {
    rec.reason = detail::concat(f.name, " is ", percent_of(detail::relative_gain(f.makespan, b.makespan)), " faster but ", f.fit_problem);
    return rec;
  }
  std::optional<std::size_t> second;
  for (std::size_t i = 0; i < schedules.size(); ++i) {
    const ScheduleResult& r = schedules[i];
    if (i == *best || !r.training || !r.valid) continue;
    if (!second || better(i, *second)) second = i;
  }
  rec.reason = detail::concat("fastest of the ", candidates, " training schedules", capped ? ", and it fits the memory cap" : "");
  if (second) {
    const ScheduleResult& s = schedules[*second];
    rec.reason += detail::concat("; next is ", s.name, ", ", percent_of(detail::relative_gain(b.makespan, s.makespan)), " slower");
  }
  return rec;
}

// Why `family` rejects `request`, in the family's own words (its rule and the nearest valid
// request); empty when it accepts it. The family record's why_not; throws ppsched::error for an
// unknown name.
[[nodiscard]] inline std::string why_rejected(std::string_view family, const ScheduleRequest& request) {
  return family_info(family).why_not(request);
}

}  // namespace plan
namespace detail {
// The records of the families `request` names, looked up once, where the names enter (an
// unknown name throws); the records are carried from here on.
[[nodiscard]] inline std::vector<const FamilyInfo*> named_families(const plan::PlanRequest& request) {
  std::vector<const FamilyInfo*> families;
  families.reserve(request.families.size());
  for (const std::string& name : request.families) families.push_back(&family_info(name));
  return families;
}

// The families `named` lists in order (every family when it is empty), each built by its own
// rule and cut (one cut per placement, from `partition_for`): `use(family, chunks, schedule,
// partition)` for each one built, the rest in `skipped`. See family_schedules.
template <class Use>
void for_each_family(const plan::PlanRequest& request, std::span<const FamilyInfo* const> named_records,
                     PartitionCache& partition_for, std::vector<plan::SkippedSchedule>& skipped, Use&& use) {
  const bool named = !named_records.empty();
  std::vector<const FamilyInfo*> families(named_records.begin(), named_records.end());
  if (!named) {
    for (const FamilyInfo& f : schedule_families) families.push_back(&f);
  }
  for (const FamilyInfo* family : families) {
    const ScheduleRequest r{request.ranks, request.microbatches, family->chunks_for(request.chunks)};
    if (!named && !family->accepts(r)) {
      skipped.push_back({std::string(family->name), family->why_not(r), false, r.chunks, family});
      continue;
    }
    Schedule schedule = family->make(r);  // a named family's rule speaks for itself
    const Partition* partition = nullptr;
    const std::vector<double> in_flight = plan::family_in_flight(*family, request.ranks, request.microbatches);
    try {
      try {
        partition = &partition_for({schedule.placement, in_flight});
      } catch (const error&) {
        // No cut keeps the family's own counts under the devices' caps: cut as for 1F1B, so
        // the family is priced and reported as not fitting, as before it had counts.
        if (in_flight.empty()) throw;
        partition = &partition_for(schedule.placement);
      }
    } catch (const error& e) {
      skipped.push_back({std::string(family->name),
                         detail::concat("its ", schedule.stages(), " stages (", request.ranks, " ranks x ", r.chunks,
                                " chunks) cannot be cut from this model: ", e.what()),
                         true, r.chunks, family});
      continue;
    }
    use(*family, r.chunks, std::move(schedule), *partition);
  }
}
}  // namespace detail
namespace plan {

// One family's schedule for a request, with the model cut for its placement.
struct FamilySchedule {
  const FamilyInfo* family = nullptr;
  std::int32_t chunks = 1;  // per rank, by the family's rule (FamilyInfo::chunks_for)
  Schedule schedule;        // compute-only, as the family builds it
  Partition partition;  // the model cut for schedule.placement
};

struct FamilySchedules {
  std::vector<FamilySchedule> built;
  std::vector<SkippedSchedule> skipped;
};

// The schedules a comparison starts from: the families `request` names (every family when
// request.families is empty), in that order (or the family table's), each built with its own
// chunk count (FamilyInfo::chunks_for(request.chunks)) and with `model` cut for its placement.
// Unnamed, a family whose rule the request breaks is left out with its reason; a family the
// model cannot be cut for (more virtual stages than layers) is left out with the partitioner's
// reason, named or not. Throws ppsched::error for an unknown family, or a named family whose
// rule the request breaks. Only the sizes, chunks and families of `request` are read.
// `families` given, they are the families asked for, by record, and request.families is not
// read (a caller that has the records looks nothing up again).
[[nodiscard]] inline FamilySchedules family_schedules(const PlanModel& model, const PlanRequest& request,
                                                      std::span<const FamilyInfo* const> families) {
  FamilySchedules out;
  detail::PartitionCache partition_for(model);
  detail::for_each_family(request, families, partition_for, out.skipped,
                          [&](const FamilyInfo& family, std::int32_t chunks, Schedule schedule,
                              const Partition& partition) {
                            out.built.push_back({&family, chunks, std::move(schedule), partition});
                          });
  return out;
}

[[nodiscard]] inline FamilySchedules family_schedules(const PlanModel& model, const PlanRequest& request) {
  return family_schedules(model, request, detail::named_families(request));
}

// About how many bytes compare_families holds at its peak for `request`: every result keeps
// its schedule and simulated timeline (about 100 bytes per compute action, all families
// together), and the family being evaluated needs its lowering, validation and simulation
// besides (about 300 bytes per compute action). Fitted to ppsched-plan's peak resident memory
// at p = 16, m = 2000 and 8000 (docs/reliability.md, issue 24): within 1.3x for all families
// or one-stage-per-rank ones, up to 2.5x high for a V-shaped family alone. For refusing a
// request far beyond a machine's memory before starting it, not for sizing a pool. The
// families are those the request names, or every family that accepts it. Throws
// ppsched::error for an unknown family name.
[[nodiscard]] inline double estimate_plan_bytes(const PlanRequest& request) {
  constexpr double kept_per_action = 100.0, working_per_action = 300.0;
  const double slots = static_cast<double>(std::max(request.ranks, 0)) * static_cast<double>(std::max(request.microbatches, 0));
  double kept = 0.0, largest = 0.0;
  const auto add = [&](const FamilyInfo& f) {
    const std::int32_t v = f.chunks_for(request.chunks);
    const double per_slot = static_cast<double>(v) * (f.training ? (f.split_backward ? 3.0 : 2.0) : 1.0);
    kept += per_slot * slots;
    largest = std::max(largest, per_slot * slots);
  };
  if (request.families.empty()) {
    for (const FamilyInfo& f : schedule_families) {
      if (f.accepts(ScheduleRequest{request.ranks, request.microbatches, f.chunks_for(request.chunks)})) add(f);
    }
  } else {
    for (const std::string& name : request.families) add(family_info(name));
  }
  return kept_per_action * kept + working_per_action * largest;
}

// Compares the families `request` asks for on `model` and recommends one: each schedule of
// family_schedules (which says which are left out, and why) evaluated on its cut
// (evaluate_schedule), then under PlanRequest::memory_policy: with the given policies, or, in
// automatic mode, with choose_memory_policies' when it does not fit the byte caps plainly
// (ScheduleResult::memory says what each stage does and costs). Throws ppsched::error for a bad request, an unknown family, or a named
// family whose rule the request breaks.
[[nodiscard]] PPSCHED_OUTLINE PlanResult compare_families(const PlanModel& model, const PlanRequest& request);

}  // namespace plan
}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/plan/impl/compare.ipp"
#endif
