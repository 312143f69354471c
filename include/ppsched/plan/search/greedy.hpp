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

namespace ppsched::inline PPSCHED_MODE {

// When the weight gradients run.
enum class WeightPolicy : std::uint8_t {
  with_input,    // right with the input gradient: one B, no split backward (1F1B-like)
  fill_gaps,     // deferred; in idle gaps they fit in, when memory needs room, and at the end
  fill_eagerly,  // deferred; whenever the rank would otherwise idle
};

[[nodiscard]] constexpr std::string_view weight_policy_name(WeightPolicy p) noexcept {
  switch (p) {
    case WeightPolicy::with_input:
      return "with-input";
    case WeightPolicy::fill_gaps:
      return "gaps";
    case WeightPolicy::fill_eagerly:
      return "eager";
  }
  return "?";
}

// Which ready forward a rank with several stages runs first.
enum class ForwardOrder : std::uint8_t {
  deepest_first,     // the stage nearest the loss: micro-batches finish sooner, memory frees sooner
  shallowest_first,  // breadth-first, as looped BFS
};

struct GreedyParams {
  MemoryCap limit{};  // the construction never lets a rank hold more
  // Warm-up depth: at most warmup[s] micro-batches in flight on stage s (forward done, BI
  // not yet); empty for no limit but memory. One stage per rank with p-s is 1F1B's and
  // ZB-H1's depth, with 2(p-s)-1 ZB-H2's. Entries are at least 1.
  std::vector<std::int32_t> warmup;
  WeightPolicy weights = WeightPolicy::fill_gaps;
  bool forward_may_delay_backward = false;  // run a ready forward even if a BI arrives before it ends
  // Run a ready forward the memory admits before a ready BI (the paper's steady state: each
  // stage's next forward, then its backward); by default the BI goes first.
  bool forward_first = false;
  ForwardOrder forward_order = ForwardOrder::deepest_first;
};

// The construction's result: the compute-only schedule, or why there is none (the limit is
// below what one micro-batch needs on some rank).
struct GreedyOutcome {
  bool built = false;
  Schedule schedule;
  std::string problem;
};

namespace detail {

// Per stage, what its BI keeps for its BW (StageCost::weight_memory_fraction, else the model's).
[[nodiscard]] inline std::vector<double> kept_for_bw(const CostModel& costs, std::int32_t stages, std::int32_t microbatches) {
  std::vector<double> kept(static_cast<std::size_t>(stages), costs.weight_memory_fraction);
  for (std::int32_t s = 0; s < stages; ++s) {
    kept[static_cast<std::size_t>(s)] =
        stage_cost(costs, s, 0, microbatches).weight_memory_fraction.value_or(costs.weight_memory_fraction);
  }
  return kept;
}

class GreedyBuilder {
 public:
  GreedyBuilder(std::int32_t ranks, std::int32_t microbatches, const std::vector<std::int32_t>& placement,
                const CostModel& costs, const GreedyParams& params)
      : P_(ranks),
        M_(microbatches),
        S_(static_cast<std::int32_t>(placement.size())),
        placement_(placement),
        params_(params) {
    split_ = params.weights != WeightPolicy::with_input;
    kept_ = kept_for_bw(costs, S_, M_);
    const std::size_t cells = static_cast<std::size_t>(S_) * static_cast<std::size_t>(M_);
    tf_.resize(cells);
    tb_.resize(cells);
    tw_.resize(cells);
    bytes_.resize(cells);
    xf_.assign(cells, 0.0);
    xb_.assign(cells, 0.0);
    for (std::int32_t s = 0; s < S_; ++s) {
      for (std::int32_t mb = 0; mb < M_; ++mb) {
        const StageCost c = stage_cost(costs, s, mb, M_);
        const std::size_t i = cell(s, mb);
        // compute_time, not the StageCost's fields: it adds the fixed cost per action and
        // prices B as the measured full backward, as the simulator will.
        tf_[i] = compute_time(costs, Action{Op::F, s, mb, 0}, M_);
        tb_[i] = compute_time(costs, Action{split_ ? Op::BI : Op::B, s, mb, 0}, M_);
        tw_[i] = compute_time(costs, Action{Op::BW, s, mb, 0}, M_);
        bytes_[i] = c.activation_bytes;
        if (s + 1 < S_ && rank_of(s + 1) != rank_of(s)) xf_[i] = transfer_time(costs, Action{Op::SEND_F, s, mb, 0}, M_);
        if (s > 0 && rank_of(s - 1) != rank_of(s)) xb_[i] = transfer_time(costs, Action{Op::SEND_B, s, mb, 0}, M_);
      }
    }
    weight_ = stage_weights(placement_, P_);
    stages_of_.assign(static_cast<std::size_t>(P_), {});
    for (std::int32_t s = 0; s < S_; ++s) stages_of_[static_cast<std::size_t>(rank_of(s))].push_back(s);
    const auto R = static_cast<std::size_t>(P_);
    end_f_.assign(cells, -1.0);
    end_b_.assign(cells, -1.0);
    nf_.assign(static_cast<std::size_t>(S_), 0);
    nb_.assign(static_cast<std::size_t>(S_), 0);
    free_.assign(R, 0.0);
    units_.assign(R, 0.0);
    used_bytes_.assign(R, 0.0);
    pending_.assign(R, {});
    programs_.assign(R, {});
    for (auto& prog : programs_) prog.reserve(3 * static_cast<std::size_t>(M_) * static_cast<std::size_t>(S_) / R + 4);
    next_event_.assign(R, infinity);
    deferred_forward_.assign(R, 0);
    force_forward_.assign(R, 0);
    left_.assign(R, 0);
    for (std::int32_t s = 0; s < S_; ++s) left_[static_cast<std::size_t>(rank_of(s))] += 2 * M_;
    memo_f_.assign(static_cast<std::size_t>(S_), 0.0);
    memo_b_.assign(static_cast<std::size_t>(S_), 0.0);
    stamp_f_.assign(static_cast<std::size_t>(S_), 0);
    stamp_b_.assign(static_cast<std::size_t>(S_), 0);
  }

