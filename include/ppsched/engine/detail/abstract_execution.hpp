// Internals of <ppsched/engine/abstract_execution.hpp>: the abstract execution itself, the one
// engine under lower, validate, simulate and the search. They are in ppsched::detail and not part
// of the API: no example or page uses them, and they may change in any release
// (docs/architecture.md).
//
// They build on the part's types, which <ppsched/engine/stream_mode.hpp> holds.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/engine/detail/flat_schedule.hpp"
#include "ppsched/engine/stream_mode.hpp"
#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

// Durations that depend on an action's stage and operation alone: action a lasts
// table[a.stage * stage_stride + a.op] (stage_stride op_count: one row per stage; 0: one row
// for every stage). No per-action array to fill and read back: a simulation of per-stage costs
// runs straight from its table.
struct DurationTable {
  const double* table = nullptr;
  std::size_t stage_stride = 0;
};

// The abstract execution of docs/execution-model.md. Each rank has a compute stream
// (L r) and a comm stream (L r + 1; unused when communication is on the compute stream or the
// schedule has none), and, when the schedule has OFFLOAD/RELOAD and communication has its own
// stream, a copy stream (L r + 2): L, `lanes_`, is 3 then and 2 otherwise. With one stream per
// rank the copies run on it too (only more waits: what completes there completes with three).
// R is a compute item; a copy item waits for its same-stage link like a compute item and, on a
// copy stream of its own, for the compute-stream action issued before it on its rank (the
// event a runtime records at the point of issue): a copy's place in the program is when it
// may start, so a RELOAD is not pulled forward to right after its OFFLOAD. A stream's items are compute actions or communication groups, run
// in order. A compute item starts when its stream is free and its dependencies are done; a
// group is posted when it is at the head and the producers of its sends are done; a
// transfer runs when both of its sides are posted; a group ends with its last transfer.
//
// With no communication in the schedule the dependencies between stages are direct
// (dependency-only execution), each remote one delayed by `input_delay`.
//
// An overlapped pair (two adjacent compute actions sharing a group) is one compute item: it
// starts when the stream is free and the inputs of both actions are done, lasts
// T_a + T_b - fb_overlap x min(T_a, T_b), and both actions end with it.
//
// Every start condition is a conjunction of "done" facts, so which actions complete is the
// same for any durations, and each time is the max-plus closure of its dependencies: the
// run is evaluated in dependency order with a worklist of streams rather than a global
// event queue, and gives exactly the times an event-driven simulation would.
class AbstractExecution {
 public:
  // The arrays of a run (items, times, stream states): a Workspace keeps one set between
  // calls (workspace.hpp); an execution given none allocates its own and frees them with itself.
  struct Buffers;

  // Unit compute time and instant transfers: what validation runs with (any durations
  // decide the same).
  AbstractExecution(const FlatSchedule& flat, StreamMode mode, Buffers* buffers = nullptr);
  // durations[i] (one per action of `flat`, by its index): the compute time of action i, or for
  // communication its transfer time (the same on both sides); the caller fills the array once,
  // so that the engine is compiled once whatever prices the actions. input_delay (optional,
  // dependency-only runs): added to action i's remote input; it must outlive the execution.
  // fb_overlap in [0, 1] (checked by the callers): the share of the shorter action of each
  // overlapped pair hidden under the longer.
  AbstractExecution(const FlatSchedule& flat, StreamMode mode, std::span<const double> durations,
                    const std::vector<double>* input_delay = nullptr, double fb_overlap = 0.0,
                    Buffers* buffers = nullptr);
  // The same with durations by (stage, operation).
  AbstractExecution(const FlatSchedule& flat, StreamMode mode, DurationTable durations,
                    const std::vector<double>* input_delay = nullptr, double fb_overlap = 0.0,
                    Buffers* buffers = nullptr);
  // The same with duration_of(a) asked once per action, in index order, into the buffers'
  // `durations` (for callers that price actions one by one: only this loop is instantiated per
  // callable).
  template <class DurationOf>
    requires std::invocable<const DurationOf&, const Action&>
  AbstractExecution(const FlatSchedule& flat, StreamMode mode, const DurationOf& duration_of,
                    const std::vector<double>* input_delay = nullptr, double fb_overlap = 0.0,
                    Buffers* buffers = nullptr)
      : AbstractExecution(flat, mode, input_delay, fb_overlap, buffers, Unbuilt{}) {
    scratch_vector<double>& durations = buffers_.durations;
    durations.resize(flat.size());
    for (std::int32_t r = 0; r < flat.ranks; ++r) {
      const std::int32_t b = flat.rank_begin[static_cast<std::size_t>(r)];
      const std::int32_t e = flat.rank_begin[static_cast<std::size_t>(r) + 1];
      const Action* prog = flat.rank_actions[static_cast<std::size_t>(r)];
      for (std::int32_t i = b; i < e; ++i) durations[static_cast<std::size_t>(i)] = duration_of(prog[i - b]);
    }
    build_items(durations.data(), DurationTable{});
  }

