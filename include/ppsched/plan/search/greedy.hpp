// The greedy construction at the heart of the schedule search: a list scheduler in the spirit
// of the zero-bubble paper's heuristic (Qi et al., ICLR 2024, and its automatic ZB-1p / ZB-2p
// schedules), generalised to any placement — one stage per rank, a V, v looped chunks — and to
// per-(stage, micro-batch) costs and communication delays.
//
// It plays the step forward in time. Whenever a rank is free it picks, in this order:
//   1. a BI (or B) whose inputs have arrived — backward-for-input is the critical path, the
//      rank before is waiting for it. The first stage's BI feeds no other rank, so it waits
//      while a forward can run. A variant (forward_first) runs a ready forward first, as the
//      paper's steady state does;
//   2. a forward whose input has arrived, if the rank's memory and warm-up depth allow it
//      (deepest stage first, or shallowest first for a breadth-first variant) — unless it
//      would still be running when a BI this rank owes arrives, which would delay the
//      critical path (a variant allows it);
//   3. a deferred BW: when a forward waits for memory that the BW frees, when nothing else
//      is left, and otherwise by policy — in every idle gap it fits in, or whenever the rank
//      would idle.
// Each stage runs its forwards, its BIs and its BWs in micro-batch order. Memory is the
// search's (memory.hpp): a forward is admitted only if the rank stays within the limit while
// keeping room for one forward of each deeper stage it holds, so the oldest micro-batch can
// always get through. When a BI's arrival is not known yet (its producer is not scheduled),
// decisions use a lower bound: the producer chain run on otherwise idle ranks from their
// current free time; if every rank ends up waiting on a forward it held back for such a BI,
// those forwards go.
//
// The construction times its decisions as it goes; the search ranks the order it builds by
// run_dependencies() and simulates the best orders in full.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <queue>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/request.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/plan/search/memory.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/plan/search/detail/greedy.hpp"
#include "ppsched/plan/search/greedy_types.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace plan {

// Builds the greedy schedule for `placement` (stage s on rank placement[s], any placement whose
// ranks are 0..ranks-1) under `costs`, or says why the memory limit cannot be met. Throws
// ppsched::error for unusable sizes, a placement off the ranks, or costs that do not fit.
[[nodiscard]] inline GreedyOutcome try_greedy_schedule(std::string name, std::int32_t ranks, std::int32_t microbatches,
                                                       const std::vector<std::int32_t>& placement,
                                                       const CostModel& costs, const GreedyParams& params = {}) {
  using detail::concat;
  const std::string subject = detail::concat("greedy schedule '", name, "'");
  if (ranks < 1 || microbatches < 1 || placement.empty()) {
    detail::fail({subject, detail::concat("p = ", ranks, ", m = ", microbatches, ", ", placement.size(), " stages"), "",
          "give at least one rank, one micro-batch and one stage"});
  }
  const std::int64_t actions = 3 * std::int64_t{microbatches} * static_cast<std::int64_t>(placement.size());
  if (actions > detail::max_generated_actions) {
    detail::fail({subject, detail::concat("the schedule would hold about ", actions, " actions"), "",
          "ask for fewer stages or micro-batches"});
  }
  const std::vector<std::int32_t> per_rank = stages_per_rank(placement, ranks, subject);
  for (std::int32_t r = 0; r < ranks; ++r) {
    if (per_rank[static_cast<std::size_t>(r)] == 0) {
      detail::fail({subject, detail::concat("rank ", r, " holds no stage"), "placement", "place at least one stage on every rank"});
    }
  }
  check_cost_model(costs, static_cast<std::int32_t>(placement.size()), microbatches);
  detail::check_memory_cap(params.limit, ranks);
  if (!params.warmup.empty() && params.warmup.size() != placement.size()) {
    detail::fail({subject,
          detail::concat("GreedyParams::warmup has ", params.warmup.size(), " entries for ", placement.size(), " stages"),
          "GreedyParams::warmup", "give one depth per stage, or none"});
  }
  for (std::size_t s = 0; s < params.warmup.size(); ++s) {
    if (params.warmup[s] < 1) {
      detail::fail({subject, detail::concat("warm-up depth ", params.warmup[s], " on stage ", s, " is below 1"),
            detail::concat("GreedyParams::warmup[", s, "]"), "let every stage hold at least one micro-batch"});
    }
  }
  detail::GreedyBuilder builder(ranks, microbatches, placement, costs, params);
  GreedyOutcome out;
  out.built = builder.run();
  if (out.built) {
    out.schedule = builder.take(std::move(name));
  } else {
    out.problem = std::move(builder.problem);
  }
  return out;
}

