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
//                 CostModel::step_overhead, which no span of the timeline holds
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
#include "ppsched/engine/flat_schedule.hpp"
#include "ppsched/engine/problems.hpp"
#include "ppsched/engine/static_checks.hpp"
#include "ppsched/engine/workspace.hpp"
#include "ppsched/error.hpp"
#include "ppsched/lower/lower.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/trace/timeline.hpp"
#include "ppsched/validate/memory.hpp"
#include "ppsched/validate/report.hpp"

namespace ppsched::inline PPSCHED_MODE {

struct SimOptions {
  // One stream per rank: communication blocks compute (no overlap).
  bool comm_on_compute_stream = false;
  // Dependency-only run: no streams or rendezvous for communication, each cross-rank
  // dependency just takes its transfer time. Communication actions are ignored.
  bool ideal_communication = false;
  // Fill SimResult::timeline (one Span per action); off saves time and memory in sweeps.
  bool record_timeline = true;
};

struct SimRankStats {
  double first_start = 0.0;  // first compute start
  double last_end = 0.0;     // last compute end
  double span = 0.0;         // last_end - first_start
  double busy = 0.0;
  double input_wait = 0.0;    // compute idle while a remote input is on its way (see above)
  double idle = 0.0;          // makespan - busy
  double idle_in_span = 0.0;  // span - busy
};

struct SimResult {
  Timeline timeline;
  double makespan = 0.0;
  std::vector<SimRankStats> ranks;
  double bubble_fraction = 0.0;
  double ideal_time = 0.0;
  double bubble_vs_ideal = 0.0;
  std::vector<RankMemory> memory;                  // per rank: stored stage activations and bytes (validate/report.hpp)
  std::vector<std::int32_t> stage_peak_in_flight;  // per stage
  bool lowered_internally = false;                 // the input was compute-only and was lowered
  // The makespan's part that is not in the timeline (CostModel::step_overhead): the timeline
  // holds what runs as actions, which is also all a measured timeline records.
  double step_overhead = 0.0;
};

namespace detail {

[[noreturn]] inline void fail_simulation(const Schedule& s, const ValidationReport& report) {
  std::string list;
  for (const Problem& p : report.problems) list += "\n  - " + p.message;
  if (report.unlisted_problems != 0) list += concat("\n  - ... and ", report.unlisted_problems, " more");
  fail({"simulate: schedule '" + s.name + "'", "is not valid:" + list, "", "validate() lists every problem with its fix"});
}

// The run of `input` (lowered, or compute-only for an ideal_communication run), whose static
// checks `proven` says lowering proved; `schedule` is what the caller passed (for messages).
PPSCHED_OUTLINE SimResult simulate_lowered(const Schedule& schedule, const Schedule& input, bool proven, bool lowered_internally,
                                  const CostModel& cost, const SimOptions& options, Workspace& ws)
#if PPSCHED_OUTLINE_BODY
{
  SimResult result;
  result.lowered_internally = lowered_internally;
  FlatSchedule& flat = ws.flat();
  ValidationReport report;
  report.schedule_name = schedule.name;
  {
    ProblemSink sink(report.problems, report.unlisted_problems, 20);
    static_checks(input, flat, sink, options.ideal_communication, proven && !options.ideal_communication);
    if (sink.any()) fail_simulation(schedule, report);
  }
  const std::int32_t M = flat.microbatches;
  check_cost_model(cost, flat.stages, M);

  const std::size_t n = flat.size();
  std::vector<double> input_delay;
  // Times that depend on (op, stage) only come from a table; otherwise from the model.
  const bool per_stage = cost.per_microbatch.empty() && cost.microbatch_scale.empty();
  std::vector<double> table;
  if (per_stage) {
    table.assign(static_cast<std::size_t>(flat.stages) * op_count, 0.0);
    for (std::int32_t st = 0; st < flat.stages; ++st) {
      for (int op = 0; op < op_count; ++op) {
        const Action a{static_cast<Op>(op), st, 0, 0};
        const bool exists = !(a.op == Op::SEND_F && st + 1 == flat.stages) && !(a.op == Op::RECV_F && st == 0) &&
                            !(a.op == Op::SEND_B && st == 0) && !(a.op == Op::RECV_B && st + 1 == flat.stages);
        if (exists) {
          table[static_cast<std::size_t>(st) * op_count + static_cast<std::size_t>(op)] =
              is_compute(a.op) ? compute_time(cost, a, M) : transfer_time(cost, a, M);
        }
      }
    }
  }
  auto duration = [&](const Action& a) {
    if (per_stage) return table[static_cast<std::size_t>(a.stage) * op_count + static_cast<std::size_t>(a.op)];
    return is_compute(a.op) ? compute_time(cost, a, M) : transfer_time(cost, a, M);
  };
  if (!flat.lowered) {
    input_delay.assign(n, 0.0);
    for (std::size_t i = 0; i < n; ++i) {
      const Action& a = flat.at(static_cast<std::int32_t>(i));
      const std::int32_t d = flat.links(static_cast<std::int32_t>(i)).input;
      if (d == detail::no_action || flat.owner[static_cast<std::size_t>(d)] == flat.owner[i]) continue;
      input_delay[i] = a.op == Op::F ? transfer_time(cost, Action{Op::SEND_F, a.stage - 1, a.microbatch, 0}, M)
                                     : transfer_time(cost, Action{Op::SEND_B, a.stage + 1, a.microbatch, 0}, M);
    }
  }

  const StreamMode mode = options.comm_on_compute_stream ? StreamMode::comm_on_compute_stream
                                                         : StreamMode::separate_comm_stream;
  AbstractExecution run(flat, mode, duration, flat.lowered ? nullptr : &input_delay, cost.fb_overlap, &ws.execution());
  if (!run.run()) {
    fail({"simulate: schedule '" + schedule.name + "'",
          detail::concat("deadlocks under rendezvous with ", stream_mode_name(mode), ": ", run.describe_stuck()), "",
          "validate() proves a schedule deadlock-free; lower() writes communication that is"});
  }

  // Statistics, rank by rank over the program order.
  const auto ranks = static_cast<std::size_t>(flat.ranks);
  result.ranks.assign(ranks, SimRankStats{});
  const double first = run.earliest_start(), last = run.latest_end();
  result.step_overhead = cost.step_overhead;
  result.makespan = last - first + cost.step_overhead;
  // The compute on another rank whose output compute action a (on rank r) consumes, if any.
  const auto remote_producer = [&flat](const Action& a, std::int32_t r) {
    if (a.op == Op::F && a.stage > 0 && flat.rank_of(a.stage - 1) != r) return flat.find(Op::F, a.stage - 1, a.microbatch);
    if ((a.op == Op::B || a.op == Op::BI) && a.stage + 1 < flat.stages && flat.rank_of(a.stage + 1) != r) {
      return flat.backward_input(a.stage + 1, a.microbatch);
    }
    return detail::no_action;
  };
  // Where each action of a pair sits in the timeline: the pair's interval split by own times.
  std::vector<std::pair<std::size_t, double>> pair_splits;  // (first action, split point)
  const bool has_pairs = flat.has_pairs;
  for (std::size_t r = 0; r < ranks; ++r) {
    SimRankStats& st = result.ranks[r];
    bool seen = false;
    double previous_end = first;
    const Action* prog = flat.rank_actions[r];
    const std::int32_t begin = flat.rank_begin[r], end = flat.rank_begin[r + 1];
    for (std::int32_t i = begin; i < end; ++i) {
      const auto ii = static_cast<std::size_t>(i);
      const Action& a = prog[i - begin];
      if (is_comm(a.op)) continue;
      if (!seen) st.first_start = run.start(ii);
      seen = true;
      st.last_end = run.end(ii);
      st.busy += run.end(ii) - run.start(ii);
      if (has_pairs && a.group != 0 && i + 1 < end && prog[i + 1 - begin].group == a.group) {
        // One interval for two actions: counted once, waiting for the later remote input.
        const Action& b = prog[i + 1 - begin];
        double ready = -1.0;
        for (const std::int32_t x : {remote_producer(a, static_cast<std::int32_t>(r)),
                                     remote_producer(b, static_cast<std::int32_t>(r))}) {
          if (x != detail::no_action) ready = std::max(ready, run.end(static_cast<std::size_t>(x)));
        }
        if (ready >= 0.0 && run.start(ii) > std::max(previous_end, ready)) {
          st.input_wait += run.start(ii) - std::max(previous_end, ready);
        }
        const double own_a = duration(a), own_b = duration(b);
        const double share = own_a + own_b > 0.0 ? own_a / (own_a + own_b) : 0.5;
        pair_splits.emplace_back(ii, run.start(ii) + (run.end(ii) - run.start(ii)) * share);
        previous_end = run.end(ii);
        ++i;
        continue;
      }
      const std::int32_t producer = remote_producer(a, static_cast<std::int32_t>(r));
      if (producer != detail::no_action) {
        const double ready = std::max(previous_end, run.end(static_cast<std::size_t>(producer)));
        if (run.start(ii) > ready) st.input_wait += run.start(ii) - ready;
      }
      previous_end = run.end(ii);
    }
    st.span = st.last_end - st.first_start;
    st.idle = result.makespan - st.busy;
    st.idle_in_span = st.span - st.busy;
    result.ideal_time = std::max(result.ideal_time, st.busy);
  }
  double idle = 0.0;
  for (const SimRankStats& st : result.ranks) idle += st.idle;
  result.bubble_fraction = result.makespan > 0.0 ? idle / (static_cast<double>(ranks) * result.makespan) : 0.0;
  result.bubble_vs_ideal = result.ideal_time > 0.0 ? (result.makespan - result.ideal_time) / result.ideal_time : 0.0;

  if (cost.per_microbatch.empty() && cost.microbatch_scale.empty()) {
    const std::vector<double> bytes = memory_model_for(cost, flat.stages).activation_bytes;
    detail::measure_memory(
        flat, cost.weight_memory_fraction,
        [&bytes](std::int32_t stage, std::int32_t) { return bytes[static_cast<std::size_t>(stage)]; }, report);
  } else {
    detail::measure_memory(
        flat, cost.weight_memory_fraction,
        [&cost, M](std::int32_t stage, std::int32_t mb) { return stage_cost(cost, stage, mb, M).activation_bytes; },
        report);
  }
  result.memory = std::move(report.memory);
  result.stage_peak_in_flight = std::move(report.stage_peak_in_flight);

  result.timeline.ranks = flat.ranks;
  result.timeline.unit = cost.unit;
  if (options.record_timeline) {
    result.timeline.spans.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      const bool comm_lane = run.on_comm_stream(static_cast<std::int32_t>(i));
      result.timeline.spans[i] = Span{flat.owner[i], flat.at(static_cast<std::int32_t>(i)), comm_lane ? Lane::comm : Lane::compute, run.start(i), run.end(i)};
    }
    for (const auto& [i, split] : pair_splits) {
      result.timeline.spans[i].end = split;
      result.timeline.spans[i + 1].start = split;
    }
  }
  return result;
}
#else
;
#endif

}  // namespace detail

