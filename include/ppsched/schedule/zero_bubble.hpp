// The zero-bubble families of Qi et al., "Zero Bubble Pipeline Parallelism" (ICLR 2024).
// They split each backward into BI (gradient of the input, on the critical path: the stage
// before is waiting for it) and BW (gradient of the weights, needed by nobody downstream),
// and move BW passes into what would otherwise be bubbles.
//
// - ZB-H1 keeps 1F1B's memory (p-s activations awaiting BI on stage s) and delays the BW
//   passes of stage s by s micro-batches, so the BI chain of the cool-down runs unhindered
//   and the delayed BWs fill the tail. Idle per rank (p-1)(T_F+T_BI-T_BW).
// - ZB-H2 warms up with 2(p-s)-1 forwards (2p-1 activations on the first stage) and delays
//   the BW passes of stage s by 2s micro-batches, which turns the trapezoid of 1F1B into a
//   parallelogram: each rank's own span holds (p-1)(T_F+T_BI-2T_BW) of idle when
//   T_BW <= T_F <= T_BI, which is zero when the three are equal.
// - ZB-V places two chunks per rank in a V (rank r holds stages r and 2p-1-r) and follows the
//   handcrafted V schedule of the paper's section 6 (as PyTorch's ScheduleZBVZeroBubble does).
//
// All three emit BI and BW, never B, and set Schedule::split_backward.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/request.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/schedule/detail/zero_bubble.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {  // the canonical names; users read them from family_info(name).name
inline constexpr std::string_view zb_h1_name = "zb-h1";
inline constexpr std::string_view zb_h2_name = "zb-h2";
inline constexpr std::string_view zb_v_name = "zb-v";
}  // namespace detail

namespace detail {

// What each generator below refuses in a request (FamilyInfo::problem), or nothing.
[[nodiscard]] inline std::optional<error_context> zb_h1_problem(const ScheduleRequest& r) {
  return sizes_and_chunks_problem(detail::zb_h1_name, r, 1, "zb-h1 places one stage per rank", "for two chunks per rank use zb-v");
}
[[nodiscard]] inline std::optional<error_context> zb_h2_problem(const ScheduleRequest& r) {
  return sizes_and_chunks_problem(detail::zb_h2_name, r, 1, "zb-h2 places one stage per rank", "for two chunks per rank use zb-v");
}
[[nodiscard]] PPSCHED_OUTLINE std::optional<error_context> zb_v_problem(const ScheduleRequest& r);

}  // namespace detail

// ZB-H1: any p, m >= 1; v = 1.
[[nodiscard]] PPSCHED_OUTLINE Schedule make_zb_h1(const ScheduleRequest& r);

// ZB-H2: any p, m >= 1; v = 1. The bubble vanishes only once m >= 2p-1 (the warm-up of the
// first stage); with fewer micro-batches the schedule is complete but keeps a bubble.
[[nodiscard]] PPSCHED_OUTLINE Schedule make_zb_h2(const ScheduleRequest& r);

// ZB-V: V-shape placement, any p, m >= 1; v = 2. Rank r holds chunk 0 = stage r and chunk 1 =
// stage 2p-1-r. Its program, built for n = max(m, 2p-1) micro-batches (the fewest that fill
// the V) and then stripped of micro-batches >= m:
//   1. 2(p-r)-1 forwards of chunk 0;
//   2. r times: F of chunk 1, F of chunk 0;
//   3. p-r times: F, BI, BW of chunk 1;
//   4. until both chunks have run every forward: [F of chunk 0 while any remain], BI and BW
//      of chunk 0, F, BI and BW of chunk 1;
//   5. r times: BI of chunk 0, BI of chunk 1 (their BWs deferred);
//   6. p-r times: BI of chunk 0, then the oldest deferred BW of chunk 0;
//   7. the deferred BWs of chunk 1, then those of chunk 0.
// Stripping keeps the schedule valid: every dependency of a micro-batch lies within that
// micro-batch, and the survivors keep their relative order.
[[nodiscard]] PPSCHED_OUTLINE Schedule make_zb_v(const ScheduleRequest& r);

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/schedule/impl/zero_bubble.ipp"
#endif
