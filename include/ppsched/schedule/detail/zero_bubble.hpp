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
PPSCHED_OUTLINE void append_zero_bubble_program(std::vector<Action>& program, std::int32_t stage,
                                       std::int32_t microbatches, std::int32_t warmup,
                                       std::int32_t weight_lag);

}  // namespace detail

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/schedule/impl/detail_zero_bubble.ipp"
#endif