  // Builds the programs; false (with `problem` set) when the limit cannot be met.
  bool run() {
    if (!check_limit()) return false;
    for (std::int32_t r = 0; r < P_; ++r) push(0.0, r);
    while (true) {
      while (!heap_.empty()) {
        const auto [t, r] = heap_.top();
        heap_.pop();
        if (t != next_event_[static_cast<std::size_t>(r)]) continue;  // superseded by an earlier event
        next_event_[static_cast<std::size_t>(r)] = infinity;
        now_ = t;
        step(r);
      }
      bool done = true;
      for (std::int32_t r = 0; r < P_; ++r)
        done = done && left_[static_cast<std::size_t>(r)] == 0 && pending_[static_cast<std::size_t>(r)].empty();
      if (done) return true;
      // Every rank waits. A rank that held back a forward for a BI it expected waits for a BI
      // that needs that very forward: let those forwards go. Otherwise memory is wedged.
      bool rescued = false;
      for (std::int32_t r = 0; r < P_; ++r) {
        if (!deferred_forward_[static_cast<std::size_t>(r)]) continue;
        force_forward_[static_cast<std::size_t>(r)] = 1;
        push(std::max(now_, free_[static_cast<std::size_t>(r)]), r);
        rescued = true;
      }
      if (!rescued) {
        problem = describe_wedge();
        return false;
      }
    }
  }

  [[nodiscard]] Schedule take(std::string name) {
    Schedule s;
    s.name = std::move(name);
    s.ranks = P_;
    s.microbatches = M_;
    s.placement = placement_;
    s.programs = std::move(programs_);
    s.split_backward = split_;
    return s;
  }

  std::string problem;
  // How far up a chain of unscheduled producers the lower bounds look; past it, "not before
  // now". Deeper bounds change little and cost a walk over the stages per query.
  std::int32_t lookahead_depth = 4;

 private:
  static constexpr double infinity = std::numeric_limits<double>::infinity();
  static constexpr double eps = 1e-12;

  [[nodiscard]] std::size_t cell(std::int32_t s, std::int32_t mb) const noexcept {
    return static_cast<std::size_t>(s) * static_cast<std::size_t>(M_) + static_cast<std::size_t>(mb);
  }
  [[nodiscard]] std::int32_t rank_of(std::int32_t s) const noexcept { return placement_[static_cast<std::size_t>(s)]; }

