// Lowering: turns a compute-only schedule into one that also says when each rank sends and
// receives, and which sends and receives are posted together as one NCCL group. The rule
// (docs/validation-and-simulation.md has the proof):
//
//   1. Run the compute-only schedule on its dependencies alone, with the compute (and
//      transfer) times of `LowerOptions` (uniform compute, free transfers by default).
//      Every transfer gets a key: the time its data is produced.
//   2. On every rank, order the communication by (key, transfer id) — the same order on both
//      sides of every transfer — and interleave it with the compute: a communication action
//      goes before any compute that starts at or after its key. So a send follows its
//      producer, a receive precedes its consumer, and a receive is posted when its data is
//      produced — not all up front, and never behind a transfer whose data comes later.
//   3. Communication with the same key on one rank forms a group (when there are several):
//      e.g. Megatron's send-forward/receive-backward pairs.
//   4. When transfers take time, the order is run as simulate() runs it and, if it falls short
//      of the idealised run, the same compute order lowered by the compute times alone and by
//      the default times is run too; the fastest is returned (see lower() below), so the result
//      is never slower than lower(schedule) of the same compute order.
//
// An overlapped pair (two adjacent compute actions sharing a group, docs/execution-model.md)
// runs as one item in the idealised run: both of its actions start together, after both of
// their inputs, and end together. So every receive either action needs comes before the pair,
// every send of either comes after it, and nothing comes between the two. Pairs keep their
// group ids; the communication groups of a rank are numbered from one above its largest.
//
// Every wait then points to an earlier key (or to the same key on the peer, posted in the
// same order), so the lowered schedule cannot deadlock under rendezvous — with the comm on
// its own stream or on the compute stream — whatever the real durations; and with the
// lowering's own compute times and free communication it runs exactly as fast as the
// dependency-only run: lowering adds no bubble. lower() returns a LoweredSchedule, which carries
// this proof as its type: validate() and simulate() of it take the proof rather than checking
// it again, while a plain Schedule is always checked in full (tests/test_validate.cpp checks
// that the two agree).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/engine/abstract_execution.hpp"
#include "ppsched/engine/detail/flat_schedule.hpp"
#include "ppsched/engine/problems.hpp"
#include "ppsched/engine/detail/static_checks.hpp"
#include "ppsched/engine/workspace.hpp"
#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/lower/detail/lower.hpp"
#include "ppsched/lower/lower_types.hpp"

namespace ppsched::inline PPSCHED_MODE {

// True when the schedule already contains communication actions.
[[nodiscard]] PPSCHED_OUTLINE bool is_lowered(const Schedule& s) noexcept;

// The compute-only schedule underneath a lowered one.
[[nodiscard]] PPSCHED_OUTLINE Schedule strip_communication(const Schedule& s);

namespace detail {

[[nodiscard]] inline double default_lower_time(const Action& a) noexcept { return a.op == Op::B ? 2.0 : 1.0; }
static_assert(op_count == 11, "default_lower_time: give the new operation its time");

[[nodiscard]] inline bool comm_before(const CommEntry& x, const CommEntry& y) noexcept {
  return x.key < y.key || (x.key == y.key && x.producer < y.producer);
}

// The communication action a CommEntry stands for.
[[nodiscard]] PPSCHED_OUTLINE Action comm_action(const Action& producer, bool receive) noexcept;

[[noreturn]] PPSCHED_OUTLINE void fail_lowering(const Schedule& s, const std::string& problems);

}  // namespace detail

// Inserts SEND_* / RECV_* and groups them (see the header comment). A schedule that already
// has communication is returned unchanged: lowering is idempotent and never rewrites
// communication a user wrote (validate() checks it). Throws ppsched::error when the
// compute-only schedule is invalid or cannot run (naming the problems), or when a compute
// time of the options is not positive and finite. `ws` (optional) lends its arrays
// (engine/workspace.hpp); without it the call borrows the scratch pool's.
//
// With transfer times, the idealised run takes every transfer as a mere delay, while a rank's
// comm stream runs its groups one after another, and a transfer that takes time keeps it
// busy: ordering by that run can serialise communication that a plainer order posts in pairs
// (the plainer keys of a send and the next receive coincide, so they form one group), and then
// the comm stream, not the compute, sets the pace. So when some transfer takes time, lower()
// runs its order with the options' times as simulate() does (communication on its own stream)
// and, unless it already matches the idealised run (which no order can beat), also lowers the
// same compute order with the options' compute times and free transfers, and with the default
// times, and returns the fastest of these (the transfer-aware one on a tie, to within a part
// in 1e9). The result is never slower than lower(schedule) of the same compute order.
[[nodiscard]] PPSCHED_OUTLINE LoweredSchedule lower(const Schedule& schedule, const LowerOptions& options, Workspace& ws);

[[nodiscard]] inline LoweredSchedule lower(const Schedule& schedule, const LowerOptions& options = {}) {
  detail::BorrowedWorkspace ws;  // the scratch pool's (engine/workspace.hpp)
  return lower(schedule, options, ws.get());
}

// Lowering options whose idealised run uses this model's compute and transfer times, so
// the lowered communication order is the one this model's run needs. Lowering orders by a timeline
// with positive times; an action the model makes free is ordered as if it took a millionth
// of the model's largest time (its place among actions that take time is unchanged), and so is
// one that takes less: a time that small would vanish when added to the timeline's clock.
[[nodiscard]] PPSCHED_OUTLINE LowerOptions lower_options_for(const CostModel& c, std::int32_t stages, std::int32_t microbatches);

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/lower/impl/lower.ipp"
#endif
