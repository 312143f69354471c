// DualPipeV: DeepSeek's DualPipe cut in half (Sea AI Lab's "cut-in-half" V schedule, as in
// deepseek-ai/DualPipe's dualpipev.py). Two chunks per rank in a V (rank r holds stages r and
// 2p-1-r, as ZB-V), at least 2p micro-batches, and a steady state of F&B pairs: the forward of
// one chunk run overlapped with the backward of the other chunk, so that one micro-batch's
// communication hides under the other's computation. DeepSeek's table gives its bubble as
// (p-1)(T_F&B + T_B - 3 T_BW), T_F&B being the time of one overlapped pair, for p+1 stages'
// worth of activations per device.
//
// Each pair is emitted as a compute group (docs/execution-model.md, "Overlapped pairs"): the
// pair's F then its B, adjacent, sharing a nonzero Action::group. The validator, lower(), the
// simulator (CostModel::fb_overlap says how much of the pair overlaps) and run_dependencies()
// treat the two as one item; the executor runs them as F then B. Rank r's program, with
// c0 = stage r, c1 = stage 2p-1-r and deferred BWs run oldest first:
//   1. 2(p-r-1) forwards of c0;
//   2. r+1 times: F c0, F c1;
//   3. p-r-1 times: BI c1, its BW, F c1;
//   4. m-2p+r+1 times: pair (F c0, B c1), pair (F c1, B c0) — on the last rank the first
//      (F c0, B c1) is not overlapped;
//   5. p-r-1 times: B c1, pair (F c1, B c0);
//   6. r+1 times: backward of c1, backward of c0 — full B until halfway, then BI with the BW
//      deferred (from c1 on odd ranks, from c0 on even ones);
//   7. p-r-1 times: the oldest deferred BW, BI c0 (its BW deferred);
//   8. the deferred BWs.
#pragma once

#include "ppsched/config.hpp"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string_view>
#include <utility>

#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/request.hpp"
#include "ppsched/schedule/schedule.hpp"

namespace ppsched::inline PPSCHED_MODE {

inline constexpr std::string_view dualpipev_name = "dualpipev";

// Whether make_dualpipev(r) would succeed: v = 2 and m >= 2p (the sizes every family checks
// included).
[[nodiscard]] inline bool dualpipev_accepts(const ScheduleRequest& r) noexcept {
  return r.ranks >= 1 && r.chunks == 2 && r.microbatches >= 2 * r.ranks &&
         3 * std::int64_t{r.ranks} * r.chunks * r.microbatches <= detail::max_generated_actions;
}

namespace detail {

// What make_dualpipev refuses in a request (FamilyInfo::problem), or nothing.
[[nodiscard]] inline std::optional<error_context> dualpipev_problem(const ScheduleRequest& r) {
  if (auto problem = sizes_and_chunks_problem(dualpipev_name, r, 2, "dualpipev places two chunks per rank in a V shape",
                                              "for one stage per rank use zb-h1 or zb-h2")) {
    return problem;
  }
  const std::int32_t p = r.ranks, m = r.microbatches;
  if (m >= 2 * p) return std::nullopt;
  return error_context{family_subject(dualpipev_name),
                       concat("needs at least 2p = ", 2 * p, " micro-batches to fill its V (got m=", m, ")"),
                       concat("request ", to_string(r)), concat("nearest valid: m=", 2 * p, ", or use zb-v")};
}

}  // namespace detail

// DualPipeV for p ranks, m >= 2p micro-batches, v = 2, its F&B pairs as compute groups (ids
// 1, 2, ... along each rank's program). Throws ppsched::error otherwise, saying the nearest
// valid request.
[[nodiscard]] inline Schedule make_dualpipev(const ScheduleRequest& r) {
  if (auto problem = detail::dualpipev_problem(r)) fail(*problem);
  const std::int32_t p = r.ranks, m = r.microbatches;
  Schedule out = detail::empty_schedule(dualpipev_name, r, v_shape_placement(p), true, 6 * static_cast<std::size_t>(m));
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
