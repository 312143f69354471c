// Internals of <ppsched/lower/lower.hpp>: when each rank sends and receives, and how transfers
// are grouped. They are in ppsched::detail and not part of the API: no example or page uses them,
// and they may change in any release (docs/architecture.md).
//
// They build on public types of <ppsched/lower/lower.hpp>, which includes this file after
// declaring them. So that this file also compiles alone, it includes that header first, and its
// guard opens only below that include: included alone, the header's own include of this file
// emits these internals where the header needs them, and this outer copy is then skipped.
#include "ppsched/lower/lower.hpp"

#ifndef PPSCHED_LOWER_DETAIL_LOWER_HPP
#define PPSCHED_LOWER_DETAIL_LOWER_HPP

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/engine/abstract_execution.hpp"
#include "ppsched/engine/detail/flat_schedule.hpp"
#include "ppsched/engine/detail/static_checks.hpp"
#include "ppsched/engine/problems.hpp"
#include "ppsched/engine/workspace.hpp"
#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/schedule.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

// A lowering lower() may return, with what it needs to choose.
struct LoweringCandidate {
  Schedule schedule;
  bool communicates = false;
  double ideal_makespan = 0.0;  // of the idealised run: no lowering of this order runs faster
};

// The send whose transfer a communication action is one side of.
[[nodiscard]] inline Action send_of(const Action& a) noexcept {
  if (a.op == Op::RECV_F) return Action{Op::SEND_F, a.stage - 1, a.microbatch, 0};
  if (a.op == Op::RECV_B) return Action{Op::SEND_B, a.stage + 1, a.microbatch, 0};
  return Action{a.op, a.stage, a.microbatch, 0};
}

}  // namespace detail

}  // namespace ppsched

#endif  // PPSCHED_LOWER_DETAIL_LOWER_HPP
