// Internals of <ppsched/plan/memory_policy.hpp>: placing recomputation and offload actions into a
// schedule. They are in ppsched::detail and not part of the API: no example or page uses them,
// and they may change in any release (docs/architecture.md).
//
// They build on the part's types, which <ppsched/plan/memory_policy_types.hpp> holds.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/error.hpp"
#include "ppsched/lower/lower.hpp"
#include "ppsched/plan/memory_policy_types.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/sim/simulate.hpp"
#include "ppsched/validate/validate.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace detail {

inline void check_memory_policy(const plan::MemoryPolicy& p, std::size_t stage, const StageCost& cost) {
  const std::string where = detail::concat("policies[", stage, "]");
  if (!(p.fraction >= 0.0 && p.fraction <= 1.0)) {
    detail::fail({"memory policy", detail::concat("fraction ", p.fraction, " is outside [0, 1]"), where,
          "give the share of the stage's stored activation to recompute or offload, from 0 to 1"});
  }
  if (p.saved_bytes && !(*p.saved_bytes >= 0.0 && *p.saved_bytes <= cost.activation_bytes)) {
    detail::fail({"memory policy",
          detail::concat("saved_bytes ", *p.saved_bytes, " is not within the stage's activation_bytes ", cost.activation_bytes),
          where, "give the bytes the recomputed part stores, at most the stage's activation"});
  }
  if (p.recompute_time && !(std::isfinite(*p.recompute_time) && *p.recompute_time >= 0.0)) {
    detail::fail({"memory policy", detail::concat("recompute_time ", *p.recompute_time, " is not a finite time >= 0"), where,
          "give the time of re-running the recomputed part, in the cost model's unit"});
  }
  if (p.layerwise()) {
    if (!p.saved_bytes || !p.recompute_time || !p.peak_bytes) {
      detail::fail({"memory policy", detail::concat(plan::memory_policy_kind_name(p.kind), " lacks saved_bytes, peak_bytes or recompute_time"), where,
            "build it with MemoryPolicy::layerwise(saved, peak, time) (or layerwise_offload) or "
            "layerwise_recompute_policy(graph, ...)"});
    }
    if (!(*p.peak_bytes >= 0.0 && *p.peak_bytes <= cost.activation_bytes)) {
      detail::fail({"memory policy", detail::concat("peak_bytes ", *p.peak_bytes, " is not within the stage's activation_bytes ", cost.activation_bytes),
            where, "give the stage's largest single layer's activation"});
    }
    return;
  }
  if (p.peak_bytes) {
    detail::fail({"memory policy", detail::concat("peak_bytes is set on a ", plan::memory_policy_kind_name(p.kind), " policy"), where,
          "peak_bytes belongs to layer-wise recompute (MemoryPolicy::layerwise)"});
  }
  if ((p.saved_bytes || p.recompute_time) && p.kind != plan::MemoryPolicyKind::selective_recompute) {
    detail::fail({"memory policy", detail::concat("saved_bytes or recompute_time is set on a ", plan::memory_policy_kind_name(p.kind), " policy"),
          where, "use MemoryPolicy::selective_part(bytes, time) for a part of the stage"});
  }
}

// The stage's costs under its policy.
inline void apply_policy(const plan::MemoryPolicy& p, StageCost& c) {
  c.recompute_saved_bytes.reset();
  c.recompute.reset();
  c.recompute_peak_bytes.reset();
  c.offload_bytes.reset();
  switch (p.kind) {
    case plan::MemoryPolicyKind::none:
    case plan::MemoryPolicyKind::full_recompute: break;  // the defaults: all of it, at the forward's time
    case plan::MemoryPolicyKind::selective_recompute:
      c.recompute_saved_bytes = p.saved_bytes.value_or(p.fraction * c.activation_bytes);
      if (p.recompute_time) {
        c.recompute = *p.recompute_time;
      } else if (c.activation_bytes <= 0.0) {
        c.recompute = p.fraction * c.forward;  // (no bytes to take the share from)
      }
      break;
    case plan::MemoryPolicyKind::offload: c.offload_bytes = p.fraction * c.activation_bytes; break;
    case plan::MemoryPolicyKind::layerwise_recompute:
    case plan::MemoryPolicyKind::layerwise_offload:
      c.recompute_saved_bytes = *p.saved_bytes;
      c.recompute_peak_bytes = std::min(*p.peak_bytes, *p.saved_bytes);
      c.recompute = *p.recompute_time;
      // The checkpoints: what F keeps for R.
      if (p.kind == plan::MemoryPolicyKind::layerwise_offload) c.offload_bytes = c.activation_bytes - *p.saved_bytes;
      break;
  }
}

// The cost model with each stage's policy written into its StageCost (a single StageCost for
// every stage is expanded to one per stage when the policies differ). `policies`: one per
// stage, or one for every stage.
[[nodiscard]] inline CostModel costs_with_policies(const CostModel& costs, std::span<const plan::MemoryPolicy> policies,
                                                   std::int32_t stages, std::int32_t microbatches) {
  check_cost_model(costs, stages, microbatches);
  const auto S = static_cast<std::size_t>(stages);
  if (policies.size() != 1 && policies.size() != S) {
    detail::fail({"memory policies", detail::concat("has ", policies.size(), " policies for a schedule of ", stages, " stages"), "",
          "give one MemoryPolicy per stage, or one for every stage"});
  }
  const auto policy_of = [&](std::size_t s) -> const plan::MemoryPolicy& { return policies[policies.size() == 1 ? 0 : s]; };
  CostModel out = costs;
  if (!out.per_microbatch.empty()) {
    const std::size_t M = static_cast<std::size_t>(microbatches);
    for (std::size_t s = 0; s < S; ++s) {
      for (std::size_t m = 0; m < M; ++m) {
        detail::check_memory_policy(policy_of(s), s, out.per_microbatch[s * M + m]);
        detail::apply_policy(policy_of(s), out.per_microbatch[s * M + m]);
      }
    }
    return out;
  }
  if (out.stages.size() == 1 && S > 1) out.stages.assign(S, out.stages.front());
  for (std::size_t s = 0; s < out.stages.size(); ++s) {
    detail::check_memory_policy(policy_of(s), s, out.stages[s]);
    detail::apply_policy(policy_of(s), out.stages[s]);
  }
  check_cost_model(out, stages, microbatches);
  return out;
}

}  // namespace detail
}  // namespace ppsched