// As try_greedy_schedule, but throws ppsched::error when the limit cannot be met.
[[nodiscard]] inline Schedule make_greedy_schedule(std::string name, std::int32_t ranks, std::int32_t microbatches,
                                                   const std::vector<std::int32_t>& placement, const CostModel& costs,
                                                   const GreedyParams& params = {}) {
  const std::string subject = detail::concat("greedy schedule '", name, "'");
  GreedyOutcome out = try_greedy_schedule(std::move(name), ranks, microbatches, placement, costs, params);
  if (!out.built) detail::fail({subject, out.problem, "GreedyParams::limit", "raise the memory limit or use more ranks"});
  return std::move(out.schedule);
}

// ------------------------------------------------------------- the zero-bubble heuristic
//
// The heuristic of the zero-bubble paper's repository for one stage per rank
// (sail-sg/zero-bubble-pipeline-parallelism, scheduler/zb.py, manual_order), which its ZB-1p
// and ZB-2p start from. It builds every stage's program a micro-batch at a time:
//   - micro-batch 0: one forward on every stage; then, from the last stage up, as many more
//     forwards as fit in memory and end before the first backward can arrive (or, with
//     bubble_before_first_backward, start before it), fewer on a stage than on the one before;
//     then the first backward on every stage, from the last up;
//   - every later micro-batch: one forward on each stage that has some left (a stage two or more
//     forwards ahead of the next may skip its turn to let a backward go first, with
//     prioritize_backward), from the first stage down; then one backward on every stage, from
//     the last up. Before each forward or backward a stage runs weight passes (BW) while memory
//     needs room and while one fits before the input arrives; a BW that would end after the
//     input runs when the wait is no longer than the worst stage's bubble so far — or, with
//     no_bubble_greedy off, only when it is longer;
//   - the first stage runs its owed BWs before its last backwards; every stage ends with the
//     BWs still owed.
// The repository tries the eight settings of the three switches and keeps the shortest; the
// search (search.hpp) builds all eight.
struct ZbHeuristicParams {
  MemoryCap limit{};  // per rank; a forward or backward that would pass it runs owed BWs first
  bool bubble_before_first_backward = false;
  bool prioritize_backward = false;
  bool no_bubble_greedy = true;
};

}  // namespace plan
namespace detail {

class ZbHeuristicBuilder {
 public:
  ZbHeuristicBuilder(std::int32_t stages, std::int32_t microbatches, const CostModel& costs,
                     const plan::ZbHeuristicParams& params)
      : S_(stages), M_(microbatches), params_(params) {
    const std::size_t cells = static_cast<std::size_t>(S_) * static_cast<std::size_t>(M_);
    for (auto* v : {&tf_, &tb_, &tw_, &bytes_, &xf_, &xb_}) v->assign(cells, 0.0);
    for (auto* v : {&end_f_, &end_b_}) v->assign(cells, -1.0);
    kept_ = kept_for_bw(costs, S_, M_);
    for (std::int32_t s = 0; s < S_; ++s) {
      for (std::int32_t mb = 0; mb < M_; ++mb) {
        const StageCost c = stage_cost(costs, s, mb, M_);
        const std::size_t i = cell(s, mb);
        tf_[i] = compute_time(costs, Action{Op::F, s, mb, 0}, M_);
        tb_[i] = compute_time(costs, Action{Op::BI, s, mb, 0}, M_);
        tw_[i] = compute_time(costs, Action{Op::BW, s, mb, 0}, M_);
        bytes_[i] = c.activation_bytes;
        if (s + 1 < S_) xf_[i] = transfer_time(costs, Action{Op::SEND_F, s, mb, 0}, M_);
        if (s > 0) xb_[i] = transfer_time(costs, Action{Op::SEND_B, s, mb, 0}, M_);
      }
    }
    const auto n = static_cast<std::size_t>(S_);
    f_.assign(n, 0);
    b_.assign(n, 0);
    w_.assign(n, 0);
    free_.assign(n, 0.0);
    units_.assign(n, 0.0);
    used_bytes_.assign(n, 0.0);
    bubble_.assign(n, 0.0);
    programs_.assign(n, {});
    for (auto& prog : programs_) prog.reserve(3 * static_cast<std::size_t>(M_));
  }

