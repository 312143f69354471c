// A dependency-only run of a compute-only schedule: each rank runs its program in order, an
// action starts when the rank is free and its inputs are done, and an input from another rank
// arrives its transfer time later. These are the simulator's times with
// SimOptions::ideal_communication (no streams or rendezvous for communication), and with free
// communication they are also simulate()'s own, since lowering adds no bubble then.
//
// It is cheap enough to time every schedule the greedy construction proposes before the best
// few are simulated in full. Overlapped F&B pairs (compute groups, docs/execution-model.md) run
// as the simulator runs them: the pair starts once the inputs of both actions have arrived,
// occupies the rank for T_F + T_B - CostModel::fb_overlap x min(T_F, T_B), and both results are
// available when it ends (so with no overlap a pair can be slower than its two actions in
// sequence: it waits for both inputs before either starts).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/sim/cost_model.hpp"

namespace ppsched {

struct DependencyRun {
  double makespan = 0.0;
  std::vector<double> busy;      // per rank: time its compute stream is occupied
  double bubble_fraction = 0.0;  // 1 - total busy / (ranks x makespan)
};

namespace detail {

[[noreturn]] inline void fail_dependency_run(const Schedule& s, const std::string& problem) {
  fail({"dependency run of schedule '" + s.name + "'", problem, "",
        "validate() lists every problem of a schedule with its fix"});
}

}  // namespace detail

// Runs `s` (communication actions, if any, are skipped) under `costs`, its overlapped pairs
// with costs.fb_overlap. Throws ppsched::error for a cost model that does not fit, a compute
// group that is not two adjacent actions, an F and a B or BI, an action out of range, or an
// order that cannot run (an input never computed, or computed after something that waits
// for it).
[[nodiscard]] inline DependencyRun run_dependencies(const Schedule& s, const CostModel& costs) {
  using detail::concat;
  if (s.ranks < 1 || s.microbatches < 1 || s.placement.empty() ||
      s.programs.size() != static_cast<std::size_t>(s.ranks)) {
    detail::fail_dependency_run(s, "its shape is unusable (ranks, micro-batches, placement or program count)");
  }
  check_cost_model(costs, s.stages(), s.microbatches);
  const double fb_overlap = costs.fb_overlap;
  const std::int32_t S = s.stages(), M = s.microbatches;
  const auto ranks = static_cast<std::size_t>(s.ranks);
  const auto slot = [M](std::int32_t stage, std::int32_t mb) {
    return static_cast<std::size_t>(stage) * static_cast<std::size_t>(M) + static_cast<std::size_t>(mb);
  };

  // Each rank's compute actions, and which of them start a pair.
  std::vector<std::vector<Action>> programs(ranks);
  std::vector<std::vector<std::uint8_t>> pair_start(ranks);
  for (std::size_t r = 0; r < ranks; ++r) {
    std::vector<std::int32_t> index_of(s.programs[r].size(), -1);
    for (std::size_t i = 0; i < s.programs[r].size(); ++i) {
      const Action& a = s.programs[r][i];
      if (is_comm(a.op)) continue;
      if (a.stage < 0 || a.stage >= S || a.microbatch < 0 || a.microbatch >= M ||
          s.placement[static_cast<std::size_t>(a.stage)] != static_cast<std::int32_t>(r)) {
        detail::fail_dependency_run(
            s, concat(to_string(a), " on rank ", r, " is out of range or on a rank its stage is not placed on"));
      }
      index_of[i] = static_cast<std::int32_t>(programs[r].size());
      programs[r].push_back(a);
    }
    pair_start[r].assign(programs[r].size(), 0);
    const auto& prog = s.programs[r];
    for (std::size_t i = 0; i < prog.size(); ++i) {
      if (is_comm(prog[i].op) || prog[i].group == 0) continue;
      const std::uint32_t g = prog[i].group;
      const bool pair = i + 1 < prog.size() && prog[i + 1].group == g && is_compute(prog[i + 1].op) &&
                        (i + 2 == prog.size() || prog[i + 2].group != g);
      if (!pair) {
        detail::fail_dependency_run(s, concat("group ", g, " at rank ", r, " position ", i, " (", to_string(prog[i]),
                                              ") is not an overlapped pair of two adjacent compute actions"));
      }
      const Op x = prog[i].op, y = prog[i + 1].op;
      const bool backward_x = x == Op::B || x == Op::BI, backward_y = y == Op::B || y == Op::BI;
      if (!((x == Op::F && backward_y) || (backward_x && y == Op::F))) {
        detail::fail_dependency_run(s, concat("the pair at rank ", r, " position ", i, " is ", to_string(prog[i]), " and ",
                                              to_string(prog[i + 1]), ", not a forward and a backward"));
      }
      pair_start[r][static_cast<std::size_t>(index_of[i])] = 1;
      ++i;
    }
  }

  const std::size_t cells = static_cast<std::size_t>(S) * static_cast<std::size_t>(M);
  std::vector<double> end_f(cells, -1.0), end_b(cells, -1.0);
  std::vector<std::size_t> head(ranks, 0);
  std::vector<double> free(ranks, 0.0);
  DependencyRun run;
  run.busy.assign(ranks, 0.0);

  const auto duration = [&](const Action& a) { return compute_time(costs, a, M); };
  // When a's inputs are all done, or a negative number while one is not.
  const auto ready = [&](const Action& a) -> double {
    const std::int32_t st = a.stage, mb = a.microbatch;
    switch (a.op) {
      case Op::F: {
        if (st == 0) return 0.0;
        const double e = end_f[slot(st - 1, mb)];
        if (e < 0.0) return -1.0;
        const bool remote = s.placement[static_cast<std::size_t>(st - 1)] != s.placement[static_cast<std::size_t>(st)];
        return remote ? e + transfer_time(costs, Action{Op::SEND_F, st - 1, mb, 0}, M) : e;
      }
      case Op::B:
      case Op::BI: {
        const double f = end_f[slot(st, mb)];
        if (f < 0.0) return -1.0;
        if (st + 1 == S) return f;
        const double e = end_b[slot(st + 1, mb)];
        if (e < 0.0) return -1.0;
        const bool remote = s.placement[static_cast<std::size_t>(st + 1)] != s.placement[static_cast<std::size_t>(st)];
        return std::max(f, remote ? e + transfer_time(costs, Action{Op::SEND_B, st + 1, mb, 0}, M) : e);
      }
      case Op::BW:
        return end_b[slot(st, mb)];
      default:
        return 0.0;
    }
  };
  std::vector<std::int32_t> worklist;
  std::vector<std::uint8_t> queued(ranks, 1);
  for (std::size_t r = ranks; r-- > 0;) worklist.push_back(static_cast<std::int32_t>(r));
  const auto finish = [&](const Action& a, std::size_t r, double end) {
    if (a.op == Op::F) {
      end_f[slot(a.stage, a.microbatch)] = end;
      if (a.stage + 1 < S) {
        const auto to = static_cast<std::size_t>(s.placement[static_cast<std::size_t>(a.stage + 1)]);
        if (to != r && !queued[to]) {
          queued[to] = 1;
          worklist.push_back(static_cast<std::int32_t>(to));
        }
      }
    } else if (a.op == Op::B || a.op == Op::BI) {
      end_b[slot(a.stage, a.microbatch)] = end;
      if (a.stage > 0) {
        const auto to = static_cast<std::size_t>(s.placement[static_cast<std::size_t>(a.stage - 1)]);
        if (to != r && !queued[to]) {
          queued[to] = 1;
          worklist.push_back(static_cast<std::int32_t>(to));
        }
      }
    }
    run.makespan = std::max(run.makespan, end);
  };
  while (!worklist.empty()) {
    const auto r = static_cast<std::size_t>(worklist.back());
    worklist.pop_back();
    queued[r] = 0;
    const std::vector<Action>& prog = programs[r];
    while (head[r] < prog.size()) {
      const Action& a = prog[head[r]];
      if (pair_start[r][head[r]]) {
        const Action& b = prog[head[r] + 1];
        const double ra = ready(a), rb = ready(b);
        if (ra < 0.0 || rb < 0.0) break;
        const double ta = duration(a), tb = duration(b);
        const double start = std::max({free[r], ra, rb});
        const double length = ta + tb - fb_overlap * std::min(ta, tb);
        free[r] = start + length;
        run.busy[r] += length;
        finish(a, r, free[r]);
        finish(b, r, free[r]);
        head[r] += 2;
        continue;
      }
      const double at = ready(a);
      if (at < 0.0) break;
      const double length = duration(a);
      free[r] = std::max(free[r], at) + length;
      run.busy[r] += length;
      finish(a, r, free[r]);
      ++head[r];
    }
  }
  for (std::size_t r = 0; r < ranks; ++r) {
    if (head[r] != programs[r].size()) {
      detail::fail_dependency_run(
          s, concat("the order cannot run: rank ", r, " waits at ", to_string(programs[r][head[r]]), " (position ",
                    head[r], " of its compute actions) for an input that is never computed first"));
    }
  }
  double total_busy = 0.0;
  for (const double b : run.busy) total_busy += b;
  run.bubble_fraction = run.makespan > 0.0 ? 1.0 - total_busy / (static_cast<double>(ranks) * run.makespan) : 0.0;
  return run;
}

}  // namespace ppsched
