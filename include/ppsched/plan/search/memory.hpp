// Activation memory as the schedule search counts it, and the per-rank cap it keeps to.
//
// The unit is M_B (defined once, in validate/report.hpp): one micro-batch's stored activations
// of a rank's whole share of the model: a stage on a rank that holds v stages weighs 1/v, so
// 1F1B, ZB-V and interleaved schedules are compared on one scale — 1F1B and ZB-H1 need p M_B on
// their first rank, ZB-H2 2p-1, ZB-V p. Bytes come from the cost model's activation_bytes
// (with the per-micro-batch scale). What BI leaves for BW counts the cost model's
// weight_memory_fraction of the activation, as in docs/execution-model.md. The peak is a
// property of each rank's program order alone (memory changes only at compute actions, which
// run in order), so it is measured without running anything and equals validate()'s and
// simulate()'s RankMemory::peak_microbatches.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/engine/detail/flat_schedule.hpp"
#include "ppsched/validate/memory.hpp"
#include "ppsched/validate/report.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace plan {

// Per-rank memory limits, all applied; infinity means none. The planner's one cap type: a
// request's (PlanRequest::cap), the devices' (PlanModel::device_cap), a cut's
// (CutRequest::cap), the search's (SearchProblem::cap), plan_devices' and the variable-length
// planner's (StepPlanOptions::cap, SplitOptions::cap). Two kinds of byte limit, named by
// what they count: `activation_bytes` bounds the stored activations alone, `total_bytes` the
// static bytes (parameters, gradients, optimizer state: SearchProblem::static_bytes) plus the
// activations. activation_bytes_of(rank, static_bytes) turns both into the one activation
// limit a rank keeps to.
struct MemoryCap {
  double microbatches = std::numeric_limits<double>::infinity();      // M_B per rank
  double activation_bytes = std::numeric_limits<double>::infinity();  // stored activations per rank
  std::vector<double> rank_activation_bytes{};  // optional: one per rank, on top of `activation_bytes`
  double total_bytes = std::numeric_limits<double>::infinity();  // static plus activation bytes per rank
  std::vector<double> rank_total_bytes{};  // optional: one per rank, on top of `total_bytes`

  // What rank `rank`'s activations may use when it holds `static_bytes` (0: none, so a total
  // limit bounds the activations alone).
  [[nodiscard]] double activation_bytes_of(std::int32_t rank, double static_bytes = 0.0) const noexcept {
    return std::min(limit_of(activation_bytes, rank_activation_bytes, rank), total_bytes_of(rank) - static_bytes);
  }
  [[nodiscard]] double total_bytes_of(std::int32_t rank) const noexcept {
    return limit_of(total_bytes, rank_total_bytes, rank);
  }
  // No limit on anything but static plus activation bytes (total_bytes, rank_total_bytes).
  [[nodiscard]] bool totals_only() const noexcept {
    const auto none = [](double b) { return std::isinf(b); };
    return std::isinf(microbatches) && std::isinf(activation_bytes) &&
           std::all_of(rank_activation_bytes.begin(), rank_activation_bytes.end(), none);
  }
  [[nodiscard]] bool unlimited() const noexcept {
    const auto none = [](double b) { return std::isinf(b); };
    return std::isinf(microbatches) && std::isinf(activation_bytes) && std::isinf(total_bytes) &&
           std::all_of(rank_activation_bytes.begin(), rank_activation_bytes.end(), none) &&
           std::all_of(rank_total_bytes.begin(), rank_total_bytes.end(), none);
  }

  friend bool operator==(const MemoryCap&, const MemoryCap&) = default;

 private:
  [[nodiscard]] static double limit_of(double all, const std::vector<double>& per_rank, std::int32_t rank) noexcept {
    const auto r = static_cast<std::size_t>(rank);
    return r < per_rank.size() ? std::min(all, per_rank[r]) : all;
  }
};

struct PeakMemory {
  std::vector<double> microbatches;  // per rank, M_B
  std::vector<double> bytes;         // per rank

  [[nodiscard]] double max_microbatches() const noexcept {
    return microbatches.empty() ? 0.0 : *std::max_element(microbatches.begin(), microbatches.end());
  }
  [[nodiscard]] double max_bytes() const noexcept {
    return bytes.empty() ? 0.0 : *std::max_element(bytes.begin(), bytes.end());
  }
};

// Peaks are sums of fractions of M_B; comparing with a cap tolerates their rounding.
inline constexpr double memory_slack = 1e-9;