  // Builds the programs; false (with `problem` set) when the limit cannot be met or the order
  // would run a forward before its input exists.
  bool run() {
    for (std::int32_t j = 0; j < S_; ++j) put(j, Op::F);
    warm_up();
    for (std::int32_t i = 1; i < M_ && problem.empty(); ++i) {
      forwards();
      for (std::int32_t j = S_ - 1; j >= 0 && problem.empty(); --j) backward(j, i);
    }
    for (std::int32_t j = 0; j < S_ && problem.empty(); ++j)
      while (w_[static_cast<std::size_t>(j)] < M_) put(j, Op::BW);
    return problem.empty();
  }

  [[nodiscard]] Schedule take(std::string name) {
    Schedule s;
    s.name = std::move(name);
    s.ranks = S_;
    s.microbatches = M_;
    s.placement = one_stage_per_rank_placement(S_);
    s.programs = std::move(programs_);
    s.split_backward = true;
    return s;
  }

  std::string problem;

 private:
  [[nodiscard]] std::size_t cell(std::int32_t s, std::int32_t mb) const noexcept {
    return static_cast<std::size_t>(s) * static_cast<std::size_t>(M_) + static_cast<std::size_t>(mb);
  }
  [[nodiscard]] bool fits(std::int32_t j, double units, double bytes) const noexcept {
    const auto ji = static_cast<std::size_t>(j);
    return units_[ji] + units <= params_.limit.microbatches + plan::memory_slack &&
           used_bytes_[ji] + bytes <= params_.limit.activation_bytes_of(j) * (1.0 + plan::memory_slack);
  }
  [[nodiscard]] double max_bubble() const noexcept { return *std::max_element(bubble_.begin(), bubble_.end()); }
  // When the input of stage j's next forward (or of backward i) is there; -1 when it is not
  // computed yet, which the heuristic's order does not allow.
  [[nodiscard]] double forward_input(std::int32_t j) const noexcept {
    const std::int32_t i = f_[static_cast<std::size_t>(j)];
    if (j == 0) return 0.0;
    const double e = end_f_[cell(j - 1, i)];
    return e < 0.0 ? -1.0 : e + xf_[cell(j - 1, i)];
  }
  [[nodiscard]] double backward_input(std::int32_t j, std::int32_t i) const noexcept {
    if (j + 1 == S_) return 0.0;
    const double e = end_b_[cell(j + 1, i)];
    return e < 0.0 ? -1.0 : e + xb_[cell(j + 1, i)];
  }

  void put(std::int32_t j, Op op) {
    const auto ji = static_cast<std::size_t>(j);
    std::int32_t& count = op == Op::F ? f_[ji] : (op == Op::BI ? b_[ji] : w_[ji]);
    const std::int32_t i = count;
    const std::size_t c = cell(j, i);
    double end = free_[ji];
    switch (op) {
      case Op::F: {
        const double input = forward_input(j);
        if (input < 0.0) {
          problem = detail::concat("stage ", j, " would run forward ", i, " before stage ", j - 1, " has");
          return;
        }
        end = std::max(end, input) + tf_[c];
        end_f_[c] = end;
        units_[ji] += 1.0;
        used_bytes_[ji] += bytes_[c];
        break;
      }
      case Op::BI: {
        const double input = backward_input(j, i);
        if (input < 0.0 || end_f_[c] < 0.0) {
          problem = detail::concat("stage ", j, " would run backward ", i, " before its inputs exist");
          return;
        }
        end = std::max(end, input) + tb_[c];
        end_b_[c] = end;
        units_[ji] -= 1.0 - kept_[ji];
        used_bytes_[ji] -= (1.0 - kept_[ji]) * bytes_[c];
        break;
      }
      default:
        end += tw_[c];
        units_[ji] -= kept_[ji];
        used_bytes_[ji] -= kept_[ji] * bytes_[c];
        break;
    }
    // Idle before the pass counts once the stage has started (its first forward's wait does not).
    const double own = op == Op::F ? tf_[c] : (op == Op::BI ? tb_[c] : tw_[c]);
    if (f_[ji] > 0) bubble_[ji] += end - (free_[ji] + own);
    free_[ji] = end;
    programs_[ji].push_back(Action{op, j, i, 0});
    ++count;
  }

