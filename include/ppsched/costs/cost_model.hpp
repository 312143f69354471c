// The simulator's cost model: how long each compute action takes, how long each transfer
// takes, and how many bytes a stored activation holds. Times are in one unit the user
// chooses (named in `unit`, carried into the Timeline). Costs are per (virtual) stage, with
// an optional per-micro-batch scale (variable-length micro-batches: time and bytes grow
// with the tokens in the micro-batch) or a full per-(stage, micro-batch) table. A transfer
// costs latency + bytes / bandwidth. The full backward B takes BI + BW unless the stage
// gives its own time. On top of these, every compute action pays a fixed `fixed_costs.action`
// and every transfer a fixed `fixed_costs.transfer`: what a runtime spends per action whatever
// its size (issue, launch, synchronisation; posting and matching a send and a receive), which
// a time per layer and micro-batch cannot carry and which makes many small micro-batches
// slower than their rows suggest. A step pays `fixed_costs.step` once (in the makespan, not in
// any action), and each rank its stages' `optimizer_step` after its last action. An overlapped F&B pair (a compute group, docs/execution-model.md) takes
// T_F + T_B - fb_overlap x min(T_F, T_B).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/error.hpp"
#include "ppsched/graph/hardware.hpp"
#include "ppsched/graph/time_unit.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/costs/detail/cost_model.hpp"
#include "ppsched/costs/cost_model_types.hpp"

