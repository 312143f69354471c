// A dependency-only run of a compute-only schedule: each rank runs its program in order, an
// action starts when the rank is free and its inputs are done, and an input from another rank
// arrives its transfer time later. These are the simulator's times with
// SimOptions::ideal_communication (no streams or rendezvous for communication), and with free
// communication they are also simulate()'s own, since lowering adds no bubble then.
//
// It is the engine's abstract execution (engine/abstract_execution.hpp) in its dependency-only
// form, over the same flat index and static checks as validate and simulate: what the simulator
// runs with ideal_communication, without the statistics and the memory walk. It is cheap enough
// to time every schedule the greedy construction proposes before the best few are simulated in
// full. Overlapped F&B pairs (compute groups, docs/execution-model.md) run
// as the simulator runs them: the pair starts once the inputs of both actions have arrived,
// occupies the rank for T_F + T_B - CostModel::fb_overlap x min(T_F, T_B), and both results are
// available when it ends (so with no overlap a pair can be slower than its two actions in
// sequence: it waits for both inputs before either starts).
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

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
namespace plan {

struct DependencyRun {
  double makespan = 0.0;
  std::vector<double> busy;      // per rank: time its compute stream is occupied
  double bubble_fraction = 0.0;  // 1 - total busy / (ranks x makespan)
};

}  // namespace plan
namespace detail {

[[noreturn]] inline void fail_dependency_run(const Schedule& s, const std::string& problem) {
  detail::fail({"dependency run of schedule '" + s.name + "'", problem, "",
        "validate() lists every problem of a schedule with its fix"});
}

// plan::run_dependencies; `check_costs` false where the caller has checked `costs` against the
// schedule's stages and micro-batches already: the search checks each placement's costs once
// rather than once per candidate (the check reads every entry of a per-micro-batch table).
[[nodiscard]] inline plan::DependencyRun dependency_run(const Schedule& s, const CostModel& costs, Workspace& ws,
                                                        bool check_costs) {
  using plan::DependencyRun;
  if (s.ranks < 1 || s.microbatches < 1 || s.placement.empty() ||
      s.programs.size() != static_cast<std::size_t>(s.ranks)) {
    detail::fail_dependency_run(s, "its shape is unusable (ranks, micro-batches, placement or program count)");
  }
  if (check_costs) check_cost_model(costs, s.stages(), s.microbatches);
  detail::FlatSchedule& flat = ws.flat();
  {
    std::vector<Problem> problems;
    std::size_t unlisted = 0;
    detail::ProblemSink sink(problems, unlisted, 1);
    if (!detail::static_checks(s, flat, sink, /*skip_comm=*/true) || sink.any()) {
      detail::fail_dependency_run(
          s, detail::concat("it cannot run as written: ",
                    problems.empty() ? std::string("its shape is unusable") : problems.front().message));
    }
  }
  const std::int32_t M = s.microbatches;
  // Times that depend on (op, stage) only come from a table (the model is asked once per
  // entry, not once per action); otherwise from the model.
  const bool per_stage = costs.per_microbatch.empty() && costs.microbatch_scale.empty();
  std::vector<double> table;
  if (per_stage) {
    table.assign(static_cast<std::size_t>(flat.stages) * op_count, 0.0);
    for (std::int32_t st = 0; st < flat.stages; ++st) {
      for (const Op op : {Op::F, Op::B, Op::BI, Op::BW, Op::R, Op::OFFLOAD, Op::RELOAD}) {
        table[static_cast<std::size_t>(st) * op_count + static_cast<std::size_t>(op)] =
            compute_time(costs, Action{op, st, 0, 0}, M);
      }
      if (st + 1 < flat.stages) {
        table[static_cast<std::size_t>(st) * op_count + static_cast<std::size_t>(Op::SEND_F)] =
            transfer_time(costs, Action{Op::SEND_F, st, 0, 0}, M);
      }
      if (st > 0) {
        table[static_cast<std::size_t>(st) * op_count + static_cast<std::size_t>(Op::SEND_B)] =
            transfer_time(costs, Action{Op::SEND_B, st, 0, 0}, M);
      }
    }
  }
  const auto time_of = [&](const Action& a) {
    // As simulate() prices it: a copy of a recomputed micro-batch moves what F kept for R.
    if (flat.has_copies && is_copy(a.op) && flat.find(Op::R, a.stage, a.microbatch) != detail::no_action) {
      return compute_time(costs, a, M, true);
    }
    if (per_stage) return table[static_cast<std::size_t>(a.stage) * op_count + static_cast<std::size_t>(a.op)];
    return is_comm(a.op) ? transfer_time(costs, a, M) : compute_time(costs, a, M);
  };
  // Each action priced once, by its flat index: the run and the busy times below both read it.
  // Each remote input arrives its transfer time after it is produced.
  const std::size_t n = flat.size();
  std::vector<double> duration(n), delay(n, 0.0);
  for (std::size_t r = 0; r < static_cast<std::size_t>(flat.ranks); ++r) {
    const Action* prog = flat.rank_actions[r];
    for (std::int32_t i = flat.rank_begin[r]; i < flat.rank_begin[r + 1]; ++i) {
      const Action& a = prog[i - flat.rank_begin[r]];
      const auto at = static_cast<std::size_t>(i);
      duration[at] = time_of(a);
      const std::int32_t d = flat.links(a).input;
      if (d == detail::no_action || flat.owner[static_cast<std::size_t>(d)] == flat.owner[at]) continue;
      delay[at] = a.op == Op::F ? time_of(Action{Op::SEND_F, a.stage - 1, a.microbatch, 0})
                                : time_of(Action{Op::SEND_B, a.stage + 1, a.microbatch, 0});
    }
  }
  detail::AbstractExecution run(flat, StreamMode::separate_comm_stream, std::span<const double>(duration), &delay,
                                costs.fb_overlap, &ws.execution());
  if (!run.run()) detail::fail_dependency_run(s, "the order cannot run: " + run.describe_stuck());

  // Busy time in program order, a pair once for its two actions (as the run times it).
  DependencyRun result;
  const auto ranks = static_cast<std::size_t>(s.ranks);
  result.busy.assign(ranks, 0.0);
  for (std::size_t r = 0; r < ranks; ++r) {
    const Action* prog = flat.rank_actions[r];
    const double* time = duration.data() + flat.rank_begin[r];
    const std::int32_t count = flat.rank_begin[r + 1] - flat.rank_begin[r];
    for (std::int32_t k = 0; k < count; ++k) {
      const Action& a = prog[k];
      if (flat.has_pairs && a.group != 0 && k + 1 < count && prog[k + 1].group == a.group) {
        const double ta = time[k], tb = time[k + 1];
        result.busy[r] += ta + tb - costs.fb_overlap * std::min(ta, tb);
        ++k;
        continue;
      }
      if (is_copy(a.op)) continue;  // on the copy lane, beside the compute
      result.busy[r] += time[k];
    }
  }
  // As simulate's, so exact timings agree (each rank's optimizer steps after its last action).
  result.makespan = detail::end_with_optimizer(flat, run, costs.optimizer_step, run.latest_end()) + costs.fixed_costs.step;
  double total_busy = 0.0;
  for (const double b : result.busy) total_busy += b;
  result.bubble_fraction =
      result.makespan > 0.0 ? 1.0 - total_busy / (static_cast<double>(ranks) * result.makespan) : 0.0;
  return result;
}

}  // namespace detail
namespace plan {

// Runs `s` (communication actions, if any, are skipped) under `costs`, its overlapped pairs
// with costs.fb_overlap. Throws ppsched::error for a cost model that does not fit, or a
// schedule that fails the static checks (validate() names each problem: a compute group that is
// not an adjacent F and B or BI, an action out of range or missing, an order within a rank
// that cannot run) or whose order cannot run across ranks. `ws` (optional) lends its arrays.
[[nodiscard]] inline DependencyRun run_dependencies(const Schedule& s, const CostModel& costs, Workspace& ws) {
  return detail::dependency_run(s, costs, ws, /*check_costs=*/true);
}

[[nodiscard]] inline DependencyRun run_dependencies(const Schedule& s, const CostModel& costs) {
  Workspace ws;
  return run_dependencies(s, costs, ws);
}

}  // namespace plan
}  // namespace ppsched