  // One micro-batch through all of a rank's stages at once must fit, or nothing can run.
  bool check_limit() {
    for (std::int32_t r = 0; r < P_; ++r) {
      double units = 0.0;
      for (const std::int32_t s : stages_of_[static_cast<std::size_t>(r)])
        units += weight_[static_cast<std::size_t>(s)];
      if (units > params_.limit.microbatches + memory_slack) {
        problem = concat("the memory limit of ", params_.limit.microbatches, " M_B is below the ", units,
                         " M_B one micro-batch needs on rank ", r);
        return false;
      }
      const double limit = params_.limit.activation_bytes_of(r);
      for (std::int32_t mb = 0; mb < M_; ++mb) {
        double bytes = 0.0;
        for (const std::int32_t s : stages_of_[static_cast<std::size_t>(r)]) bytes += bytes_[cell(s, mb)];
        if (bytes > limit * (1.0 + memory_slack)) {
          problem = concat("the memory limit of ", bytes_text(limit), " is below the ", bytes_text(bytes), " micro-batch ", mb,
                           " needs on rank ", r);
          return false;
        }
      }
    }
    return true;
  }

  void push(double t, std::int32_t r) {
    double& next = next_event_[static_cast<std::size_t>(r)];
    if (t < next) {
      next = t;
      heap_.emplace(t, r);
    }
  }

  // When the next forward of stage s may start (-1: its input is not computed yet, -2: none left).
  [[nodiscard]] double forward_ready(std::int32_t s) const noexcept {
    const std::int32_t j = nf_[static_cast<std::size_t>(s)];
    if (j >= M_) return -2.0;
    if (s == 0) return 0.0;
    const double e = end_f_[cell(s - 1, j)];
    return e < 0.0 ? -1.0 : e + xf_[cell(s - 1, j)];
  }

  // When the next BI of stage s may start (-1: not computed yet upstream, -2: its forward has
  // not run on this rank yet).
  [[nodiscard]] double backward_ready(std::int32_t s) const noexcept {
    const std::int32_t j = nb_[static_cast<std::size_t>(s)];
    if (j >= nf_[static_cast<std::size_t>(s)]) return -2.0;
    const double f = end_f_[cell(s, j)];
    if (s + 1 == S_) return f;
    const double e = end_b_[cell(s + 1, j)];
    return e < 0.0 ? -1.0 : std::max(f, e + xb_[cell(s + 1, j)]);
  }

  // Lower bounds on the end of F(s, j) and BI(s, j): their chains run on ranks that do nothing
  // else from now (or from when they are free). Memoised per query (one micro-batch).
  double lb_forward_end(std::int32_t s, std::int32_t j, std::int32_t depth) {
    const std::size_t i = cell(s, j);
    if (end_f_[i] >= 0.0) return end_f_[i];
    const auto si = static_cast<std::size_t>(s);
    if (stamp_f_[si] == query_) return memo_f_[si];
    double t = std::max(now_, free_[static_cast<std::size_t>(rank_of(s))]);
    if (s > 0 && depth > 0) t = std::max(t, lb_forward_end(s - 1, j, depth - 1) + xf_[cell(s - 1, j)]);
    stamp_f_[si] = query_;
    return memo_f_[si] = t + tf_[i];
  }
  double lb_backward_end(std::int32_t s, std::int32_t j, std::int32_t depth) {
    const std::size_t i = cell(s, j);
    if (end_b_[i] >= 0.0) return end_b_[i];
    const auto si = static_cast<std::size_t>(s);
    if (stamp_b_[si] == query_) return memo_b_[si];
    double t = std::max(now_, free_[static_cast<std::size_t>(rank_of(s))]);
    if (depth > 0) {
      t = std::max(t, lb_forward_end(s, j, depth - 1));
      if (s + 1 < S_) t = std::max(t, lb_backward_end(s + 1, j, depth - 1) + xb_[cell(s + 1, j)]);
    }
    stamp_b_[si] = query_;
    return memo_b_[si] = t + tb_[i];
  }
  // Arrival (known, or a lower bound) of the next BI of stage s, whose forward has run.
  double backward_arrival(std::int32_t s) {
    const double known = backward_ready(s);
    if (known >= 0.0) return known;
    const std::int32_t j = nb_[static_cast<std::size_t>(s)];
    ++query_;
    return std::max(end_f_[cell(s, j)], lb_backward_end(s + 1, j, lookahead_depth) + xb_[cell(s + 1, j)]);
  }
  double forward_arrival(std::int32_t s) {
    const double known = forward_ready(s);
    if (known >= 0.0) return known;
    const std::int32_t j = nf_[static_cast<std::size_t>(s)];
    ++query_;
    return lb_forward_end(s - 1, j, lookahead_depth) + xf_[cell(s - 1, j)];
  }

