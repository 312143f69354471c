// Internals of <ppsched/schedule/zero_bubble.hpp>, which includes this file: the one-stage-per-
// rank zero-bubble order (warm-up forwards, then BI, a lagging BW and the next F) that ZB-H1 and
// ZB-H2 share. They are in ppsched::detail and not part of the API: no example or page uses them,
// and they may change in any release (docs/architecture.md).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/request.hpp"
#include "ppsched/schedule/schedule.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

// One stage per rank: `warmup` forwards, then for each micro-batch j in order BI(j), the BW
// that is `weight_lag` micro-batches behind (if any), and the next forward (if any); the
// BWs still owed run at the end. Truncating the warm-up to m keeps the schedule complete for
// any m >= 1.
inline void append_zero_bubble_program(std::vector<Action>& program, std::int32_t stage,
                                       std::int32_t microbatches, std::int32_t warmup,
                                       std::int32_t weight_lag) {
  const std::int32_t fills = std::min(warmup, microbatches);
  for (std::int32_t mb = 0; mb < fills; ++mb) program.push_back(compute_action(Op::F, stage, mb));
  for (std::int32_t j = 0; j < microbatches; ++j) {
    program.push_back(compute_action(Op::BI, stage, j));
    if (j >= weight_lag) program.push_back(compute_action(Op::BW, stage, j - weight_lag));
    if (j + fills < microbatches) program.push_back(compute_action(Op::F, stage, j + fills));
  }
  for (std::int32_t mb = std::max(0, microbatches - weight_lag); mb < microbatches; ++mb)
    program.push_back(compute_action(Op::BW, stage, mb));
}

}  // namespace detail

}  // namespace ppsched
