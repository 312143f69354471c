// The bodies of <ppsched/schedule/dualpipev.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include <deque>

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE bool dualpipev_accepts(const ScheduleRequest& r) noexcept {
  return r.ranks >= 1 && r.chunks == 2 && r.microbatches >= 2 * r.ranks &&
         3 * std::int64_t{r.ranks} * r.chunks * r.microbatches <= detail::max_generated_actions;
}

}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

[[nodiscard]] PPSCHED_OUTLINE std::optional<error_context> dualpipev_problem(const ScheduleRequest& r) {
  if (auto problem = sizes_and_chunks_problem(detail::dualpipev_name, r, 2, "dualpipev places two chunks per rank in a V shape",
                                              "for one stage per rank use zb-h1 or zb-h2")) {
    return problem;
  }
  const std::int32_t p = r.ranks, m = r.microbatches;
  if (m >= 2 * p) return std::nullopt;
  return error_context{family_subject(detail::dualpipev_name),
                       detail::concat("needs at least 2p = ", 2 * p, " micro-batches to fill its V (got m=", m, ")"),
                       detail::concat("request ", to_string(r)), detail::concat("nearest valid: m=", 2 * p, ", or use zb-v")};
}

}  // namespace detail
}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE Schedule make_dualpipev(const ScheduleRequest& r) {
  if (auto problem = detail::dualpipev_problem(r)) detail::fail(*problem);
  const std::int32_t p = r.ranks, m = r.microbatches;
  Schedule out = detail::empty_schedule(detail::dualpipev_name, r, v_shape_placement(p), true, 6 * static_cast<std::size_t>(m));
  for (std::int32_t rank = 0; rank < p; ++rank) {
    auto& program = out.programs[static_cast<std::size_t>(rank)];
    std::uint32_t next_group = 1;
    const std::int32_t c0 = rank, c1 = 2 * p - 1 - rank;
    std::int32_t f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    std::deque<std::pair<std::int32_t, std::int32_t>> deferred;  // (stage, micro-batch) awaiting BW
    const auto forward = [&](std::int32_t stage) {
      std::int32_t& next = stage == c0 ? f0 : f1;
      program.push_back(detail::compute_action(Op::F, stage, next++));
    };
    const auto backward = [&](std::int32_t stage, bool split) {
      std::int32_t& next = stage == c0 ? b0 : b1;
      program.push_back(detail::compute_action(split ? Op::BI : Op::B, stage, next));
      if (split) deferred.emplace_back(stage, next);
      ++next;
    };
    const auto weight = [&]() {
      if (deferred.empty()) return;
      program.push_back(detail::compute_action(Op::BW, deferred.front().first, deferred.front().second));
      deferred.pop_front();
    };
    const auto pair = [&](std::int32_t forward_stage, std::int32_t backward_stage) {
      forward(forward_stage);
      backward(backward_stage, false);
      program[program.size() - 2].group = next_group;
      program.back().group = next_group++;
    };

    for (std::int32_t i = 0; i < 2 * (p - rank - 1); ++i) forward(c0);
    for (std::int32_t i = 0; i < rank + 1; ++i) {
      forward(c0);
      forward(c1);
    }
    for (std::int32_t i = 0; i < p - rank - 1; ++i) {
      backward(c1, true);
      weight();
      forward(c1);
    }
    for (std::int32_t i = 0; i < m - 2 * p + rank + 1; ++i) {
      if (i == 0 && rank == p - 1) {
        forward(c0);
        backward(c1, false);
      } else {
        pair(c0, c1);
      }
      pair(c1, c0);
    }
    for (std::int32_t i = 0; i < p - rank - 1; ++i) {
      backward(c1, false);
      pair(c1, c0);
    }
    bool split = false;
    for (std::int32_t i = 0; i < rank + 1; ++i) {
      if (i == (rank + 1) / 2 && rank % 2 == 1) split = true;
      backward(c1, split);
      if (i == (rank + 1) / 2 && rank % 2 == 0) split = true;
      backward(c0, split);
    }
    for (std::int32_t i = 0; i < p - rank - 1; ++i) {
      weight();
      backward(c0, true);
    }
    while (!deferred.empty()) weight();
  }
  return out;
}

}  // namespace ppsched