  [[nodiscard]] bool admissible(std::int32_t r, std::int32_t s) const noexcept {
    const auto ri = static_cast<std::size_t>(r);
    const std::int32_t j = nf_[static_cast<std::size_t>(s)];
    if (!params_.warmup.empty() && j - nb_[static_cast<std::size_t>(s)] >= params_.warmup[static_cast<std::size_t>(s)])
      return false;
    double units = units_[ri] + weight_[static_cast<std::size_t>(s)];
    double bytes = used_bytes_[ri] + bytes_[cell(s, j)];
    for (const std::int32_t d : stages_of_[ri]) {
      const std::int32_t k = nf_[static_cast<std::size_t>(d)];
      if (d <= s || k >= M_) continue;
      units += weight_[static_cast<std::size_t>(d)];
      bytes += bytes_[cell(d, k)];
    }
    return units <= params_.limit.microbatches + memory_slack &&
           bytes <= params_.limit.activation_bytes_of(r) * (1.0 + memory_slack);
  }

  // Emits the action on rank r starting at `start` and tells the rank that consumes it.
  void emit(std::int32_t r, Op op, std::int32_t s, double start) {
    const auto ri = static_cast<std::size_t>(r);
    const auto si = static_cast<std::size_t>(s);
    const double w = weight_[si];
    switch (op) {
      case Op::F: {
        const std::int32_t j = nf_[si]++;
        const std::size_t i = cell(s, j);
        programs_[ri].push_back(Action{Op::F, s, j, 0});
        free_[ri] = start + tf_[i];
        end_f_[i] = free_[ri];
        units_[ri] += w;
        used_bytes_[ri] += bytes_[i];
        --left_[ri];
        if (s + 1 < S_ && rank_of(s + 1) != r) {
          const auto to = static_cast<std::size_t>(rank_of(s + 1));
          push(std::max(end_f_[i] + xf_[i], free_[to]), rank_of(s + 1));
        }
        break;
      }
      case Op::B:
      case Op::BI: {
        const std::int32_t j = nb_[si]++;
        const std::size_t i = cell(s, j);
        programs_[ri].push_back(Action{split_ ? Op::BI : Op::B, s, j, 0});
        free_[ri] = start + tb_[i];
        end_b_[i] = free_[ri];
        const double freed = split_ ? 1.0 - kept_[si] : 1.0;
        units_[ri] -= freed * w;
        used_bytes_[ri] -= freed * bytes_[i];
        if (split_) pending_[ri].emplace_back(s, j);
        --left_[ri];
        if (s > 0 && rank_of(s - 1) != r) {
          const auto to = static_cast<std::size_t>(rank_of(s - 1));
          push(std::max(end_b_[i] + xb_[i], free_[to]), rank_of(s - 1));
        }
        break;
      }
      case Op::BW: {
        const auto [ws, j] = pending_[ri].front();
        pending_[ri].pop_front();
        const std::size_t i = cell(ws, j);
        programs_[ri].push_back(Action{Op::BW, ws, j, 0});
        free_[ri] = start + tw_[i];
        units_[ri] -= kept_[static_cast<std::size_t>(ws)] * weight_[static_cast<std::size_t>(ws)];
        used_bytes_[ri] -= kept_[static_cast<std::size_t>(ws)] * bytes_[i];
        break;
      }
      default:
        break;
    }
  }

  [[nodiscard]] double front_weight_time(std::int32_t r) const {
    const auto& [s, j] = pending_[static_cast<std::size_t>(r)].front();
    return tw_[cell(s, j)];
  }

