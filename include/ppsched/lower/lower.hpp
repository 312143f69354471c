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
[[nodiscard]] inline bool is_lowered(const Schedule& s) noexcept {
  for (const auto& prog : s.programs) {
    for (const Action& a : prog) {
      if (is_comm(a.op)) return true;
    }
  }
  return false;
}

// The compute-only schedule underneath a lowered one.
[[nodiscard]] inline Schedule strip_communication(const Schedule& s) {
  Schedule out = s;
  for (auto& prog : out.programs) {
    prog.erase(std::remove_if(prog.begin(), prog.end(), [](const Action& a) { return is_comm(a.op); }), prog.end());
  }
  return out;
}

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
[[nodiscard]] inline Action comm_action(const Action& producer, bool receive) noexcept {
  if (producer.op == Op::F) {
    return receive ? Action{Op::RECV_F, producer.stage + 1, producer.microbatch, 0}
                   : Action{Op::SEND_F, producer.stage, producer.microbatch, 0};
  }
  return receive ? Action{Op::RECV_B, producer.stage - 1, producer.microbatch, 0}
                 : Action{Op::SEND_B, producer.stage, producer.microbatch, 0};
}

[[noreturn]] inline void fail_lowering(const Schedule& s, const std::string& problems) {
  fail({"lower: schedule '" + s.name + "'", "is not a valid compute-only schedule:" + problems, "",
        "fix these problems (validate() lists them all) before lowering"});
}

}  // namespace detail

namespace detail {

// A lowering lower() may return, with what it needs to choose.
struct LoweringCandidate {
  Schedule schedule;
  bool communicates = false;
  double ideal_makespan = 0.0;  // of the idealised run: no lowering of this order runs faster
};

// One lowering of the compute-only schedule indexed in `flat` (see the header comment): its
// communication ordered by the idealised run with `duration` and, when `delay` is not empty,
// each remote input delayed by its transfer time.
template <class Duration>
[[nodiscard]] LoweringCandidate lower_by(const Schedule& schedule, const FlatSchedule& flat, const Duration& duration,
                                         const std::vector<double>& delay, const LowerOptions& options, Workspace& ws) {
  const std::size_t n = flat.size();
  AbstractExecution ideal(flat, StreamMode::separate_comm_stream, duration, delay.empty() ? nullptr : &delay,
                          options.fb_overlap, &ws.execution());
  if (!ideal.run()) fail_lowering(schedule, "\n  - deadlock: " + ideal.describe_stuck());

  const std::int32_t S = flat.stages;
  const auto ranks = static_cast<std::size_t>(flat.ranks);

  // Which compute actions feed a transfer, and to which rank.
  auto receiver_of = [&](std::int32_t i) {
    const Action& a = flat.at(i);
    const std::int32_t r = flat.owner[static_cast<std::size_t>(i)];
    if (a.op == Op::F && a.stage + 1 < S && flat.rank_of(a.stage + 1) != r) return flat.rank_of(a.stage + 1);
    if ((a.op == Op::B || a.op == Op::BI) && a.stage > 0 && flat.rank_of(a.stage - 1) != r) return flat.rank_of(a.stage - 1);
    return std::int32_t{-1};
  };
  // Each rank's communication lives in one region of `comm`: its sends, produced in compute
  // order and so sorted by key, then its receives, which arrive source rank by source rank,
  // each source's sorted by key: a few sorted runs per rank, merged when the program is built.
  std::vector<std::size_t> sends_of(ranks, 0), region(ranks + 1, 0);
  LoweringBuffers& buffers = ws.lowering();
  scratch_vector<std::int32_t>& receivers = buffers.receivers;
  receivers.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int32_t to = receiver_of(static_cast<std::int32_t>(i));
    receivers[i] = to;
    if (to < 0) continue;
    ++sends_of[static_cast<std::size_t>(flat.owner[i])];
    ++region[static_cast<std::size_t>(to) + 1];
  }
  for (std::size_t r = 0; r < ranks; ++r) region[r + 1] += region[r] + sends_of[r];
  scratch_vector<CommEntry>& comm = buffers.comm;
  comm.resize(region[ranks]);  // every entry is written below
  std::vector<std::size_t> send_fill(region.begin(), region.end() - 1), recv_fill(ranks);
  for (std::size_t r = 0; r < ranks; ++r) recv_fill[r] = region[r] + sends_of[r];
  std::vector<std::vector<std::size_t>> runs(ranks);  // starts of the runs of each region
  std::vector<std::int32_t> last_source(ranks, -1);
  for (std::size_t r = 0; r < ranks; ++r) runs[r].push_back(region[r]);
  for (std::int32_t i = 0; i < static_cast<std::int32_t>(n); ++i) {
    const std::int32_t to = receivers[static_cast<std::size_t>(i)];
    if (to < 0) continue;
    const auto from = static_cast<std::size_t>(flat.owner[static_cast<std::size_t>(i)]);
    const auto dest = static_cast<std::size_t>(to);
    const double key = ideal.end(static_cast<std::size_t>(i));
    // A send goes after its producer only if the producer ends after it starts: a time so
    // small that adding it to the clock changes nothing would put the send first.
    if (!(key > ideal.start(static_cast<std::size_t>(i)))) {
      const Action& a = flat.at(i);
      fail({"lower options",
            concat("compute_time(", to_string(a), ") = ", duration(a), " vanishes against its start time ",
                   ideal.start(static_cast<std::size_t>(i)), " in the idealised run"),
            "", "give compute times within a factor of about 1e12 of each other (a free action may be 0 in a CostModel)"});
    }
    comm[send_fill[from]++] = {key, i, 0};
    if (last_source[dest] != static_cast<std::int32_t>(from)) {
      last_source[dest] = static_cast<std::int32_t>(from);
      runs[dest].push_back(recv_fill[dest]);
    }
    comm[recv_fill[dest]++] = {key, i, 1};
  }

