// Internals of <ppsched/plan/search/greedy.hpp>: the greedy construction of a schedule and the
// zero-bubble heuristic's steps. They are in ppsched::detail and not part of the API: no example
// or page uses them, and they may change in any release (docs/architecture.md).
//
// They build on the part's types, which <ppsched/plan/search/greedy_types.hpp> holds.
#pragma once

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

#include "ppsched/config.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/error.hpp"
#include "ppsched/plan/search/greedy_types.hpp"
#include "ppsched/plan/search/memory.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/request.hpp"
#include "ppsched/schedule/schedule.hpp"

namespace ppsched::inline PPSCHED_MODE {
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
                const CostModel& costs, const plan::GreedyParams& params)
      : P_(ranks),
        M_(microbatches),
        S_(static_cast<std::int32_t>(placement.size())),
        placement_(placement),
        params_(params) {
    split_ = params.weights != plan::WeightPolicy::with_input;
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
    weight_ = plan::stage_weights(placement_, P_);
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
      if (units > params_.limit.microbatches + plan::memory_slack) {
        problem = detail::concat("the memory limit of ", params_.limit.microbatches, " M_B is below the ", units,
                         " M_B one micro-batch needs on rank ", r);
        return false;
      }
      const double limit = params_.limit.activation_bytes_of(r);
      for (std::int32_t mb = 0; mb < M_; ++mb) {
        double bytes = 0.0;
        for (const std::int32_t s : stages_of_[static_cast<std::size_t>(r)]) bytes += bytes_[cell(s, mb)];
        if (bytes > limit * (1.0 + plan::memory_slack)) {
          problem = detail::concat("the memory limit of ", bytes_text(limit), " is below the ", bytes_text(bytes), " micro-batch ", mb,
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
    return units <= params_.limit.microbatches + plan::memory_slack &&
           bytes <= params_.limit.activation_bytes_of(r) * (1.0 + plan::memory_slack);
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
    if (params_.weights == plan::WeightPolicy::fill_gaps) {
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
      if (chosen < 0 || (params_.forward_order == plan::ForwardOrder::deepest_first ? s > chosen : s < chosen)) chosen = s;
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
      bool run_weight = left_[ri] == 0 || params_.weights == plan::WeightPolicy::fill_eagerly;
      if (!run_weight && params_.weights == plan::WeightPolicy::fill_gaps)
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
      out += detail::concat(" rank ", r, " holds ", units_[ri], " M_B with ", left_[ri], " forwards and BIs to go;");
    }
    return out;
  }

  std::int32_t P_, M_, S_;
  std::vector<std::int32_t> placement_;
  plan::GreedyParams params_;
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
}  // namespace ppsched