  // Whether no BI rank r owes can arrive before `until` — nor, with `forwards`, a forward the
  // memory would admit that is not ready yet. Known arrivals are checked before lower bounds
  // are computed, and the first early one ends the check.
  bool quiet_until(std::int32_t r, double until, bool forwards) {
    const std::vector<std::int32_t>& stages = stages_of_[static_cast<std::size_t>(r)];
    const double d = std::max(now_, free_[static_cast<std::size_t>(r)]);
    const auto early = [&](double x) { return x < until - eps; };
    const auto watched_forward = [&](std::int32_t s) {
      if (!forwards || nf_[static_cast<std::size_t>(s)] >= M_) return false;
      const double x = forward_ready(s);
      return !(x >= 0.0 && x <= d + eps) && admissible(r, s);  // one ready now is waiting already
    };
    // A forward delays no one by delaying the first stage's BI, which feeds no other rank.
    const auto watched_backward = [&](std::int32_t s) { return forwards || s > 0; };
    for (const std::int32_t s : stages) {
      const double b = backward_ready(s);
      if (b >= 0.0 && watched_backward(s) && early(b)) return false;
      if (watched_forward(s)) {
        const double f = forward_ready(s);
        if (f >= 0.0 && early(f)) return false;
      }
    }
    for (const std::int32_t s : stages) {
      if (backward_ready(s) == -1.0 && watched_backward(s) && early(backward_arrival(s))) return false;
      if (watched_forward(s) && forward_ready(s) == -1.0 && early(forward_arrival(s))) return false;
    }
    return true;
  }

  // One decision of rank r at the current event time.
  void step(std::int32_t r) {
    const auto ri = static_cast<std::size_t>(r);
    const bool forced = force_forward_[ri] != 0;
    force_forward_[ri] = 0;
    deferred_forward_[ri] = 0;
    // The rank idled since free_: deferred BWs that fit in that gap go there.
    if (params_.weights == WeightPolicy::fill_gaps) {
      while (!pending_[ri].empty() && free_[ri] + front_weight_time(r) <= now_ + eps) emit(r, Op::BW, 0, free_[ri]);
    }
    const double d = std::max(now_, free_[ri]);
    const std::vector<std::int32_t>& stages = stages_of_[ri];

    // 1. The BI that became ready first (deeper stage on ties). The first stage's BI feeds no
    // other rank, so it waits while a forward can run.
    std::int32_t best = -1;
    double best_ready = infinity;
    bool first_stage_ready = false;
    for (const std::int32_t s : stages) {
      const double x = backward_ready(s);
      if (x < 0.0 || x > d + eps) continue;
      if (s == 0) {
        first_stage_ready = true;
        continue;
      }
      if (x < best_ready || (x == best_ready && s > best)) {
        best = s;
        best_ready = x;
      }
    }
    if (best >= 0 && !params_.forward_first) {
      emit(r, Op::BI, best, d);
      push(free_[ri], r);
      return;
    }

    // 2. A ready forward the memory admits.
    bool forward_blocked_by_memory = false;
    std::int32_t chosen = -1;
    for (const std::int32_t s : stages) {
      const double x = forward_ready(s);
      if (x < 0.0 || x > d + eps) continue;
      if (!admissible(r, s)) {
        forward_blocked_by_memory = true;
        continue;
      }
      if (chosen < 0 || (params_.forward_order == ForwardOrder::deepest_first ? s > chosen : s < chosen)) chosen = s;
    }
    if (chosen < 0 && forward_blocked_by_memory && !pending_[ri].empty()) {
      emit(r, Op::BW, 0, d);  // frees what the forward needs
      push(free_[ri], r);
      return;
    }
    if (chosen >= 0) {
      bool delays_backward = false;
      if (!params_.forward_may_delay_backward && !forced && best < 0) {
        delays_backward = !quiet_until(r, d + tf_[cell(chosen, nf_[static_cast<std::size_t>(chosen)])], false);
      }
      if (!delays_backward) {
        emit(r, Op::F, chosen, d);
        push(free_[ri], r);
        return;
      }
      deferred_forward_[ri] = 1;
    }
    if (best >= 0) {
      emit(r, Op::BI, best, d);
      push(free_[ri], r);
      return;
    }
    if (first_stage_ready) {
      emit(r, Op::BI, 0, d);
      push(free_[ri], r);
      return;
    }

    // 3. Nothing to start now: a deferred BW, by policy.
    if (split_ && !pending_[ri].empty()) {
      bool run_weight = left_[ri] == 0 || params_.weights == WeightPolicy::fill_eagerly;
      if (!run_weight && params_.weights == WeightPolicy::fill_gaps)
        run_weight = quiet_until(r, d + front_weight_time(r), true);
      if (run_weight) {
        emit(r, Op::BW, 0, d);
        push(free_[ri], r);
        return;
      }
    }

    // 4. Wait for the earliest input whose arrival is known; unknown ones wake the rank when
    // their producer is scheduled.
    double wake = infinity;
    for (const std::int32_t s : stages) {
      const double b = backward_ready(s);
      if (b > d + eps) wake = std::min(wake, b);
      const double f = forward_ready(s);
      if (f > d + eps) wake = std::min(wake, f);
    }
    if (wake < infinity) push(wake, r);
  }