  // The first micro-batch's extra forwards and its backwards.
  void warm_up() {
    std::vector<std::int32_t> extra(static_cast<std::size_t>(S_), 0);
    double arrival = 0.0;  // when the first backward reaches the stage below
    for (std::int32_t j = S_ - 1; j >= 0; --j) {
      const auto ji = static_cast<std::size_t>(j);
      if (j == S_ - 1) {
        arrival = end_f_[cell(j, 0)] + tb_[cell(j, 0)];
        continue;
      }
      const double comm = xb_[cell(j + 1, 0)];
      double units = units_[ji], bytes = used_bytes_[ji], busy = free_[ji];
      for (std::int32_t k = f_[ji]; k < M_; ++k) {
        const std::size_t c = cell(j, k);
        if (units + 1.0 > params_.limit.microbatches + plan::memory_slack ||
            bytes + bytes_[c] > params_.limit.activation_bytes_of(j) * (1.0 + plan::memory_slack))
          break;
        if (params_.bubble_before_first_backward ? busy + tf_[c] > arrival + comm : busy >= arrival + comm) break;
        units += 1.0;
        bytes += bytes_[c];
        busy += tf_[c];
        ++extra[ji];
      }
      arrival = std::max(busy, arrival + comm) + tb_[cell(j, 0)];
    }
    for (std::int32_t j = 1; j < S_; ++j) {
      const auto ji = static_cast<std::size_t>(j);
      while (extra[ji] > 0 && extra[ji] >= extra[ji - 1] && f_[ji] + extra[ji] < M_) --extra[ji];
    }
    for (std::int32_t j = 0; j < S_ && problem.empty(); ++j)
      for (std::int32_t k = 0; k < extra[static_cast<std::size_t>(j)] && problem.empty(); ++k) put(j, Op::F);
    for (std::int32_t j = S_ - 1; j >= 0 && problem.empty(); --j) put(j, Op::BI);
  }

  // BWs before a pass whose input arrives at `input`: while one fits before it, then one more
  // when the wait is within (or, without no_bubble_greedy, beyond) the worst stage's bubble.
  void weights_before(std::int32_t j, double input) {
    const auto ji = static_cast<std::size_t>(j);
    while (problem.empty() && w_[ji] < b_[ji] && free_[ji] + tw_[cell(j, w_[ji])] <= input) put(j, Op::BW);
    if (problem.empty() && w_[ji] < b_[ji] && free_[ji] < input) {
      const bool within = input - free_[ji] <= max_bubble() - bubble_[ji];
      if (!within || params_.no_bubble_greedy) put(j, Op::BW);
    }
  }

  // Owed BWs until `units` and `bytes` more fit; false (problem set) when none is left.
  bool make_room(std::int32_t j, double units, double bytes) {
    const auto ji = static_cast<std::size_t>(j);
    while (!fits(j, units, bytes)) {
      if (w_[ji] >= b_[ji]) {
        problem = detail::concat("the memory limit of ", params_.limit.microbatches, " M_B leaves stage ", j,
                         " no room for its next pass and no weight pass to free it");
        return false;
      }
      put(j, Op::BW);
    }
    return true;
  }