// Simulates `schedule` (compute-only or lowered) under `cost`. Throws ppsched::error for an
// invalid schedule (its problems listed), a cost model that does not fit it, or a
// deadlock (each stuck action named with what it waits for). `ws` (optional) lends its
// arrays (engine/workspace.hpp); without it the call borrows the scratch pool's.
[[nodiscard]] inline SimResult simulate(const Schedule& schedule, const CostModel& cost, const SimOptions& options,
                                        Workspace& ws) {
  if (!options.ideal_communication && !is_lowered(schedule) && !schedule.placement.empty() &&
      schedule.microbatches >= 1) {  // (otherwise the checks name the problem)
    const LoweredSchedule lowered =
        lower(schedule, lower_options_for(cost, schedule.stages(), schedule.microbatches), ws);
    return detail::simulate_lowered(schedule, lowered.schedule(), lowered.proven(), true, cost, options, ws);
  }
  return detail::simulate_lowered(schedule, schedule, false, false, cost, options, ws);
}
[[nodiscard]] inline SimResult simulate(const Schedule& schedule, const CostModel& cost, const SimOptions& options = {}) {
  detail::BorrowedWorkspace ws;  // the scratch pool's (engine/workspace.hpp)
  return simulate(schedule, cost, options, ws.get());
}

// The same for a schedule lower() wrote: its checks are proven by its construction. The result
// is the one simulate() gives the same schedule as a plain Schedule, `lowered_internally`
// included (a schedule without communication, from a single rank, would be lowered again).
[[nodiscard]] inline SimResult simulate(const LoweredSchedule& lowered, const CostModel& cost,
                                        const SimOptions& options, Workspace& ws) {
  const Schedule& s = lowered.schedule();
  const bool relowered = !options.ideal_communication && !lowered.communicates() && !s.placement.empty() &&
                         s.microbatches >= 1;
  return detail::simulate_lowered(s, s, lowered.proven(), relowered, cost, options, ws);
}
[[nodiscard]] inline SimResult simulate(const LoweredSchedule& lowered, const CostModel& cost,
                                        const SimOptions& options = {}) {
  detail::BorrowedWorkspace ws;
  return simulate(lowered, cost, options, ws.get());
}

}  // namespace ppsched
