// The one-forward-one-backward families. 1F1B (PipeDream-Flush) runs a short warm-up of
// forwards, then alternates one forward with one backward, then drains the backwards; it has
// GPipe's bubble but keeps only p-s activations on stage s instead of m. Interleaved 1F1B
// (Megatron-LM's virtual pipeline) gives each rank v chunks in a loop and walks them in
// groups of p micro-batches, which divides the bubble by v at the price of more
// communication and of Megatron's rule that m be a multiple of p.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/request.hpp"
#include "ppsched/schedule/schedule.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {  // the canonical names; users read them from family_info(name).name
inline constexpr std::string_view one_f_one_b_name = "1f1b";
inline constexpr std::string_view interleaved_1f1b_name = "interleaved-1f1b";
}  // namespace detail

namespace detail {

// One stage per rank. Stage s warms up with min(p-s-1, m) forwards, then alternates F and B,
// then drains the remaining backwards. With m < p the warm-up is cut to m and the schedule
// is still complete and deadlock-free; it is simply all bubble at the tail.
PPSCHED_OUTLINE void append_1f1b_program(std::vector<Action>& program, std::int32_t stage, std::int32_t ranks,
                                std::int32_t microbatches);

}  // namespace detail

namespace detail {

// What make_1f1b refuses in a request (FamilyInfo::problem), or nothing.
[[nodiscard]] PPSCHED_OUTLINE std::optional<error_context> one_f_one_b_problem(const ScheduleRequest& r);

}  // namespace detail

// 1F1B: any p, m >= 1; v = 1. Idle per rank (p-1)(T_F+T_B); min(p-s, m) activations in flight
// on stage s.
[[nodiscard]] PPSCHED_OUTLINE Schedule make_1f1b(const ScheduleRequest& r);

// The micro-batch group size Megatron-LM uses by default (microbatch_group_size_per_vp_stage
// = p): a rank runs p micro-batches through one chunk before moving to the next chunk.
// Megatron requires the last group to be full or at least p long, which with groups of p
// means m must be a multiple of p; a shorter group would leave the pipeline waiting.
[[nodiscard]] constexpr bool interleaved_1f1b_accepts(const ScheduleRequest& r) noexcept {
  return r.ranks >= 1 && r.microbatches >= 1 && r.chunks >= 1 &&
         (r.chunks == 1 || r.microbatches % r.ranks == 0);
}

namespace detail {

// What make_interleaved_1f1b refuses in a request (FamilyInfo::problem), or nothing.
[[nodiscard]] PPSCHED_OUTLINE std::optional<error_context> interleaved_1f1b_problem(const ScheduleRequest& r);

}  // namespace detail

// Interleaved 1F1B: looped placement (stage c*p + rank), any p, v >= 1; for v > 1 m must be a
// multiple of p (for v = 1 the schedule is 1F1B and any m works). Rank r's program is
// Megatron's: virtual micro-batch k (0 <= k < m*v) is micro-batch (k / (p*v))*p + k % p of
// chunk (k / p) % v in the forward direction and of chunk v-1-(k / p) % v in the backward
// direction; rank r warms up with min(2(p-r-1) + (v-1)p, m*v) forwards, then alternates one
// forward and one backward, then drains. Idle per rank (p-1)(T_F+T_B)/v, where T_F and T_B
// are a whole rank's costs (v chunks).
[[nodiscard]] PPSCHED_OUTLINE Schedule make_interleaved_1f1b(const ScheduleRequest& r);

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/schedule/impl/one_f_one_b.ipp"
#endif
