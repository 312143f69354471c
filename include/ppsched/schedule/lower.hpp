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
// dependency-only run: lowering adds no bubble. validate() of the schedule lower() has just
// returned (on the same thread, unchanged) takes this proof rather than checking it again
// (validate.hpp, detail::LoweringProof); tests/test_validate.cpp checks the two agree.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/schedule/validate.hpp"

namespace ppsched {

struct LowerOptions {
  // Compute time of each action for the idealised run that orders the communication;
  // positive and finite. Empty: F = BI = BW = 1 and B = 2. Give your cost model's times
  // (sim/cost_model.hpp: lower_options_for) so the order matches the run you expect.
  std::function<double(const Action&)> compute_time;
  // Transfer time of each send (SEND_F / SEND_B), >= 0 and finite, added to the idealised
  // run's cross-rank dependencies. Empty: free transfers.
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

[[nodiscard]] inline double default_lower_time(const Action& a) noexcept { return a.op == Op::B ? 2.0 : 1.0; }

// One side of a transfer: the key, and the compute action that produces the data, whose
// index is also the transfer's identity (the same on both sides) for breaking ties.
struct CommEntry {
  double key;
  std::int32_t producer;
  std::int32_t receive;  // 0: the send, 1: the receive
};

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

// Inserts SEND_* / RECV_* and groups them (see the header comment). A schedule that already
// has communication is returned unchanged: lowering is idempotent and never rewrites
// communication a user wrote (validate() checks it). Throws ppsched::error when the
// compute-only schedule is invalid or cannot run (naming the problems), or when a compute
// time of the options is not positive and finite.
[[nodiscard]] inline Schedule lower(const Schedule& schedule, const LowerOptions& options = {}) {
  if (is_lowered(schedule)) return schedule;

  detail::FlatSchedule flat;
  ValidationReport report;
  detail::ProblemSink sink(report, 20);
  detail::static_checks(schedule, flat, sink);
  if (sink.any()) {
    std::string list;
    for (const Problem& p : report.problems) list += "\n  - " + p.message;
    if (report.unlisted_problems != 0) list += detail::concat("\n  - ... and ", report.unlisted_problems, " more");
    detail::fail_lowering(schedule, list);
  }

  if (!(options.fb_overlap >= 0.0 && options.fb_overlap <= 1.0)) {
    fail({"lower options", detail::concat("fb_overlap = ", options.fb_overlap, " is outside [0, 1]"), "fb_overlap",
          "give the share of the shorter action of an overlapped pair hidden under the longer: 0 (none) to 1"});
  }
  const std::size_t n = flat.size();
  auto duration = [&](const Action& a) {
    const double t = options.compute_time ? options.compute_time(a) : detail::default_lower_time(a);
    if (!(std::isfinite(t) && t > 0.0)) {
      fail({"lower options", detail::concat("compute_time(", to_string(a), ") is ", t), "",
            "give every compute action a positive, finite time: lowering orders communication by a timeline"});
    }
    return t;
  };
  std::vector<double> delay;
  if (options.transfer_time) {
    delay.assign(n, 0.0);
    for (std::size_t i = 0; i < n; ++i) {
      const Action& a = flat.at(static_cast<std::int32_t>(i));
      Action send{};
      if (a.op == Op::F && a.stage > 0 && flat.rank_of(a.stage - 1) != flat.owner[i]) {
        send = Action{Op::SEND_F, a.stage - 1, a.microbatch, 0};
      } else if ((a.op == Op::B || a.op == Op::BI) && a.stage + 1 < flat.stages && flat.rank_of(a.stage + 1) != flat.owner[i]) {
        send = Action{Op::SEND_B, a.stage + 1, a.microbatch, 0};
      } else {
        continue;
      }
      const double t = options.transfer_time(send);
      if (!(std::isfinite(t) && t >= 0.0)) {
        fail({"lower options", detail::concat("transfer_time(", to_string(send), ") is ", t), "",
              "give every transfer a finite time >= 0"});
      }
      delay[i] = t;
    }
  }
  detail::AbstractExecution ideal(flat, StreamMode::separate_comm_stream, duration, delay.empty() ? nullptr : &delay,
                                  options.fb_overlap);
  if (!ideal.run()) detail::fail_lowering(schedule, "\n  - deadlock: " + ideal.describe_stuck());

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
  detail::pooled_vector<std::int32_t, detail::uninitialised_allocator<std::int32_t>> receivers;
  receivers.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int32_t to = receiver_of(static_cast<std::int32_t>(i));
    receivers[i] = to;
    if (to < 0) continue;
    ++sends_of[static_cast<std::size_t>(flat.owner[i])];
    ++region[static_cast<std::size_t>(to) + 1];
  }
  for (std::size_t r = 0; r < ranks; ++r) region[r + 1] += region[r] + sends_of[r];
  detail::pooled_vector<detail::CommEntry, detail::uninitialised_allocator<detail::CommEntry>> comm;
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
            detail::concat("compute_time(", to_string(a), ") = ", duration(a), " vanishes against its start time ",
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

  Schedule out;
  out.name = schedule.name;
  out.ranks = schedule.ranks;
  out.microbatches = schedule.microbatches;
  out.placement = schedule.placement;
  out.split_backward = schedule.split_backward;
  out.programs.resize(ranks);
  // Each rank's runs merged into one (key, id) order; (key, id) is unique on a rank (an id
  // is one transfer, whose two sides are on two ranks), so the order is total.
  detail::pooled_vector<detail::CommEntry, detail::uninitialised_allocator<detail::CommEntry>> merged, scratch;
  // What lowering proves of `out`, validate() need not prove again (validate.hpp).
  const bool remembering = detail::begin_remembering(out, n + comm.size(), !comm.empty(), flat.has_backward, flat.has_pairs);
  for (std::size_t r = 0; r < ranks; ++r) {
    const std::vector<std::size_t>& starts = runs[r];
    merged.assign(comm.begin() + static_cast<std::ptrdiff_t>(region[r]),
                  comm.begin() + static_cast<std::ptrdiff_t>(starts.size() > 1 ? starts[1] : region[r + 1]));
    for (std::size_t k = 1; k < starts.size(); ++k) {
      const auto run_begin = comm.begin() + static_cast<std::ptrdiff_t>(starts[k]);
      const auto run_end = comm.begin() + static_cast<std::ptrdiff_t>(k + 1 < starts.size() ? starts[k + 1] : region[r + 1]);
      scratch.resize(merged.size() + static_cast<std::size_t>(run_end - run_begin));
      std::merge(merged.begin(), merged.end(), run_begin, run_end, scratch.begin(), detail::comm_before);
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
        *emitted++ = detail::comm_action(flat.at(merged[c].producer), merged[c].receive != 0);
      }
      if (options.group_simultaneous && emitted - first > 1) {
        for (Action* x = first; x != emitted; ++x) x->group = next_group;
        ++next_group;
      }
    };
    for (std::size_t k = 0; k < compute_count; ++k) {
      // Both actions of a pair start together: no communication goes between them.
      const double start = ideal.start(static_cast<std::size_t>(begin) + k);
      while (c < comm_count && merged[c].key <= start) emit_comm();
      *emitted++ = compute[k];
    }
    while (c < comm_count) emit_comm();
    if (remembering) detail::remember_program(prog);
  }
  if (remembering) detail::finish_remembering();
  return out;
}

}  // namespace ppsched
