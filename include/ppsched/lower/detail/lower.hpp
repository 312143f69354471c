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

}  // namespace ppsched

#endif  // PPSCHED_LOWER_DETAIL_LOWER_HPP
