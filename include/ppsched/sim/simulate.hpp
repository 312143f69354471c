// The simulator: runs a schedule under a cost model with the rules of
// docs/execution-model.md (in-order streams, groups, rendezvous) and predicts its Timeline,
// makespan, per-rank busy / communication-wait / idle time, bubble fractions and peak
// activation memory. It is the validator's abstract execution with real durations: the
// same engine, so what is predicted is what was proven.
//
// A LoweredSchedule (what lower() returns) is run as it is, its checks proven by lowering; a
// plain Schedule is checked in full. A compute-only schedule is lowered first, with this cost model's compute times (so the
// communication order is the one these costs call for); `SimOptions::ideal_communication`
// instead ignores streams and rendezvous and delays each cross-rank dependency by its
// transfer time — the idealised, dependency-only baseline that lowering is measured against.
//
// Conventions (docs/validation-and-simulation.md):
//   makespan      latest end minus earliest start (the step starts at 0), plus
//                 CostModel::fixed_costs.step, which no span of the timeline holds
//   span          a rank's first compute start to its last compute end
//   busy          a rank's compute time (F, B, BI, BW)
//   input_wait    time a rank's compute stream sits idle after the input of its next compute
//                 was produced on another rank and before that compute could start:
//                 latency, bandwidth and head-of-line waiting, not pipeline fill. (Not
//                 trace/stats.hpp's comm_wait, which is communication not hidden under
//                 compute, read from any timeline.)
//   idle          makespan - busy (input_wait included); idle_in_span = span - busy
//   bubble_fraction   total idle / (ranks x makespan)
//   ideal_time        busy time of the busiest rank (the step with no bubble at all)
//   bubble_vs_ideal   (makespan - ideal_time) / ideal_time
//
// An overlapped F&B pair (a compute group) occupies its rank's compute stream for
// T_F + T_B - CostModel::fb_overlap x min(T_F, T_B), from when the inputs of both are done;
// both results are available when it ends. In the timeline its interval is divided between
// its two actions in proportion to their own times (in program order), so that spans on one
// lane never overlap and a rank's busy time is the sum of its spans, as for every other action.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/engine/abstract_execution.hpp"
#include "ppsched/engine/detail/flat_schedule.hpp"
#include "ppsched/engine/problems.hpp"
#include "ppsched/engine/detail/static_checks.hpp"
#include "ppsched/engine/workspace.hpp"
#include "ppsched/error.hpp"
#include "ppsched/lower/lower.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/trace/timeline.hpp"
#include "ppsched/validate/memory.hpp"
#include "ppsched/validate/report.hpp"
#include "ppsched/sim/detail/simulate.hpp"
#include "ppsched/sim/simulate_types.hpp"

namespace ppsched::inline PPSCHED_MODE {

// Simulates `schedule` (compute-only or lowered) under `cost`. Throws ppsched::error for an
// invalid schedule (its problems listed), a cost model that does not fit it, or a
// deadlock (each stuck action named with what it waits for). `ws` (optional) lends its
// arrays (engine/workspace.hpp); without it the call borrows the scratch pool's.
[[nodiscard]] PPSCHED_OUTLINE SimResult simulate(const Schedule& schedule, const CostModel& cost, const SimOptions& options,
                                        Workspace& ws);
[[nodiscard]] inline SimResult simulate(const Schedule& schedule, const CostModel& cost, const SimOptions& options = {}) {
  detail::BorrowedWorkspace ws;  // the scratch pool's (engine/workspace.hpp)
  return simulate(schedule, cost, options, ws.get());
}

// The same for a schedule lower() wrote: its checks are proven by its construction. The result
// is the one simulate() gives the same schedule as a plain Schedule, `lowered_internally`
// included (a schedule without communication, from a single rank, would be lowered again).
[[nodiscard]] PPSCHED_OUTLINE SimResult simulate(const LoweredSchedule& lowered, const CostModel& cost,
                                        const SimOptions& options, Workspace& ws);
[[nodiscard]] inline SimResult simulate(const LoweredSchedule& lowered, const CostModel& cost,
                                        const SimOptions& options = {}) {
  detail::BorrowedWorkspace ws;
  return simulate(lowered, cost, options, ws.get());
}

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/sim/impl/simulate.ipp"
#endif
