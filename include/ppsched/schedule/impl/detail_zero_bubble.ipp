// The bodies of <ppsched/schedule/detail/zero_bubble.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

PPSCHED_OUTLINE void append_zero_bubble_program(std::vector<Action>& program, std::int32_t stage,
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
