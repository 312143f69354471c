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

inline constexpr std::string_view one_f_one_b_name = "1f1b";
inline constexpr std::string_view interleaved_1f1b_name = "interleaved-1f1b";

namespace detail {

// One stage per rank. Stage s warms up with min(p-s-1, m) forwards, then alternates F and B,
// then drains the remaining backwards. With m < p the warm-up is cut to m and the schedule
// is still complete and deadlock-free; it is simply all bubble at the tail.
inline void append_1f1b_program(std::vector<Action>& program, std::int32_t stage, std::int32_t ranks,
                                std::int32_t microbatches) {
  const std::int32_t warmup = std::min(ranks - stage - 1, microbatches);
  for (std::int32_t mb = 0; mb < warmup; ++mb) program.push_back(compute_action(Op::F, stage, mb));
  for (std::int32_t mb = 0; mb + warmup < microbatches; ++mb) {
    program.push_back(compute_action(Op::F, stage, mb + warmup));
    program.push_back(compute_action(Op::B, stage, mb));
  }
  for (std::int32_t mb = microbatches - warmup; mb < microbatches; ++mb)
    program.push_back(compute_action(Op::B, stage, mb));
}

}  // namespace detail

namespace detail {

// What make_1f1b refuses in a request (FamilyInfo::problem), or nothing.
[[nodiscard]] inline std::optional<error_context> one_f_one_b_problem(const ScheduleRequest& r) {
  return sizes_and_chunks_problem(one_f_one_b_name, r, 1, "1f1b places one stage per rank",
                                  "for several chunks per rank use interleaved-1f1b");
}

}  // namespace detail

// 1F1B: any p, m >= 1; v = 1. Idle per rank (p-1)(T_F+T_B); min(p-s, m) activations in flight
// on stage s.
[[nodiscard]] inline Schedule make_1f1b(const ScheduleRequest& r) {
  if (auto problem = detail::one_f_one_b_problem(r)) fail(*problem);
  Schedule s = detail::empty_schedule(one_f_one_b_name, r, one_stage_per_rank_placement(r.ranks), false,
                                      2 * static_cast<std::size_t>(r.microbatches));
  for (std::int32_t rank = 0; rank < r.ranks; ++rank)
    detail::append_1f1b_program(s.programs[static_cast<std::size_t>(rank)], rank, r.ranks, r.microbatches);
  return s;
}

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
[[nodiscard]] inline std::optional<error_context> interleaved_1f1b_problem(const ScheduleRequest& r) {
  if (auto problem = request_size_problem(interleaved_1f1b_name, r)) return problem;
  if (interleaved_1f1b_accepts(r)) return std::nullopt;
  const std::int32_t below = (r.microbatches / r.ranks) * r.ranks;
  const std::int32_t above = below + r.ranks;
  return error_context{
      family_subject(interleaved_1f1b_name),
      concat("with v > 1 chunks per rank, m must be a multiple of p=", r.ranks, " (got m=", r.microbatches,
             "), because Megatron's interleaving runs micro-batches through each chunk in groups of p"),
      concat("request ", to_string(r)),
      below >= r.ranks ? concat("nearest valid: m=", below, " or m=", above)
                       : concat("nearest valid: m=", above, ", or v=1 (plain 1F1B accepts any m)")};
}

}  // namespace detail

// Interleaved 1F1B: looped placement (stage c*p + rank), any p, v >= 1; for v > 1 m must be a
// multiple of p (for v = 1 the schedule is 1F1B and any m works). Rank r's program is
// Megatron's: virtual micro-batch k (0 <= k < m*v) is micro-batch (k / (p*v))*p + k % p of
// chunk (k / p) % v in the forward direction and of chunk v-1-(k / p) % v in the backward
// direction; rank r warms up with min(2(p-r-1) + (v-1)p, m*v) forwards, then alternates one
// forward and one backward, then drains. Idle per rank (p-1)(T_F+T_B)/v, where T_F and T_B
// are a whole rank's costs (v chunks).
[[nodiscard]] inline Schedule make_interleaved_1f1b(const ScheduleRequest& r) {
  if (auto problem = detail::interleaved_1f1b_problem(r)) fail(*problem);
  Schedule s = detail::empty_schedule(
      interleaved_1f1b_name, r, looped_placement(r.ranks, r.chunks), false,
      2 * static_cast<std::size_t>(r.microbatches) * static_cast<std::size_t>(r.chunks));
  if (r.chunks == 1) {
    for (std::int32_t rank = 0; rank < r.ranks; ++rank)
      detail::append_1f1b_program(s.programs[static_cast<std::size_t>(rank)], rank, r.ranks, r.microbatches);
    return s;
  }
  const std::int32_t p = r.ranks;
  const std::int32_t v = r.chunks;
  const std::int32_t total = r.microbatches * v;
  const auto chunk_of = [&](std::int32_t k) { return (k / p) % v; };
  const auto microbatch_of = [&](std::int32_t k) { return (k / (p * v)) * p + k % p; };
  for (std::int32_t rank = 0; rank < p; ++rank) {
    auto& program = s.programs[static_cast<std::size_t>(rank)];
    const auto forward = [&](std::int32_t k) {
      program.push_back(detail::compute_action(Op::F, chunk_of(k) * p + rank, microbatch_of(k)));
    };
    const auto backward = [&](std::int32_t k) {
      program.push_back(detail::compute_action(Op::B, (v - 1 - chunk_of(k)) * p + rank, microbatch_of(k)));
    };
    const std::int32_t warmup = std::min(2 * (p - rank - 1) + (v - 1) * p, total);
    for (std::int32_t k = 0; k < warmup; ++k) forward(k);
    for (std::int32_t k = 0; k + warmup < total; ++k) {
      forward(k + warmup);
      backward(k);
    }
    for (std::int32_t k = total - warmup; k < total; ++k) backward(k);
  }
  return s;
}

}  // namespace ppsched