  // Runs to completion or to a deadlock; true when every action completed.
  bool run();

  // Per action: compute start and end; communication: when its group was posted, and when
  // its transfer completed. -1 for what never happened.
  [[nodiscard]] double start(std::size_t i) const noexcept { return starts_[i]; }
  [[nodiscard]] double end(std::size_t i) const noexcept { return ends_[i]; }
  // After a run that completed: the earliest start and the latest end of any action (0 for an
  // empty schedule). Each stream starts its items in order, and its `free` is the latest end
  // of its items once they are done, so no pass over the actions is needed.
  [[nodiscard]] double earliest_start() const noexcept {
    double earliest = 0.0;
    bool any = false;
    for (std::size_t st = 0; st + 1 < stream_begin_.size(); ++st) {
      if (stream_begin_[st] == stream_begin_[st + 1]) continue;
      const double s = starts_[static_cast<std::size_t>(items_[static_cast<std::size_t>(stream_begin_[st])].first)];
      earliest = any && earliest < s ? earliest : s;
      any = true;
    }
    return earliest;
  }
  [[nodiscard]] double latest_end() const noexcept {
    double latest = 0.0;
    bool any = false;
    for (std::size_t st = 0; st + 1 < stream_begin_.size(); ++st) {
      if (stream_begin_[st] == stream_begin_[st + 1]) continue;
      latest = any && latest > streams_[st].free ? latest : streams_[st].free;
      any = true;
    }
    return latest;
  }
  [[nodiscard]] StreamMode mode() const noexcept { return mode_; }
  [[nodiscard]] bool on_comm_stream(std::int32_t i) const noexcept {
    return mode_ == StreamMode::separate_comm_stream && is_comm(flat_.at(i).op);
  }
  // OFFLOAD/RELOAD on the rank's copy stream (with a separate comm stream; otherwise they share
  // the rank's one stream).
  [[nodiscard]] bool on_copy_stream(std::int32_t i) const noexcept { return lanes_ == 3 && is_copy(flat_.at(i).op); }

  // After a run that did not complete: one line per stuck stream head, naming what it waits
  // for and where that is.
  [[nodiscard]] std::string describe_stuck() const;

 private:
  // One entry of a stream: a compute action (count 0), with its dependencies gathered here
  // so that a run reads each stream's items in order; an overlapped pair (count pair_item,
  // the actions first and first + 1, whose four dependencies start at pair_deps_[dep_a]:
  // DualPipeV's steady state is all pairs); or a communication group of `count` actions
  // starting at `first`, whose CommOps start at ops_[ops].
  // (No default member initializers: the arrays are allocated without being cleared.)
  struct Item {
    std::int32_t first;
    std::int32_t count;
    std::int32_t dep_a;  // compute: same-stage predecessor; group: its first CommOp; pair: its pair_deps_
    std::int32_t dep_b;  // compute: input
    std::int32_t wake;   // compute: the stream that may wait for it (-1: none)
    double duration;     // compute; a pair: the pair's
  };
  static constexpr std::int32_t pair_item = -1;
  [[nodiscard]] static constexpr std::int32_t item_size(const Item& item) noexcept {
    return item.count > 0 ? item.count : (item.count == pair_item ? 2 : 1);
  }
  struct CommOp {
    std::int32_t action;
    std::int32_t peer;
    std::int32_t producer;  // sends: the compute whose output it sends; receives: no_action
    std::int32_t peer_stream;
    double duration;
  };

  [[nodiscard]] static std::size_t lanes_for(const FlatSchedule& flat, StreamMode mode) noexcept {
    return flat.has_copies && mode == StreamMode::separate_comm_stream ? 3 : 2;
  }
  [[nodiscard]] std::size_t stream_of(std::int32_t i) const noexcept {
    return lanes_ * static_cast<std::size_t>(flat_.owner[static_cast<std::size_t>(i)]) +
           (on_comm_stream(i) ? 1 : (on_copy_stream(i) ? 2 : 0));
  }
  // After item `action` ended on stream st: the rank's other stream of compute and copy work may
  // be waiting for it (an OFFLOAD for its F, a B for its RELOAD).
  void wake_copy_partner(std::size_t st, std::int32_t action) {
    if (lanes_ != 3) return;
    const std::size_t base = st - st % 3;
    if (st % 3 == 0) {
      wake_for(base + 2, action);
    } else if (st % 3 == 2) {
      wake_for(base, action);
    }
  }

