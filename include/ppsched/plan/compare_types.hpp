// The types of comparing schedule families on a model (<ppsched/plan/compare.hpp>): the
// PlanRequest, each family's ScheduleResult and the PlanResult, with their text. Include
// <ppsched/plan/compare.hpp>; they sit in a header of their own so that the internals in
// plan/detail/compare.hpp build on them without including the public header back.
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

namespace ppsched::inline PPSCHED_MODE {
namespace plan {

// What compare_families does about activation memory (plan/memory_policy.hpp, issue 23).
enum class MemoryPolicyMode : std::uint8_t {
  none,       // plain schedules only
  automatic,  // a family that does not fit the byte caps is priced again with the policies
              // choose_memory_policies picks for it under the smallest of those caps
  given,      // every family runs PlanMemoryPolicy::stages
};

struct PlanMemoryPolicy {
  MemoryPolicyMode mode = MemoryPolicyMode::none;
  // given: stage index (a virtual stage of the family's schedule) -> its policy; a stage not
  // named keeps none. A layer-wise policy without its bytes (MemoryPolicy{kind}, kind
  // layerwise_recompute or layerwise_offload) is priced from the model's layers on each
  // family's cut (layerwise_recompute_policy).
  std::map<std::int32_t, MemoryPolicy> stages;
  // Between each device and its host, in the model's unit. Empty: PCIe 4 x16 (10 us, 25 GB/s),
  // which needs a model unit that is a scale of time (TimeUnit::seconds).
  std::optional<Interconnect> host_link;
  MemoryChoiceOptions choice{};  // automatic: the ladder and the placement
  // automatic, in search_plan: at most this many of the search's candidates over the byte cap
  // are priced with policies, best bound first (each is one choose_memory_policies, about 0.1
  // to 0.2 s on the default model); the bound usually stops it sooner (after 23 to 30 there).
  std::int32_t search_candidates = 64;
};

// What to plan: the pipeline's size, the families to compare and the caps.
struct PlanRequest {
  std::int32_t ranks = 8;
  std::int32_t microbatches = 32;
  // Chunks per rank for the families that take any number (FamilyInfo::chunks == 0:
  // interleaved-1f1b, looped-bfs); every other family has its own (FamilyInfo::chunks_for).
  std::int32_t chunks = 2;
  // Family names (any spelling family_info accepts). Empty: every family, leaving out (in
  // PlanResult::skipped) those whose rule the request breaks; a family named here whose rule
  // the request breaks is an error instead.
  std::vector<std::string> families;
  double weight_memory_fraction = 0.5;  // M_W / M_B: what a BI keeps alive until its BW
  // Per-rank memory caps a schedule must keep to (plan/search/memory.hpp; infinity: none): peak
  // stored activations in M_B (`microbatches`), static plus peak activation bytes
  // (`total_bytes`, `rank_total_bytes`), activation bytes alone (`activation_bytes`,
  // `rank_activation_bytes`). The model's device caps (PlanModel::device_cap) apply besides.
  MemoryCap cap;
  // What the recommendation minimises among the schedules that fit (plan/objective.hpp):
  // the makespan by default.
  Objective objective;
  // Recomputation and offload: none by default.
  PlanMemoryPolicy memory_policy;
};

// What one stage's memory policy does in a priced schedule, and what it costs.
struct StageMemoryCost {
  MemoryPolicy policy;
  // Of the step's micro-batches, how many it applies to: the stage's R, or OFFLOAD, actions
  // (an offload whose copies could not hide keeps the activation instead).
  std::int32_t microbatches = 0;
  // Per such micro-batch: activation bytes not held from F to B (on average over them where
  // some keep what others offload: layer-wise checkpoints whose copies could not hide).
  double saved_bytes = 0.0;
  double recompute_time = 0.0;  // per step: the stage's R actions, on its compute stream
  double copy_time = 0.0;       // per step: its OFFLOAD and RELOAD, on the copy lane beside compute

  friend bool operator==(const StageMemoryCost&, const StageMemoryCost&) = default;
};

// A schedule priced with memory policies, beside the same schedule without them.
struct MemoryPolicyUse {
  bool chosen = false;  // by the planner (MemoryPolicyMode::automatic), not given
  std::vector<StageMemoryCost> stages;  // one per stage of the schedule
  double plain_makespan = 0.0;
  double plain_peak_bytes = 0.0;  // the fullest rank's, static + activations
  std::string plain_fit_problem;  // why the plain schedule did not fit; empty when it did
  // The cut the policies were priced on when the planner cut the model again under the cap
  // (no policy fit the family's own cut); empty: the family's cut. Either way
  // ScheduleResult::partition holds the cut priced.
  std::optional<Partition> partition;