// Stages on each rank 0 .. ranks-1 of a placement (each rank's v): the one count the planner's
// models, its M_B weights and the search's builders share. Throws ppsched::error, naming
// `subject`, when a stage names a rank outside [0, ranks).
[[nodiscard]] inline std::vector<std::int32_t> stages_per_rank(std::span<const std::int32_t> placement,
                                                               std::int32_t ranks,
                                                               std::string_view subject = "placement") {
  std::vector<std::int32_t> per_rank(static_cast<std::size_t>(std::max(ranks, 0)), 0);
  for (std::size_t s = 0; s < placement.size(); ++s) {
    if (placement[s] < 0 || placement[s] >= ranks) {
      detail::fail({std::string(subject),
            detail::concat("stage ", s, " is placed on rank ", placement[s], ", outside 0..", ranks - 1),
            detail::concat("placement[", s, "]"), "place every stage on a rank of the pipeline"});
    }
    ++per_rank[static_cast<std::size_t>(placement[s])];
  }
  return per_rank;
}

// The M_B weight of one stored activation of each stage: 1 / (stages on its rank). Throws
// ppsched::error when a stage names a rank outside [0, ranks).
[[nodiscard]] inline std::vector<double> stage_weights(std::span<const std::int32_t> placement, std::int32_t ranks) {
  const std::vector<std::int32_t> per_rank = stages_per_rank(placement, ranks);
  std::vector<double> w;
  w.reserve(placement.size());
  for (const std::int32_t r : placement) w.push_back(1.0 / per_rank[static_cast<std::size_t>(r)]);
  return w;
}

