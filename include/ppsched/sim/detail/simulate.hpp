// Internals of <ppsched/sim/simulate.hpp>: the discrete-event simulation's state and steps. They
// are in ppsched::detail and not part of the API: no example or page uses them, and they may
// change in any release (docs/architecture.md).
//
// They build on the part's types, which <ppsched/sim/simulate_types.hpp> holds.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/engine/abstract_execution.hpp"
#include "ppsched/engine/detail/flat_schedule.hpp"
#include "ppsched/engine/detail/static_checks.hpp"
#include "ppsched/engine/problems.hpp"
#include "ppsched/engine/workspace.hpp"
#include "ppsched/error.hpp"
#include "ppsched/lower/lower.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/sim/detail/shared_host.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/sim/simulate_types.hpp"
#include "ppsched/trace/timeline.hpp"
#include "ppsched/validate/memory.hpp"
#include "ppsched/validate/report.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

[[noreturn]] PPSCHED_OUTLINE void fail_simulation(const Schedule& s, const ValidationReport& report);

// SimResult::memory_over_time from the run's times (the walk of validate/memory.hpp, in time).
// `bytes(stage, mb)`: one stored activation (the walk's own table, so the fast path of
// per-stage bytes is shared). Events are pushed in program order, which on a rank without
// copies or zero-length actions is already time order: the sort is skipped then, as it was
// a quarter of simulate()'s time at p = 64, m = 1024 (docs/performance.md).
PPSCHED_OUTLINE void memory_over_time(const FlatSchedule& flat, const AbstractExecution& run, const ActivationSizes& bytes,
                                      const StageFractions& fractions, SimResult& result);

// The run of `input` (lowered, or compute-only for an ideal_communication run), whose static
// checks `proven` says lowering proved; `schedule` is what the caller passed (for messages).
PPSCHED_OUTLINE SimResult simulate_lowered(const Schedule& schedule, const Schedule& input, bool proven, bool lowered_internally,
                                  const CostModel& cost, const SimOptions& options, Workspace& ws);

}  // namespace detail

}  // namespace ppsched