  LoweringCandidate result;
  result.communicates = !comm.empty();
  result.ideal_makespan = ideal.latest_end() - ideal.earliest_start();
  Schedule& out = result.schedule;
  out.name = schedule.name;
  out.ranks = schedule.ranks;
  out.microbatches = schedule.microbatches;
  out.placement = schedule.placement;
  out.split_backward = schedule.split_backward;
  out.programs.resize(ranks);
  // Each rank's runs merged into one (key, id) order; (key, id) is unique on a rank (an id
  // is one transfer, whose two sides are on two ranks), so the order is total.
  scratch_vector<CommEntry>& merged = buffers.merged;
  scratch_vector<CommEntry>& scratch = buffers.scratch;
  for (std::size_t r = 0; r < ranks; ++r) {
    const std::vector<std::size_t>& starts = runs[r];
    merged.assign(comm.begin() + static_cast<std::ptrdiff_t>(region[r]),
                  comm.begin() + static_cast<std::ptrdiff_t>(starts.size() > 1 ? starts[1] : region[r + 1]));
    for (std::size_t k = 1; k < starts.size(); ++k) {
      const auto run_begin = comm.begin() + static_cast<std::ptrdiff_t>(starts[k]);
      const auto run_end = comm.begin() + static_cast<std::ptrdiff_t>(k + 1 < starts.size() ? starts[k + 1] : region[r + 1]);
      scratch.resize(merged.size() + static_cast<std::size_t>(run_end - run_begin));
      std::merge(merged.begin(), merged.end(), run_begin, run_end, scratch.begin(), comm_before);
      std::swap(merged, scratch);
    }
    auto& prog = out.programs[r];
    const std::size_t comm_count = merged.size();
    const std::int32_t begin = flat.rank_begin[r];
    const auto compute_count = static_cast<std::size_t>(flat.rank_begin[r + 1] - begin);
    prog.resize(comm_count + compute_count);
    Action* emitted = prog.data();
    std::size_t c = 0;  // the next communication in `merged`
    const Action* const compute = flat.rank_actions[r];
    std::uint32_t next_group = 1;
    if (flat.has_pairs) {
      for (std::size_t k = 0; k < compute_count; ++k) next_group = std::max(next_group, compute[k].group + 1);
    }
    // Emits every communication with the next one's key, as one group when there are several.
    auto emit_comm = [&]() {
      const double key = merged[c].key;
      Action* const first = emitted;
      for (; c < comm_count && merged[c].key == key; ++c) {
        *emitted++ = comm_action(flat.at(merged[c].producer), merged[c].receive != 0);
      }
      if (options.group_simultaneous && emitted - first > 1) {
        for (Action* x = first; x != emitted; ++x) x->group = next_group;
        ++next_group;
      }
    };
    for (std::size_t k = 0; k < compute_count; ++k) {
      // Both actions of a pair start together: no communication goes between them. Copies run
      // on their own stream, whose starts are not in step with the compute stream's: they keep
      // their place, and communication goes by the compute stream's starts alone.
      const double start = ideal.start(static_cast<std::size_t>(begin) + k);
      while (!is_copy(compute[k].op) && c < comm_count && merged[c].key <= start) emit_comm();
      *emitted++ = compute[k];
    }
    while (c < comm_count) emit_comm();
  }
  return result;
}

// The send whose transfer a communication action is one side of.
[[nodiscard]] inline Action send_of(const Action& a) noexcept {
  if (a.op == Op::RECV_F) return Action{Op::SEND_F, a.stage - 1, a.microbatch, 0};
  if (a.op == Op::RECV_B) return Action{Op::SEND_B, a.stage + 1, a.microbatch, 0};
  return Action{a.op, a.stage, a.microbatch, 0};
}

// The makespan of a candidate lowering run with the options' times, communication on its own
// stream (what simulate() does): each group in order on the rank's comm stream, a transfer
// taking its send's transfer time once both sides are posted.
template <class Duration>
[[nodiscard]] double lowered_makespan(const Schedule& lowered, const Duration& duration, const LowerOptions& options,
                                      Workspace& ws) {
  FlatSchedule& flat = ws.lowering().candidate;
  std::vector<Problem> problems;
  std::size_t unlisted = 0;
  ProblemSink sink(problems, unlisted, 1);
  static_checks(lowered, flat, sink, false, true);  // a lowering: only indexed
  const auto time_of = [&](const Action& a) {
    return is_comm(a.op) ? options.transfer_time(send_of(a)) : duration(a);
  };
  AbstractExecution run(flat, StreamMode::separate_comm_stream, time_of, nullptr, options.fb_overlap, &ws.execution());
  if (!run.run()) return std::numeric_limits<double>::infinity();  // (a lowering cannot deadlock)
  return run.latest_end() - run.earliest_start();
}

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
