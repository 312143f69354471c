// Internals of <ppsched/lower/lower.hpp>: when each rank sends and receives, and how transfers
// are grouped. They are in ppsched::detail and not part of the API: no example or page uses them,
// and they may change in any release (docs/architecture.md).
//
// They build on the part's types, which <ppsched/lower/lower_types.hpp> holds.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
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
#include "ppsched/lower/lower_types.hpp"
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

// One lowering of the compute-only schedule indexed in `flat` (see the header comment): its
// communication ordered by the idealised run with durations[i] for action i and, when `delay`
// is not empty, each remote input delayed by its transfer time.
[[nodiscard]] PPSCHED_OUTLINE LoweringCandidate lower_by(const Schedule& schedule, const FlatSchedule& flat,
                                                         std::span<const double> durations,
                                                         const std::vector<double>& delay, const LowerOptions& options,
                                                         Workspace& ws);

// The makespan of a candidate lowering run with the options' times, communication on its own
// stream (what simulate() does): each group in order on the rank's comm stream, a transfer
// taking its send's transfer time once both sides are posted, and each compute action its
// time in `durations`, indexed as `compute_flat`, the compute-only schedule it was lowered from.
[[nodiscard]] PPSCHED_OUTLINE double lowered_makespan(const Schedule& lowered, const FlatSchedule& compute_flat,
                                                      std::span<const double> durations, const LowerOptions& options,
                                                      Workspace& ws);

// The send whose transfer a communication action is one side of.
[[nodiscard]] inline Action send_of(const Action& a) noexcept {
  if (a.op == Op::RECV_F) return Action{Op::SEND_F, a.stage - 1, a.microbatch, 0};
  if (a.op == Op::RECV_B) return Action{Op::SEND_B, a.stage + 1, a.microbatch, 0};
  return Action{a.op, a.stage, a.microbatch, 0};
}

}  // namespace detail

}  // namespace ppsched