  // The stream that may be waiting for compute action a (on rank r) to finish in a run
  // without communication: its consumer's compute stream when that is on another rank.
  [[nodiscard]] std::int32_t dependency_waiter(std::int32_t r, const Action& a) const noexcept {
    std::int32_t consumer_stage = -1;
    if (a.op == Op::F && a.stage + 1 < flat_.stages) consumer_stage = a.stage + 1;
    if ((a.op == Op::B || a.op == Op::BI) && a.stage > 0) consumer_stage = a.stage - 1;
    if (consumer_stage < 0) return -1;
    const std::int32_t cr = flat_.rank_of(consumer_stage);
    return cr != r ? static_cast<std::int32_t>(lanes_) * cr : -1;
  }

  struct Unbuilt {};
  // Everything but the items: the constructors above build them.
  AbstractExecution(const FlatSchedule& flat, StreamMode mode, const std::vector<double>* input_delay, double fb_overlap,
                    Buffers* buffers, Unbuilt) noexcept
      : flat_(flat), mode_(mode), lanes_(lanes_for(flat, mode)), input_delay_(input_delay), fb_overlap_(fb_overlap),
        buffers_(buffers != nullptr ? *buffers : own_), stream_begin_(buffers_.stream_begin), items_(buffers_.items),
        ops_(buffers_.ops), pair_deps_(buffers_.pair_deps), starts_(buffers_.starts), ends_(buffers_.ends),
        streams_(buffers_.streams), worklist_(buffers_.worklist) {}

  // Builds each stream's items, action i lasting what `keyed` gives its stage and operation, or
  // without a keyed table, per_action[i], or without either, unit compute time.
  void build_items(const double* per_action, DurationTable keyed);
  enum class Durations : std::uint8_t { unit, keyed, per_action };
  template <bool Pairs, Durations Mode>
#if defined(__GNUC__)
  [[gnu::noinline]]  // one copy of each build, not one more inlined into a caller
#endif
  void build_items_of(const double* per_action, DurationTable keyed);

  void wake(std::size_t st) {
    if (streams_[st].queued) return;
    streams_[st].queued = 1;
    worklist_.push_back(static_cast<std::int32_t>(st));
  }
  // Wakes a stream only if it stopped for this very action: most completions concern no
  // other stream, and a needless visit costs cache misses on a cold stream.
  void wake_for(std::size_t st, std::int32_t action) {
    if (streams_[st].blocked_on == action) wake(st);
  }

  // A hint only, so an index that names nothing (no_action, or a group whose operations
  // are not built yet) is skipped rather than formed into an out-of-range address.
  template <class Vector>
  static void prefetch([[maybe_unused]] const Vector& v, [[maybe_unused]] std::int32_t index) noexcept {
#if defined(__GNUC__)
    if (index >= 0 && static_cast<std::size_t>(index) < v.size()) __builtin_prefetch(v.data() + index);
#endif
  }

  void advance(std::size_t st);

  // The first input of a pair that is not done yet, or no_action.
  [[nodiscard]] std::int32_t unmet_input(const Item& item) const noexcept {
    for (std::int32_t x = item.first; x < item.first + 2; ++x) {
      const Links l = flat_.links(x);
      for (const std::int32_t d : {l.same_stage, l.input}) {
        if (d != no_action && ends_[static_cast<std::size_t>(d)] < 0.0) return d;
      }
    }
    return no_action;
  }

  // Runs the pair at the head of stream st once the inputs of both its actions are done;
  // false (with the stream's blocked_on set) while one is not.
#if defined(__GNUC__)
  [[gnu::noinline]]  // rare outside DualPipeV: keep it out of advance()'s loop
#endif
  bool run_pair(std::size_t st, const Item& item, double& free) {
    double t = free;
    const std::int32_t* deps = pair_deps_.data() + item.dep_a;  // per action: same stage, input
    for (std::int32_t x = item.first; x < item.first + 2; ++x, deps += 2) {
      if (deps[0] != no_action) {
        const double e = ends_[static_cast<std::size_t>(deps[0])];
        if (e < 0.0) {
          streams_[st].blocked_on = deps[0];
          return false;
        }
        t = std::max(t, e);
      }
      if (deps[1] != no_action) {
        const double e = ends_[static_cast<std::size_t>(deps[1])];
        if (e < 0.0) {
          streams_[st].blocked_on = deps[1];
          return false;
        }
        t = std::max(t, e + (input_delay_ != nullptr ? (*input_delay_)[static_cast<std::size_t>(x)] : 0.0));
      }
    }
    free = t + item.duration;
    const auto r = static_cast<std::int32_t>(st / lanes_);
    for (std::int32_t x = item.first; x < item.first + 2; ++x) {
      starts_[static_cast<std::size_t>(x)] = t;
      ends_[static_cast<std::size_t>(x)] = free;
    }
    for (std::int32_t x = item.first; x < item.first + 2; ++x) {
      const std::int32_t waiter = flat_.lowered ? (mode_ == StreamMode::separate_comm_stream
                                                       ? static_cast<std::int32_t>(lanes_) * r + 1
                                                       : -1)
                                                : dependency_waiter(r, flat_.at(x));
      if (waiter >= 0) wake_for(static_cast<std::size_t>(waiter), x);
      wake_copy_partner(st, x);
    }
    return true;
  }