  [[nodiscard]] std::string describe_wedge() const {
    std::string out = "the memory limit wedges the construction:";
    for (std::int32_t r = 0; r < P_; ++r) {
      const auto ri = static_cast<std::size_t>(r);
      if (left_[ri] == 0 && pending_[ri].empty()) continue;
      out += concat(" rank ", r, " holds ", units_[ri], " M_B with ", left_[ri], " forwards and BIs to go;");
    }
    return out;
  }

  std::int32_t P_, M_, S_;
  std::vector<std::int32_t> placement_;
  GreedyParams params_;
  bool split_ = true;
  std::vector<double> kept_;  // per stage: what its BI keeps for BW (M_W / M_B)
  std::vector<double> tf_, tb_, tw_, bytes_, xf_, xb_, end_f_, end_b_;
  std::vector<double> weight_;
  std::vector<std::vector<std::int32_t>> stages_of_;
  std::vector<std::int32_t> nf_, nb_;
  std::vector<double> free_, units_, used_bytes_;
  std::vector<std::deque<std::pair<std::int32_t, std::int32_t>>> pending_;
  std::vector<std::vector<Action>> programs_;
  std::vector<double> next_event_;
  std::vector<std::uint8_t> deferred_forward_, force_forward_;
  std::vector<std::int32_t> left_;  // forwards and BIs still to schedule, per rank
  double now_ = 0.0;
  std::priority_queue<std::pair<double, std::int32_t>, std::vector<std::pair<double, std::int32_t>>,
                      std::greater<std::pair<double, std::int32_t>>>
      heap_;
  std::vector<double> memo_f_, memo_b_;
  std::vector<std::uint64_t> stamp_f_, stamp_b_;
  std::uint64_t query_ = 0;
};

}  // namespace detail

// Builds the greedy schedule for `placement` (stage s on rank placement[s], any placement whose
// ranks are 0..ranks-1) under `costs`, or says why the memory limit cannot be met. Throws
// ppsched::error for unusable sizes, a placement off the ranks, or costs that do not fit.
[[nodiscard]] inline GreedyOutcome try_greedy_schedule(std::string name, std::int32_t ranks, std::int32_t microbatches,
                                                       const std::vector<std::int32_t>& placement,
                                                       const CostModel& costs, const GreedyParams& params = {}) {
  using detail::concat;
  const std::string subject = concat("greedy schedule '", name, "'");
  if (ranks < 1 || microbatches < 1 || placement.empty()) {
    fail({subject, concat("p = ", ranks, ", m = ", microbatches, ", ", placement.size(), " stages"), "",
          "give at least one rank, one micro-batch and one stage"});
  }
  const std::int64_t actions = 3 * std::int64_t{microbatches} * static_cast<std::int64_t>(placement.size());
  if (actions > detail::max_generated_actions) {
    fail({subject, concat("the schedule would hold about ", actions, " actions"), "",
          "ask for fewer stages or micro-batches"});
  }
  const std::vector<std::int32_t> per_rank = stages_per_rank(placement, ranks, subject);
  for (std::int32_t r = 0; r < ranks; ++r) {
    if (per_rank[static_cast<std::size_t>(r)] == 0) {
      fail({subject, concat("rank ", r, " holds no stage"), "placement", "place at least one stage on every rank"});
    }
  }
  check_cost_model(costs, static_cast<std::int32_t>(placement.size()), microbatches);
  detail::check_memory_cap(params.limit, ranks);
  if (!params.warmup.empty() && params.warmup.size() != placement.size()) {
    fail({subject,
          concat("GreedyParams::warmup has ", params.warmup.size(), " entries for ", placement.size(), " stages"),
          "GreedyParams::warmup", "give one depth per stage, or none"});
  }
  for (std::size_t s = 0; s < params.warmup.size(); ++s) {
    if (params.warmup[s] < 1) {
      fail({subject, concat("warm-up depth ", params.warmup[s], " on stage ", s, " is below 1"),
            concat("GreedyParams::warmup[", s, "]"), "let every stage hold at least one micro-batch"});
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
  if (!out.built) fail({subject, out.problem, "GreedyParams::limit", "raise the memory limit or use more ranks"});
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

namespace detail {

class ZbHeuristicBuilder {
 public:
  ZbHeuristicBuilder(std::int32_t stages, std::int32_t microbatches, const CostModel& costs,
                     const ZbHeuristicParams& params)
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
    return units_[ji] + units <= params_.limit.microbatches + memory_slack &&
           used_bytes_[ji] + bytes <= params_.limit.activation_bytes_of(j) * (1.0 + memory_slack);
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
          problem = concat("stage ", j, " would run forward ", i, " before stage ", j - 1, " has");
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
          problem = concat("stage ", j, " would run backward ", i, " before its inputs exist");
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
        if (units + 1.0 > params_.limit.microbatches + memory_slack ||
            bytes + bytes_[c] > params_.limit.activation_bytes_of(j) * (1.0 + memory_slack))
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
        problem = concat("the memory limit of ", params_.limit.microbatches, " M_B leaves stage ", j,
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
          if (units <= params_.limit.microbatches + memory_slack &&
              bytes <= params_.limit.activation_bytes_of(j) * (1.0 + memory_slack))
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
          problem = concat("stage ", j, " would run forward ", f_[ji], " before stage ", j - 1, " has");
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
      problem = concat("stage ", j, " is at backward ", b_[ji], " where the heuristic expects ", i);
      return;
    }
    if (!make_room(j, -(1.0 - kept_[ji]), -(1.0 - kept_[ji]) * bytes_[cell(j, i)])) return;
    if (j + 1 < S_) weights_before(j, backward_input(j, i));
    if (j == 0 && f_[ji] == M_)
      while (problem.empty() && w_[ji] < b_[ji]) put(j, Op::BW);
    if (problem.empty()) put(j, Op::BI);
  }

  std::int32_t S_, M_;
  ZbHeuristicParams params_;
  std::vector<double> kept_;  // per stage: what its BI keeps for BW (M_W / M_B)
  std::vector<double> tf_, tb_, tw_, bytes_, xf_, xb_, end_f_, end_b_;
  std::vector<std::int32_t> f_, b_, w_;
  std::vector<double> free_, units_, used_bytes_, bubble_;
  std::vector<std::vector<Action>> programs_;
};

}  // namespace detail

// Builds the zero-bubble heuristic's schedule (see above) for `ranks` stages, one per rank,
// under `costs`, or says why it cannot (the limit, or an order the heuristic cannot complete).
// Throws ppsched::error for unusable sizes or costs that do not fit.
[[nodiscard]] inline GreedyOutcome try_zb_heuristic_schedule(std::string name, std::int32_t ranks,
                                                             std::int32_t microbatches, const CostModel& costs,
                                                             const ZbHeuristicParams& params = {}) {
  using detail::concat;
  if (ranks < 1 || microbatches < 1) {
    fail({concat("zero-bubble heuristic '", name, "'"), concat("p = ", ranks, ", m = ", microbatches), "",
          "give at least one rank and one micro-batch"});
  }
  if (3 * std::int64_t{microbatches} * ranks > detail::max_generated_actions) {
    fail({concat("zero-bubble heuristic '", name, "'"), concat("p = ", ranks, ", m = ", microbatches), "",
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

}  // namespace ppsched