  friend bool operator==(const MemoryPolicyUse&, const MemoryPolicyUse&) = default;
};

// One schedule, proven, simulated and measured against the caps.
struct ScheduleResult {
  std::string name;
  // The family's record when the schedule is a family's (compare_families fills it); nullptr
  // for a schedule of any other origin given to evaluate_schedule.
  const FamilyInfo* family = nullptr;
  std::int32_t chunks = 1;  // most stages on one rank
  std::int32_t virtual_stages = 0;
  bool training = true;  // false when it has forwards only
  bool valid = false;
  std::vector<std::string> problems;  // validate()'s, when not valid
  double makespan = 0.0;
  double max_rank_span = 0.0;
  double bubble_fraction = 0.0;  // idle / (ranks x makespan)
  double ideal_time = 0.0;       // busy time of the busiest rank
  std::vector<double> busy;      // per rank
  std::vector<double> span;      // per rank
  std::vector<double> peak_activations;       // per rank, M_B
  std::vector<double> static_bytes;           // per rank: parameters with optimizer state
  std::vector<double> peak_activation_bytes;  // per rank, as a cap judges it (capped_activation_bytes)
  std::vector<double> peak_memory_bytes;      // per rank: static + peak activations
  double throughput = 0.0;  // micro-batches per time unit
  // The family's closed form (sim/analytic.hpp), where it has one and it holds: uniform ranks
  // and free communication (compare_families fills it).
  std::optional<double> analytic_idle_per_rank;
  std::string analytic_formula;
  bool fits = true;
  std::string fit_problem;  // why it does not fit, when it does not
  Schedule schedule;        // as given (compute-only when generated, with memory actions under `memory`)
  Timeline timeline;        // simulated
  // Set when the schedule was priced with memory policies (PlanRequest::memory_policy).
  std::optional<MemoryPolicyUse> memory;
  // The cut these figures were priced on, as priced: stage s of `schedule` holds the layers
  // partition.stages[s].begin .. end - 1 (positions of the model's layer order) and runs on
  // rank partition.stages[s].rank, which is schedule.placement[s]. It is what a user builds
  // the stages from: for a family of several stages per rank it is not PlanResult::partition
  // (one stage per rank), and under memory policies it may be a cut made again under the cap
  // (MemoryPolicyUse::partition). Priced plainly (no memory policies), cost_model_of(partition,
  // plan_cost_options(model, weight_memory_fraction)) simulates `schedule` to `makespan`.
  Partition partition;

  friend bool operator==(const ScheduleResult&, const ScheduleResult&) = default;
};

// A family `PlanRequest::families` left empty would have compared, left out and why.
struct SkippedSchedule {
  std::string name;
  std::string reason;
  // True when the model cannot be cut into the family's stages (the family accepts the
  // request; the model has too few layers for its ranks x chunks).
  bool cannot_cut = false;
  std::int32_t chunks = 1;
  const FamilyInfo* family = nullptr;  // the family's record (family_schedules fills it)

  friend bool operator==(const SkippedSchedule&, const SkippedSchedule&) = default;
};

struct Recommendation {
  std::optional<std::size_t> index;  // into PlanResult::schedules; none when nothing fits
  std::string reason;                // one line

  friend bool operator==(const Recommendation&, const Recommendation&) = default;
};

struct PlanResult {
  std::string model;  // PlanModel::description
  TimeUnit unit;      // PlanModel::unit
  std::int32_t ranks = 0;
  std::int32_t microbatches = 0;
  std::int32_t chunks = 0;
  Partition partition;  // the one-stage-per-rank cut; each schedule's own is ScheduleResult::partition
  std::vector<ScheduleResult> schedules;
  std::vector<SkippedSchedule> skipped;
  Recommendation recommended;
  MemoryCap cap;         // the request's
  MemoryCap device_cap;  // the model's devices' (PlanModel::device_cap)

  // The recommended schedule, or nullptr.
  [[nodiscard]] const ScheduleResult* recommended_schedule() const noexcept {
    return recommended.index ? &schedules[*recommended.index] : nullptr;
  }

  friend bool operator==(const PlanResult&, const PlanResult&) = default;
};

// Percent with one decimal: "12.5%".
[[nodiscard]] inline std::string percent_of(double fraction) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f%%", fraction * 100.0);
  return buffer;
}

// One line: "zb-v v=2: makespan 27.5, bubble 9.1%, peak 4 M_B, 1.2 KiB, fits" (the largest
// peak over the ranks), or why it is invalid or does not fit.
[[nodiscard]] inline std::string to_string(const ScheduleResult& r) {
  using detail::concat;
  std::string out = detail::concat(r.name, " v=", r.chunks, r.training ? "" : " (inference)", ": ");
  if (!r.valid) return out + detail::concat("invalid, ", r.problems.size(), r.problems.size() == 1 ? " problem" : " problems");
  const auto max_of = [](const std::vector<double>& v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); };
  out += detail::concat("makespan ", r.makespan, ", bubble ", percent_of(r.bubble_fraction), ", peak ",
                max_of(r.peak_activations), " M_B, ", bytes_text(max_of(r.peak_memory_bytes)), ", ");
  return out + (r.fits ? std::string("fits") : "does not fit: " + r.fit_problem);
}

// The model and size, one line per schedule, the skipped families and the recommendation.
[[nodiscard]] inline std::string to_string(const PlanResult& p) {
  using detail::concat;
  std::string out = detail::concat(p.model, ": ", p.ranks, " ranks, ", p.microbatches, " micro-batches, times in ", p.unit.text(), "\n");
  for (const ScheduleResult& r : p.schedules) out += detail::concat("  ", to_string(r), "\n");
  for (const SkippedSchedule& s : p.skipped) out += detail::concat("  skipped ", s.name, ": ", s.reason, "\n");
  if (const ScheduleResult* best = p.recommended_schedule()) {
    out += detail::concat("recommended: ", best->name, " (", p.recommended.reason, ")\n");
  } else {
    out += detail::concat("recommended: none (", p.recommended.reason, ")\n");
  }
  return out;
}

inline std::ostream& operator<<(std::ostream& os, const ScheduleResult& r) { return os << to_string(r); }
inline std::ostream& operator<<(std::ostream& os, const PlanResult& p) { return os << to_string(p); }

}  // namespace plan
}  // namespace ppsched
