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

namespace ppsched::inline PPSCHED_MODE {

struct LowerOptions {
  // Compute time of each action for the idealised run that orders the communication;
  // positive and finite. Empty: F = BI = BW = 1 and B = 2. Give your cost model's times
  // (costs/cost_model.hpp: lower_options_for) so the order matches the run you expect.
  std::function<double(const Action&)> compute_time;
  // Transfer time of each send (SEND_F / SEND_B), >= 0 and finite, added to the idealised
  // run's cross-rank dependencies, and the time a transfer takes when lower() compares its
  // candidate orders (step 4 above). Empty: free transfers.
  std::function<double(const Action&)> transfer_time;
  // Post communication that becomes ready at the same instant as one group.
  bool group_simultaneous = true;
  // Share of the shorter action of each overlapped pair hidden under the longer, in [0, 1]
  // (CostModel::fb_overlap); only the idealised run's times depend on it.
  double fb_overlap = 0.0;
};

// True when the schedule already contains communication actions.
[[nodiscard]] PPSCHED_OUTLINE bool is_lowered(const Schedule& s) noexcept;

// The compute-only schedule underneath a lowered one.
[[nodiscard]] PPSCHED_OUTLINE Schedule strip_communication(const Schedule& s);

namespace detail {
struct LoweringAccess;
}  // namespace detail

// What lower() returns: the lowered schedule, immutable, with what lowering proved of it.
// It converts to `const Schedule&`, so everything that takes a Schedule takes it; validate()
// and simulate() of a LoweredSchedule skip the checks its construction proves. A copy taken
// out (`Schedule s = lower(...)`, or std::move(l).release()) is a plain Schedule again,
// checked in full wherever it goes.
class LoweredSchedule {
 public:
  [[nodiscard]] const Schedule& schedule() const noexcept { return schedule_; }
  operator const Schedule&() const noexcept { return schedule_; }  // NOLINT: a LoweredSchedule is a Schedule
  // Hands the schedule over without copying; the proof does not go with it. (Not a second
  // implicit conversion: `schedule = lower(...)` would be ambiguous between the two.)
  [[nodiscard]] Schedule release() && noexcept { return std::move(schedule_); }

  // lower() wrote the communication: every static check of validate() holds and no timing
  // can deadlock, with communication on its own stream or on the compute stream. False when
  // lower() returned a schedule that already had communication (validate() checks that one).
  [[nodiscard]] bool proven() const noexcept { return proven_; }
  // The schedule has communication (false when every stage is on one rank).
  [[nodiscard]] bool communicates() const noexcept { return communicates_; }
  [[nodiscard]] bool has_backward() const noexcept { return has_backward_; }
  [[nodiscard]] bool has_pairs() const noexcept { return has_pairs_; }

  friend bool operator==(const LoweredSchedule& a, const LoweredSchedule& b) { return a.schedule_ == b.schedule_; }
  friend bool operator==(const LoweredSchedule& a, const Schedule& b) { return a.schedule_ == b; }

 private:
  friend struct detail::LoweringAccess;
  LoweredSchedule(Schedule s, bool proven, bool communicates, bool has_backward, bool has_pairs) noexcept
      : schedule_(std::move(s)),
        proven_(proven),
        communicates_(communicates),
        has_backward_(has_backward),
        has_pairs_(has_pairs) {}

  Schedule schedule_;
  bool proven_ = false;
  bool communicates_ = false;
  bool has_backward_ = false;
  bool has_pairs_ = false;
};

namespace detail {

struct LoweringAccess {
  [[nodiscard]] static LoweredSchedule proven(Schedule s, bool communicates, bool has_backward, bool has_pairs) {
    return LoweredSchedule(std::move(s), true, communicates, has_backward, has_pairs);
  }
  // A schedule that already had communication: lower() leaves it as it is, unproven.
  [[nodiscard]] static LoweredSchedule unproven(Schedule s) {
    return LoweredSchedule(std::move(s), false, true, false, false);
  }
};

[[nodiscard]] inline double default_lower_time(const Action& a) noexcept { return a.op == Op::B ? 2.0 : 1.0; }
static_assert(op_count == 11, "default_lower_time: give the new operation its time");

[[nodiscard]] inline bool comm_before(const CommEntry& x, const CommEntry& y) noexcept {
  return x.key < y.key || (x.key == y.key && x.producer < y.producer);
}

// The communication action a CommEntry stands for.
[[nodiscard]] PPSCHED_OUTLINE Action comm_action(const Action& producer, bool receive) noexcept;

[[noreturn]] PPSCHED_OUTLINE void fail_lowering(const Schedule& s, const std::string& problems);

}  // namespace detail

}  // namespace ppsched

#include "ppsched/lower/detail/lower.hpp"  // the internals below build on the types above

namespace ppsched::inline PPSCHED_MODE {

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