namespace ppsched::inline PPSCHED_MODE {

// Every stage alike: the analytic set-up (T_F, T_BI, T_BW per stage, free communication).
[[nodiscard]] PPSCHED_OUTLINE CostModel uniform_costs(double forward, double backward_input, double backward_weight,
                                             TimeUnit unit = "unit");

// Throws ppsched::error, naming the field, when the model does not fit a schedule of this
// many stages and micro-batches or holds a negative, NaN or infinite value, or when its
// times or sizes add up past the largest double.
PPSCHED_OUTLINE void check_cost_model(const CostModel& c, std::int32_t stages, std::int32_t microbatches);

// The costs of (stage, micro-batch), scale applied. Throws ppsched::error when the model
// has no entry for them (check_cost_model against the schedule first).
[[nodiscard]] inline StageCost stage_cost(const CostModel& c, std::int32_t stage, std::int32_t mb, std::int32_t microbatches) {
  const auto st = static_cast<std::size_t>(stage), m = static_cast<std::size_t>(mb);
  const bool fits = stage >= 0 && mb >= 0 && mb < microbatches &&
                    (c.per_microbatch.empty()
                         ? (c.stages.size() == 1 || st < c.stages.size()) && (c.microbatch_scale.empty() || m < c.microbatch_scale.size())
                         : st * static_cast<std::size_t>(microbatches) + m < c.per_microbatch.size());
  if (!fits) {
    detail::fail({"cost model", detail::concat("has no costs for stage ", stage, ", micro-batch ", mb), "",
          "check_cost_model(model, stages, micro-batches) says what the model is missing"});
  }
  if (!c.per_microbatch.empty()) return c.per_microbatch[st * static_cast<std::size_t>(microbatches) + m];
  StageCost s = c.stages.size() == 1 ? c.stages.front() : c.stages[st];
  if (!c.microbatch_scale.empty()) {
    const double k = c.microbatch_scale[static_cast<std::size_t>(mb)];
    s.forward *= k;
    s.backward_input *= k;
    s.backward_weight *= k;
    s.activation_bytes *= k;
    s.output_bytes *= k;
    if (s.backward) *s.backward *= k;
    if (s.recompute) *s.recompute *= k;
    if (s.recompute_saved_bytes) *s.recompute_saved_bytes *= k;
    if (s.recompute_peak_bytes) *s.recompute_peak_bytes *= k;
    if (s.offload_bytes) *s.offload_bytes *= k;
  }
  return s;
}

namespace detail {

// The (stage, micro-batch) entry of a per-micro-batch table in place, or null where the model
// has no table or no such entry (stage_cost then computes the costs, or throws). The pricing
// below reads one or two fields per action: copying the whole StageCost, six optionals
// included, for each action was a sixth of a step plan's time (issue 42).
[[nodiscard]] inline const StageCost* table_entry(const CostModel& c, std::int32_t stage, std::int32_t mb,
                                                  std::int32_t microbatches) noexcept {
  if (c.per_microbatch.empty() || stage < 0 || mb < 0 || mb >= microbatches) return nullptr;
  const std::size_t i = static_cast<std::size_t>(stage) * static_cast<std::size_t>(microbatches) + static_cast<std::size_t>(mb);
  return i < c.per_microbatch.size() ? &c.per_microbatch[i] : nullptr;
}

}  // namespace detail

// What R of this stage restores (and F of a recomputed micro-batch does not keep), and what
// OFFLOAD moves: the stage's values, or their defaults (docs/execution-model.md).
[[nodiscard]] constexpr double recompute_saved_bytes(const StageCost& s) noexcept {
  return s.recompute_saved_bytes.value_or(s.activation_bytes);
}
// What R holds at once of what it restores: all of it, or one layer's (layer-wise).
[[nodiscard]] constexpr double recompute_peak_bytes(const StageCost& s) noexcept {
  return s.recompute_peak_bytes.value_or(recompute_saved_bytes(s));
}
[[nodiscard]] constexpr double recompute_time(const StageCost& s) noexcept {
  if (s.recompute) return *s.recompute;
  return s.activation_bytes > 0.0 ? s.forward * (recompute_saved_bytes(s) / s.activation_bytes) : s.forward;
}
[[nodiscard]] constexpr double offload_bytes(const StageCost& s) noexcept {
  return s.offload_bytes.value_or(s.activation_bytes);
}
namespace detail {

// One stored activation's bytes of (stage, micro-batch), from the table in place where it has them.
[[nodiscard]] inline double activation_bytes_at(const CostModel& c, std::int32_t stage, std::int32_t mb, std::int32_t microbatches) {
  if (const StageCost* e = table_entry(c, stage, mb, microbatches)) return e->activation_bytes;
  return stage_cost(c, stage, mb, microbatches).activation_bytes;
}

}  // namespace detail

// What one OFFLOAD (and its RELOAD) of a micro-batch moves: offload_bytes, or, where R also
// recomputes that micro-batch, at most what F kept for R — the memory walk's count
// (validate/memory.hpp, MemoryFractions::moved), so a copy is priced from the bytes it moves.
[[nodiscard]] constexpr double moved_bytes(const StageCost& s, bool recomputed) noexcept {
  if (!recomputed) return offload_bytes(s);
  const double kept = s.activation_bytes - recompute_saved_bytes(s);
  return std::min(offload_bytes(s), kept > 0.0 ? kept : 0.0);
}

namespace detail {

[[nodiscard]] inline double compute_time_of(const CostModel& c, const StageCost& s, Op op, bool recomputed) {
  switch (op) {
    case Op::F: return s.forward + c.fixed_costs.action;
    case Op::B: return s.backward.value_or(s.backward_input + s.backward_weight) + c.fixed_costs.action;
    case Op::BI: return s.backward_input + c.fixed_costs.action;
    case Op::BW: return s.backward_weight + c.fixed_costs.action;
    case Op::R: return recompute_time(s) + c.fixed_costs.action;
    // A copy is issued like an action and moves its bytes over the host link.
    case Op::OFFLOAD:
    case Op::RELOAD: return c.host_link.transfer_time(moved_bytes(s, recomputed)) + c.fixed_costs.action;
    case Op::SEND_F:
    case Op::RECV_F:
    case Op::SEND_B:
    case Op::RECV_B: return 0.0;  // transfer_time prices communication
  }
  return 0.0;
}

}  // namespace detail

// `recomputed`: the action's micro-batch has an R on its stage (read only for OFFLOAD and
// RELOAD, which move less then: moved_bytes).
[[nodiscard]] inline double compute_time(const CostModel& c, const Action& a, std::int32_t microbatches,
                                         bool recomputed = false) {
  if (const StageCost* e = detail::table_entry(c, a.stage, a.microbatch, microbatches)) {
    return detail::compute_time_of(c, *e, a.op, recomputed);
  }
  return detail::compute_time_of(c, stage_cost(c, a.stage, a.microbatch, microbatches), a.op, recomputed);
}

// Bytes moved by a communication action: the output of the lower stage of its boundary
// (an activation going up, or the gradient of that activation coming down).
[[nodiscard]] inline double transfer_bytes(const CostModel& c, const Action& a, std::int32_t microbatches) {
  const std::int32_t lower_stage = (a.op == Op::SEND_F || a.op == Op::RECV_B) ? a.stage : a.stage - 1;
  if (const StageCost* e = detail::table_entry(c, lower_stage, a.microbatch, microbatches)) return e->output_bytes;
  return stage_cost(c, lower_stage, a.microbatch, microbatches).output_bytes;
}

[[nodiscard]] inline double transfer_time(const CostModel& c, const Action& a, std::int32_t microbatches) {
  const double bytes = transfer_bytes(c, a, microbatches);
  return c.link.transfer_time(bytes) + c.fixed_costs.transfer;
}

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/costs/impl/cost_model.ipp"
#endif