// Peak stored activations per rank of a schedule (compute-only or lowered) under `costs`
// (which must fit its stages and micro-batches; check_cost_model throws otherwise). Actions
// outside the schedule's ranges are ignored: validate() reports them. The count is validate()'s
// own walk (validate/memory.hpp, one function for both), memory actions and layer-wise
// recomputation included, except that an overlapped pair counts in its written order: the
// search ranks candidates by it, and its figures stay what they were.
[[nodiscard]] inline PeakMemory peak_memory(const Schedule& s, const CostModel& costs);

}  // namespace plan
namespace detail {

// plan::peak_memory; `check_costs` false where the caller has checked `costs` against the
// schedule's stages and micro-batches already (the search, once per placement).
[[nodiscard]] inline plan::PeakMemory peak_memory_of(const Schedule& s, const CostModel& costs, bool check_costs) {
  if (check_costs) check_cost_model(costs, s.stages(), s.microbatches);
  (void)plan::stage_weights(s.placement, s.ranks);  // a placement outside the ranks is an error here too
  plan::PeakMemory peak;
  peak.microbatches.assign(s.programs.size(), 0.0);
  peak.bytes.assign(s.programs.size(), 0.0);
  detail::FlatSchedule flat;
  flat.ranks = static_cast<std::int32_t>(s.programs.size());
  flat.stages = s.stages();
  flat.microbatches = s.microbatches;
  // (the walk weighs each stage by the stages on its rank: a placement it cannot index, of a
  // malformed schedule with fewer programs than ranks, weighs 1)
  if (std::all_of(s.placement.begin(), s.placement.end(), [&s](std::int32_t r) { return r < static_cast<std::int32_t>(s.programs.size()); }))
    flat.placement = s.placement;
  flat.rank_actions.resize(s.programs.size());
  flat.rank_begin.assign(s.programs.size() + 1, 0);
  for (std::size_t r = 0; r < s.programs.size(); ++r) {
    flat.rank_actions[r] = s.programs[r].data();
    flat.rank_begin[r + 1] = flat.rank_begin[r] + static_cast<std::int32_t>(s.programs[r].size());
    for (const Action& a : s.programs[r]) flat.has_backward = flat.has_backward || is_backward(a.op);
  }
  // Inference (no backward anywhere) keeps nothing for a backward, as validate() counts it.
  if (!flat.has_backward) return peak;
  const MemoryModel shares = memory_model_for(costs, s.stages());
  const std::int32_t M = s.microbatches;
  // One stored activation of each (stage, micro-batch) the walk may meet, asked of the model once
  // each: per stage where the model has no per-micro-batch costs or scales (every micro-batch
  // then weighs the same), else per (stage, micro-batch).
  const bool per_stage = costs.per_microbatch.empty() && costs.microbatch_scale.empty();
  std::vector<double> table;
  detail::ActivationSizes sizes;
  if (flat.stages > 0 && M > 0) {
    const auto stages = static_cast<std::size_t>(flat.stages);
    const std::size_t per = per_stage ? 1 : static_cast<std::size_t>(M);
    table.resize(stages * per);
    for (std::size_t st = 0; st < stages; ++st) {
      for (std::size_t mb = 0; mb < per; ++mb) {
        table[st * per + mb] =
            detail::activation_bytes_at(costs, static_cast<std::int32_t>(st), static_cast<std::int32_t>(mb), M);
      }
    }
    sizes = detail::ActivationSizes{table.data(), per, per_stage ? std::size_t{0} : std::size_t{1}};
  }
  ValidationReport report;
  report.memory.assign(s.programs.size(), RankMemory{});
  report.stage_peak_in_flight.assign(static_cast<std::size_t>(std::max(flat.stages, 0)), 0);
  detail::measure_memory_walk(flat, sizes, detail::stage_fractions(shares), report, /*pairs=*/false);
  for (std::size_t r = 0; r < s.programs.size(); ++r) {
    peak.microbatches[r] = report.memory[r].peak_microbatches;
    peak.bytes[r] = report.memory[r].peak_bytes;
  }
  return peak;
}

}  // namespace detail
namespace plan {

[[nodiscard]] inline PeakMemory peak_memory(const Schedule& s, const CostModel& costs) {
  return detail::peak_memory_of(s, costs, /*check_costs=*/true);
}

// Empty when `peak` keeps to `cap`; otherwise the first excess, in words ("needs 9 M_B on rank
// 0, over the cap of 8 M_B").
[[nodiscard]] inline std::string cap_excess(const PeakMemory& peak, const MemoryCap& cap) {
  using detail::concat;
  for (std::size_t r = 0; r < peak.microbatches.size(); ++r) {
    if (peak.microbatches[r] > cap.microbatches + memory_slack) {
      return detail::concat("needs ", peak.microbatches[r], " M_B on rank ", r, ", over the cap of ", cap.microbatches, " M_B");
    }
  }
  for (std::size_t r = 0; r < peak.bytes.size(); ++r) {
    const double limit = cap.activation_bytes_of(static_cast<std::int32_t>(r));
    if (peak.bytes[r] > limit * (1.0 + memory_slack)) {
      return detail::concat("needs ", bytes_text(peak.bytes[r]), " of activations on rank ", r, ", over the cap of ", bytes_text(limit));
    }
  }
  return {};
}

}  // namespace plan
namespace detail {

inline void check_memory_cap(const plan::MemoryCap& cap, std::int32_t ranks) {
  const auto bad = [](double x) { return std::isnan(x) || x <= 0.0; };
  if (bad(cap.microbatches)) {
    detail::fail({"memory cap", detail::concat("microbatches = ", cap.microbatches, " is not a positive number"),
          "MemoryCap::microbatches",
          "give the M_B each rank may hold (at least 1: one micro-batch through the rank), or infinity for no cap"});
  }
  for (const auto& [name, all, per_rank, what] :
       {std::tuple{"activation_bytes", cap.activation_bytes, &cap.rank_activation_bytes, "activation bytes"},
        std::tuple{"total_bytes", cap.total_bytes, &cap.rank_total_bytes, "static plus activation bytes"}}) {
    if (bad(all)) {
      detail::fail({"memory cap", detail::concat(name, " = ", all, " is not a positive number"), detail::concat("MemoryCap::", name),
            detail::concat("give the ", what, " each rank may hold, or infinity for no cap")});
    }
    if (!per_rank->empty() && per_rank->size() != static_cast<std::size_t>(ranks)) {
      detail::fail({"memory cap", detail::concat("rank_", name, " has ", per_rank->size(), " entries for ", ranks, " ranks"),
            detail::concat("MemoryCap::rank_", name), "give one byte limit per rank, or none"});
    }
    for (std::size_t r = 0; r < per_rank->size(); ++r) {
      if (bad((*per_rank)[r])) {
        detail::fail({"memory cap", detail::concat("rank_", name, "[", r, "] = ", (*per_rank)[r], " is not a positive number"),
              detail::concat("MemoryCap::rank_", name, "[", r, "]"), "give a positive byte limit, or infinity for none"});
      }
    }
  }
}

}  // namespace detail
}  // namespace ppsched
