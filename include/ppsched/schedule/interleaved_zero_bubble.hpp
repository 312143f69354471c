// Interleaved zero bubble: PyTorch's ScheduleInterleavedZeroBubble, the "ZB1P" schedule of Qi
// et al. (ICLR 2024) run on the looped placement of interleaved 1F1B. Each rank holds v chunks
// (stage c*p + r on rank r), walks them like interleaved 1F1B and splits every backward into
// BI and BW as ZB-H1 does: the BWs of rank r trail its BIs by r, so the cool-down's BI chain
// runs unhindered and the delayed BWs fill the tail. Chunks divide the fill and drain by v, the
// split backward removes T_BW of each step of it; at unit costs, p=8, m=16, v=2, a step takes
// 51.5 against ZB-H1's 55 and interleaved 1F1B's 58.5.
//
// The micro-batches go through each chunk in rounds, as PyTorch cuts them: max(1, m / p)
// rounds of m / rounds micro-batches each, so m must be a multiple of the round count (any m
// < 2p, every multiple of p, and others such as m=10 at p=4). With v = 1 the order is ZB-H1's.
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
inline constexpr std::string_view interleaved_zero_bubble_name = "interleaved-zb";
}  // namespace detail

namespace detail {

// PyTorch's rounds: the micro-batches a chunk runs before the rank moves to its next chunk.
[[nodiscard]] constexpr std::int32_t interleaved_zb_round_size(std::int32_t ranks, std::int32_t microbatches) noexcept {
  return microbatches / std::max(1, microbatches / ranks);
}

[[nodiscard]] constexpr bool interleaved_zb_rounds_even(std::int32_t ranks, std::int32_t microbatches) noexcept {
  return microbatches % std::max(1, microbatches / ranks) == 0;
}

}  // namespace detail

// Whether make_interleaved_zero_bubble(r) would succeed (the sizes every family checks aside):
// any p and v, m a multiple of max(1, m / p) when v > 1 (PyTorch's rule; v = 1 is ZB-H1,
// which takes any m).
[[nodiscard]] constexpr bool interleaved_zero_bubble_accepts(const ScheduleRequest& r) noexcept {
  return r.ranks >= 1 && r.microbatches >= 1 && r.chunks >= 1 &&
         (r.chunks == 1 || detail::interleaved_zb_rounds_even(r.ranks, r.microbatches));
}

namespace detail {

// What make_interleaved_zero_bubble refuses in a request (FamilyInfo::problem), or nothing.
[[nodiscard]] PPSCHED_OUTLINE std::optional<error_context> interleaved_zero_bubble_problem(const ScheduleRequest& r);

}  // namespace detail

// Interleaved zero bubble, looped placement, split backward. With k = m/rounds micro-batches
// per round and t = m*v chunk passes per rank, rank r's j-th forward (and j-th backward) runs
// micro-batch (j / kv)*k + j mod k on chunk (j / k) mod v (backward: v-1 minus that). Rank r
// warms up with w = min((v-1)k + p-1-r, t) forwards; then for j = 0 .. t-1: the forward
// j + w (while any remain), the BI j, and the BW j - r once j >= r; then its remaining BWs.
// PyTorch pads these orders with idle steps; the orders, without them, are the same.
[[nodiscard]] PPSCHED_OUTLINE Schedule make_interleaved_zero_bubble(const ScheduleRequest& r);

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/schedule/impl/interleaved_zero_bubble.ipp"
#endif