  // "RECV_F3@s1 on rank 1, which is behind F4@s1" and the like: where action x stands.
  [[nodiscard]] std::string where(std::int32_t x, std::int32_t from_rank) const;

  [[nodiscard]] std::string item_text(std::int32_t index) const;

  // A stream's whole state on one cache line: a run switches streams once per item or so.
  struct StreamState {
    std::int32_t head = 0;                // next item
    std::int32_t blocked_on = no_action;  // the action the head waits for, or waiting_for_peers
    double free = 0.0;                    // when the previous item ended
    std::uint8_t posted = 0;              // the head group is posted
    std::uint8_t queued = 1;              // on the worklist
  };
 public:
  struct Buffers {
    std::vector<std::int32_t> stream_begin;  // item offsets per stream (size streams + 1)
    scratch_vector<Item> items;
    scratch_vector<CommOp> ops;
    std::vector<std::int32_t> pair_deps;  // four per pair: each action's same-stage and input
    // Per action: compute start and end; communication: when its group was posted and when
    // its transfer completed; -1 for what has not happened. Two arrays rather than pairs:
    // dependencies read only ends, so the randomly read array is half as large.
    std::vector<double> starts;
    std::vector<double> ends;
    std::vector<StreamState> streams;
    std::vector<std::int32_t> worklist;
    // Per action: its duration, for a caller that prices actions one by one (above).
    scratch_vector<double> durations;
  };

 private:
  const FlatSchedule& flat_;
  StreamMode mode_;
  std::size_t lanes_;  // streams per rank: 2, or 3 with a copy stream
  const std::vector<double>* input_delay_;
  double fb_overlap_ = 0.0;
  Buffers own_;
  Buffers& buffers_;
  std::vector<std::int32_t>& stream_begin_;
  scratch_vector<Item>& items_;
  std::size_t item_total_ = 0;
  scratch_vector<CommOp>& ops_;
  std::vector<std::int32_t>& pair_deps_;
  std::vector<double>& starts_;
  std::vector<double>& ends_;
  std::vector<StreamState>& streams_;
  std::vector<std::int32_t>& worklist_;
  mutable std::vector<std::int32_t> item_of_;  // action -> item, built for describe_stuck only
  static constexpr std::int32_t waiting_for_peers = -2;
};

// The step's end with each rank's optimizer steps (CostModel::optimizer_step: empty, one entry
// for every stage, or one per stage): a rank runs its stages' after its last action ends, and
// the step ends when the last rank is done. `latest` is run.latest_end(); with no optimizer
// time it is returned as it is, so such a step prices exactly as without the term.
[[nodiscard]] inline double end_with_optimizer(const FlatSchedule& flat, const AbstractExecution& run,
                                               const std::vector<double>& optimizer, double latest) {
  if (optimizer.empty()) return latest;
  for (std::int32_t r = 0; r < flat.ranks; ++r) {
    double own = 0.0;
    for (std::int32_t s = 0; s < flat.stages; ++s) {
      if (flat.rank_of(s) == r) own += optimizer[optimizer.size() == 1 ? 0 : static_cast<std::size_t>(s)];
    }
    if (!(own > 0.0)) continue;
    const auto b = static_cast<std::size_t>(flat.rank_begin[static_cast<std::size_t>(r)]);
    const auto e = static_cast<std::size_t>(flat.rank_begin[static_cast<std::size_t>(r) + 1]);
    if (b == e) continue;  // a rank without actions holds no stage's weights to step
    double last = run.end(b);
    for (std::size_t i = b + 1; i < e; ++i) last = std::max(last, run.end(i));
    latest = std::max(latest, last + own);
  }
  return latest;
}

}  // namespace detail

}  // namespace ppsched
