// The bodies of <ppsched/schedule/zero_bubble.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

[[nodiscard]] PPSCHED_OUTLINE std::optional<error_context> zb_v_problem(const ScheduleRequest& r) {
  return sizes_and_chunks_problem(detail::zb_v_name, r, 2, "zb-v places two chunks per rank in a V shape",
                                  "for one stage per rank use zb-h1 or zb-h2");
}

}  // namespace detail
}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE Schedule make_zb_h1(const ScheduleRequest& r) {
  if (auto problem = detail::zb_h1_problem(r)) detail::fail(*problem);
  Schedule s = detail::empty_schedule(detail::zb_h1_name, r, one_stage_per_rank_placement(r.ranks), true,
                                      3 * static_cast<std::size_t>(r.microbatches));
  for (std::int32_t rank = 0; rank < r.ranks; ++rank)
    detail::append_zero_bubble_program(s.programs[static_cast<std::size_t>(rank)], rank, r.microbatches,
                                       r.ranks - rank, rank);
  return s;
}

[[nodiscard]] PPSCHED_OUTLINE Schedule make_zb_h2(const ScheduleRequest& r) {
  if (auto problem = detail::zb_h2_problem(r)) detail::fail(*problem);
  Schedule s = detail::empty_schedule(detail::zb_h2_name, r, one_stage_per_rank_placement(r.ranks), true,
                                      3 * static_cast<std::size_t>(r.microbatches));
  for (std::int32_t rank = 0; rank < r.ranks; ++rank)
    detail::append_zero_bubble_program(s.programs[static_cast<std::size_t>(rank)], rank, r.microbatches,
                                       2 * (r.ranks - rank) - 1, 2 * rank);
  return s;
}

[[nodiscard]] PPSCHED_OUTLINE Schedule make_zb_v(const ScheduleRequest& r) {
  if (auto problem = detail::zb_v_problem(r)) detail::fail(*problem);
  const std::int32_t p = r.ranks;
  const std::int32_t m = r.microbatches;
  const std::int32_t n = std::max(m, 2 * p - 1);
  Schedule s =
      detail::empty_schedule(detail::zb_v_name, r, v_shape_placement(p), true, 6 * static_cast<std::size_t>(m));
  for (std::int32_t rank = 0; rank < p; ++rank) {
    auto& program = s.programs[static_cast<std::size_t>(rank)];
    const std::int32_t stage0 = rank;
    const std::int32_t stage1 = 2 * p - 1 - rank;
    std::int32_t f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    const auto emit = [&](Op op, std::int32_t stage, std::int32_t mb) {
      if (mb < m) program.push_back(detail::compute_action(op, stage, mb));
    };
    for (std::int32_t i = 0; i < 2 * (p - rank) - 1; ++i) emit(Op::F, stage0, f0++);
    for (std::int32_t i = 0; i < rank; ++i) {
      emit(Op::F, stage1, f1++);
      emit(Op::F, stage0, f0++);
    }
    for (std::int32_t i = 0; i < p - rank; ++i) {
      emit(Op::F, stage1, f1++);
      emit(Op::BI, stage1, b1);
      emit(Op::BW, stage1, b1++);
    }
    while (f1 < f0 || f0 < n) {
      if (f0 < n) emit(Op::F, stage0, f0++);
      emit(Op::BI, stage0, b0);
      emit(Op::BW, stage0, b0++);
      emit(Op::F, stage1, f1++);
      emit(Op::BI, stage1, b1);
      emit(Op::BW, stage1, b1++);
    }
    std::int32_t w0 = b0, w1 = b1;
    for (std::int32_t i = 0; i < rank; ++i) {
      emit(Op::BI, stage0, b0++);
      emit(Op::BI, stage1, b1++);
    }
    for (std::int32_t i = 0; i < p - rank; ++i) {
      emit(Op::BI, stage0, b0++);
      emit(Op::BW, stage0, w0++);
    }
    while (w1 < b1) emit(Op::BW, stage1, w1++);
    while (w0 < b0) emit(Op::BW, stage0, w0++);
  }
  return s;
}

}  // namespace ppsched
