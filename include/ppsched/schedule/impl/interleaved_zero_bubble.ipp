// The bodies of <ppsched/schedule/interleaved_zero_bubble.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

[[nodiscard]] PPSCHED_OUTLINE std::optional<error_context> interleaved_zero_bubble_problem(const ScheduleRequest& r) {
  if (auto problem = request_size_problem(detail::interleaved_zero_bubble_name, r)) return problem;
  if (interleaved_zero_bubble_accepts(r)) return std::nullopt;
  const std::int32_t p = r.ranks, m = r.microbatches;
  std::int32_t below = m - 1, above = m + 1;
  while (!interleaved_zb_rounds_even(p, below)) --below;  // every m < 2p is even
  while (!interleaved_zb_rounds_even(p, above)) ++above;  // so is every multiple of p
  return error_context{family_subject(detail::interleaved_zero_bubble_name),
                       detail::concat("with v > 1 chunks per rank, m must split into max(1, m/p) = ", m / p,
                              " equal rounds (got m=", m, "), because PyTorch runs the micro-batches through each "
                              "chunk in rounds of m/rounds"),
                       detail::concat("request ", to_string(r)),
                       detail::concat("nearest valid: m=", below, " or m=", above, ", or v=1 (ZB-H1's order, any m)")};
}

}  // namespace detail
}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE Schedule make_interleaved_zero_bubble(const ScheduleRequest& r) {
  if (auto problem = detail::interleaved_zero_bubble_problem(r)) detail::fail(*problem);
  const std::int32_t p = r.ranks, m = r.microbatches, v = r.chunks;
  Schedule s = detail::empty_schedule(detail::interleaved_zero_bubble_name, r, looped_placement(p, v), true,
                                      3 * static_cast<std::size_t>(m) * static_cast<std::size_t>(v));
  const std::int32_t k = detail::interleaved_zb_round_size(p, m);
  const std::int32_t total = m * v;
  const auto microbatch_of = [&](std::int32_t j) { return (j / (k * v)) * k + j % k; };
  const auto forward_stage = [&](std::int32_t j, std::int32_t rank) { return ((j / k) % v) * p + rank; };
  const auto backward_stage = [&](std::int32_t j, std::int32_t rank) { return (v - 1 - (j / k) % v) * p + rank; };
  for (std::int32_t rank = 0; rank < p; ++rank) {
    auto& program = s.programs[static_cast<std::size_t>(rank)];
    const auto emit = [&](Op op, std::int32_t stage, std::int32_t j) {
      program.push_back(detail::compute_action(op, stage, microbatch_of(j)));
    };
    const std::int32_t warmup = std::min((v - 1) * k + p - 1 - rank, total);
    for (std::int32_t j = 0; j < warmup; ++j) emit(Op::F, forward_stage(j, rank), j);
    for (std::int32_t j = 0; j < total; ++j) {
      if (j + warmup < total) emit(Op::F, forward_stage(j + warmup, rank), j + warmup);
      emit(Op::BI, backward_stage(j, rank), j);
      if (j >= rank) emit(Op::BW, backward_stage(j - rank, rank), j - rank);
    }
    for (std::int32_t j = std::max(0, total - rank); j < total; ++j) emit(Op::BW, backward_stage(j, rank), j);
  }
  return s;
}

}  // namespace ppsched