  void forwards() {
    std::vector<std::int32_t> go(static_cast<std::size_t>(S_), 0);
    for (std::int32_t j = 0; j < S_; ++j) {
      const auto ji = static_cast<std::size_t>(j);
      if (f_[ji] >= M_) continue;
      if (j + 1 < S_ && f_[ji] >= f_[ji + 1] + 2 && params_.prioritize_backward) {
        const double next_done = free_[ji + 1] + tf_[cell(j + 1, f_[ji + 1])] + tb_[cell(j + 1, b_[ji + 1])] +
                                 xb_[cell(j + 1, b_[ji + 1])];
        if (free_[ji] >= next_done) continue;
        const std::size_t c = cell(j, f_[ji]);
        double units = units_[ji] + 1.0, bytes = used_bytes_[ji] + bytes_[c], weights = 0.0;
        for (std::int32_t k = w_[ji]; k < b_[ji]; ++k) {
          if (units <= params_.limit.microbatches + plan::memory_slack &&
              bytes <= params_.limit.activation_bytes_of(j) * (1.0 + plan::memory_slack))
            break;
          weights += tw_[cell(j, k)];
          units -= kept_[ji];
          bytes -= kept_[ji] * bytes_[cell(j, k)];
        }
        if (free_[ji] + tf_[c] + weights <= next_done) {
          go[ji] = 1;
          continue;
        }
        if (next_done - free_[ji] <= max_bubble() - bubble_[ji]) continue;
      }
      go[ji] = 1;
    }
    for (std::int32_t j = S_ - 2; j >= 0; --j)
      go[static_cast<std::size_t>(j)] = std::min(go[static_cast<std::size_t>(j)], go[static_cast<std::size_t>(j) + 1]);
    for (std::int32_t j = 0; j < S_ && problem.empty(); ++j) {
      const auto ji = static_cast<std::size_t>(j);
      if (go[ji] == 0) continue;
      if (!make_room(j, 1.0, bytes_[cell(j, f_[ji])])) return;
      if (j > 0) {
        const double input = forward_input(j);
        if (input < 0.0) {
          problem = detail::concat("stage ", j, " would run forward ", f_[ji], " before stage ", j - 1, " has");
          return;
        }
        weights_before(j, input);
      }
      put(j, Op::F);
    }
  }

  void backward(std::int32_t j, std::int32_t i) {
    const auto ji = static_cast<std::size_t>(j);
    if (b_[ji] != i) {
      problem = detail::concat("stage ", j, " is at backward ", b_[ji], " where the heuristic expects ", i);
      return;
    }
    if (!make_room(j, -(1.0 - kept_[ji]), -(1.0 - kept_[ji]) * bytes_[cell(j, i)])) return;
    if (j + 1 < S_) weights_before(j, backward_input(j, i));
    if (j == 0 && f_[ji] == M_)
      while (problem.empty() && w_[ji] < b_[ji]) put(j, Op::BW);
    if (problem.empty()) put(j, Op::BI);
  }

  std::int32_t S_, M_;
  plan::ZbHeuristicParams params_;
  std::vector<double> kept_;  // per stage: what its BI keeps for BW (M_W / M_B)
  std::vector<double> tf_, tb_, tw_, bytes_, xf_, xb_, end_f_, end_b_;
  std::vector<std::int32_t> f_, b_, w_;
  std::vector<double> free_, units_, used_bytes_, bubble_;
  std::vector<std::vector<Action>> programs_;
};

}  // namespace detail
namespace plan {

// Builds the zero-bubble heuristic's schedule (see above) for `ranks` stages, one per rank,
// under `costs`, or says why it cannot (the limit, or an order the heuristic cannot complete).
// Throws ppsched::error for unusable sizes or costs that do not fit.
[[nodiscard]] inline GreedyOutcome try_zb_heuristic_schedule(std::string name, std::int32_t ranks,
                                                             std::int32_t microbatches, const CostModel& costs,
                                                             const ZbHeuristicParams& params = {}) {
  using detail::concat;
  if (ranks < 1 || microbatches < 1) {
    detail::fail({detail::concat("zero-bubble heuristic '", name, "'"), detail::concat("p = ", ranks, ", m = ", microbatches), "",
          "give at least one rank and one micro-batch"});
  }
  if (3 * std::int64_t{microbatches} * ranks > detail::max_generated_actions) {
    detail::fail({detail::concat("zero-bubble heuristic '", name, "'"), detail::concat("p = ", ranks, ", m = ", microbatches), "",
          "ask for fewer ranks or micro-batches"});
  }
  check_cost_model(costs, ranks, microbatches);
  detail::check_memory_cap(params.limit, ranks);
  detail::ZbHeuristicBuilder builder(ranks, microbatches, costs, params);
  GreedyOutcome out;
  out.built = builder.run();
  if (out.built) {
    out.schedule = builder.take(std::move(name));
  } else {
    out.problem = std::move(builder.problem);
  }
  return out;
}

}  // namespace plan
}  // namespace ppsched
