// Internals of <ppsched/partition/chain.hpp>: the exact min-bottleneck splitter's steps. They are
// in ppsched::detail and not part of the API: no example or page uses them, and they may change
// in any release (docs/architecture.md).
//
// They build on the part's types, which <ppsched/partition/chain_split.hpp> holds.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/error.hpp"
#include "ppsched/partition/chain_split.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

inline constexpr double chain_infinity = std::numeric_limits<double>::infinity();

// `v` becomes `n` copies of `value`. In constant evaluation the copies are pushed one by one:
// libstdc++ fills a sized vector by assigning into raw storage, which clang (14) refuses in a
// constant expression, so `vector(n, value)` and `assign` would make the constexpr splitter
// g++-only. At run time, the plain assign.
template <class T>
constexpr void fill_vector(std::vector<T>& v, std::size_t n, const T& value) {
  if (std::is_constant_evaluated()) {
    v.clear();
    v.reserve(n);
    for (std::size_t i = 0; i < n; ++i) v.push_back(value);
  } else {
    v.assign(n, value);
  }
}

template <class T>
[[nodiscard]] constexpr std::vector<T> filled_vector(std::size_t n, const T& value) {
  std::vector<T> v;
  fill_vector(v, n, value);
  return v;
}

[[nodiscard]] constexpr bool chain_value_ok(double x) noexcept {
  return x >= 0.0 && x <= std::numeric_limits<double>::max();
}

// A chain ready for the solver, as views; see the formulas at the top of this header. Empty
// spans mean: speeds all 1, no cut costs, no parameter or activation bytes, no memory caps.
struct ChainModel {
  std::size_t layers = 0;
  std::size_t stages = 0;
  std::span<const double> compute;      // P, layers + 1 running sums
  std::span<const double> params;       // Q, layers + 1 running sums, or empty
  std::span<const double> activations;  // A, layers + 1 running sums, or empty
  std::span<const double> comm;         // per cut 0..layers (both ends 0), or empty
  std::span<const double> speed;        // per stage, or empty
  std::span<const double> memory_cap;   // per stage, or empty
  std::span<const double> inflight;     // per stage; read only when activations are given
  double optimizer_state_factor = 1.0;

  // Skipping "/ 1" and "+ 0" changes no bit of the result, so the empty cases cost nothing.
  [[nodiscard]] constexpr double compute_time(std::size_t j, std::size_t a, std::size_t b) const noexcept {
    const double t = compute[b] - compute[a];
    return speed.empty() ? t : t / speed[j];
  }
  [[nodiscard]] constexpr double time(std::size_t j, std::size_t a, std::size_t b) const noexcept {
    double t = compute_time(j, a, b);
    if (!comm.empty()) {
      t = t + comm[a];
      t = t + comm[b];
    }
    return t;
  }
  [[nodiscard]] constexpr double memory(std::size_t j, std::size_t a, std::size_t b) const noexcept {
    double m = 0.0;
    if (!params.empty()) m = optimizer_state_factor * (params[b] - params[a]);
    if (!activations.empty()) m = m + inflight[j] * (activations[b] - activations[a]);
    return m;
  }
  [[nodiscard]] constexpr bool fits_memory(std::size_t j, std::size_t a, std::size_t b) const noexcept {
    return memory_cap.empty() || memory(j, a, b) <= memory_cap[j];
  }
};

// Records, during one feasibility probe at bound B, the least value that failed a "<= B"
// test. Every decision a probe makes depends on B only through such tests, so the probe's
// outcome is the same for every bound in [B, value): an infeasible probe proves the optimum
// is at least `value`.
struct NextEvent {
  double value = chain_infinity;

  constexpr bool within(double v, double bound) noexcept {
    if (v <= bound) return true;
    if (v < value) value = v;
    return false;
  }
};

[[nodiscard]] constexpr bool stage_fits(const ChainModel& m, std::size_t j, std::size_t a, std::size_t b, double bound,
                                        NextEvent& ev) noexcept {
  return m.fits_memory(j, a, b) && ev.within(m.time(j, a, b), bound);
}

// Largest b in [lo, hi] with stage (j, a, b) feasible, given that b = lo is (or lo == a).
[[nodiscard]] constexpr std::size_t last_fitting_end(const ChainModel& m, std::size_t j, std::size_t a, std::size_t lo,
                                                     std::size_t hi, double bound, NextEvent& ev) noexcept {
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo + 1) / 2;
    if (stage_fits(m, j, a, mid, bound, ev)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// The same, starting from a guess of the answer: gallops away from `guess` (doubling steps)
// until the answer is bracketed, then bisects. Costs about 2 log2 |answer - guess| tests
// instead of log2 (hi - lo), which pays when stages are long and the guess is good.
[[nodiscard]] constexpr std::size_t last_fitting_end_near(const ChainModel& m, std::size_t j, std::size_t a,
                                                          std::size_t lo, std::size_t hi, std::size_t guess,
                                                          double bound, NextEvent& ev) noexcept {
  if (guess > lo && guess < hi) {
    if (stage_fits(m, j, a, guess, bound, ev)) {
      lo = guess;
      for (std::size_t step = 1; lo < hi; step *= 2) {
        const std::size_t x = hi - lo > step ? lo + step : hi;
        if (!stage_fits(m, j, a, x, bound, ev)) {
          hi = x - 1;
          break;
        }
        lo = x;
      }
    } else {
      hi = guess - 1;
      for (std::size_t step = 1; hi - lo > step; step *= 2) {
        const std::size_t x = hi - step;
        if (stage_fits(m, j, a, x, bound, ev)) {
          lo = x;
          break;
        }
        hi = x - 1;
      }
    }
  }
  return last_fitting_end(m, j, a, lo, hi, bound, ev);
}

[[nodiscard]] constexpr double bottleneck_of(const ChainModel& m, std::span<const std::size_t> boundaries) noexcept {
  double worst = 0.0;
  for (std::size_t j = 0; j + 1 < boundaries.size(); ++j) worst = std::max(worst, m.time(j, boundaries[j], boundaries[j + 1]));
  return worst;
}

// Inclusive range of cut positions.
struct CutRange {
  std::size_t first = 0;
  std::size_t last = 0;
};

// Per group of 64 layers (and groups of groups), the largest single-layer compute, parameter
// and activation sums: lets a probe find the few layers too big to form a stage on their own
// without visiting every layer.
struct SingleLayerMaxima {
  struct Max {
    double compute = 0.0;
    double params = 0.0;
    double activations = 0.0;
  };
  static constexpr std::size_t fan = 64;
  std::vector<std::vector<Max>> levels;  // levels[L][g] covers layers [g * 64^(L+1), (g+1) * 64^(L+1))

  [[nodiscard]] static constexpr Max leaf(const ChainModel& m, std::size_t x) noexcept {
    Max v;
    v.compute = m.compute[x + 1] - m.compute[x];
    if (!m.params.empty()) v.params = m.params[x + 1] - m.params[x];
    if (!m.activations.empty()) v.activations = m.activations[x + 1] - m.activations[x];
    return v;
  }
  static constexpr void merge(Max& into, const Max& v) noexcept {
    into.compute = std::max(into.compute, v.compute);
    into.params = std::max(into.params, v.params);
    into.activations = std::max(into.activations, v.activations);
  }
  constexpr void build(const ChainModel& m) {
    levels.clear();
    std::vector<Max> level = filled_vector((m.layers + fan - 1) / fan, Max{});
    for (std::size_t x = 0; x < m.layers; ++x) merge(level[x / fan], leaf(m, x));
    levels.push_back(level);
    while (levels.back().size() > 1) {
      const std::vector<Max>& below = levels.back();
      std::vector<Max> up = filled_vector((below.size() + fan - 1) / fan, Max{});
      for (std::size_t g = 0; g < below.size(); ++g) merge(up[g / fan], below[g]);
      levels.push_back(up);
    }
  }
};

// Feasibility probe for cost models where a stage only gets slower as it grows: no cut costs,
// or the same cost at every interior cut. The set of feasible positions for cut j is kept as
// sorted disjoint ranges; with identical devices it is a single range and the probe is the
// classic greedy with one binary search per stage. Layers too big for a device on their own
// (a slow device, a tight cap) split the ranges; they are found through SingleLayerMaxima.
class MonotoneProbe {
 public:
  constexpr MonotoneProbe(const ChainModel& m, double largest_layer)
      : m_(m), low_max_(m.stages + 1, 0), high_max_(m.stages + 1, m.layers) {
    everywhere_.compute = largest_layer;
  }

  [[nodiscard]] constexpr bool run(double bound, NextEvent& ev) {
    const std::size_t n = m_.layers, k = m_.stages;
    overflow_ = chain_infinity;
    sets_.clear();
    begin_.clear();
    begin_.push_back(0);
    sets_.push_back({0, 0});
    begin_.push_back(1);
    for (std::size_t j = 0; j + 1 < k; ++j) {
      const std::size_t room = n - (k - 1 - j);  // later stages need a layer each
      const std::size_t from = begin_[j], to = begin_[j + 1], out = sets_.size();
      const std::size_t previous_max = j == 0 ? 0 : sets_[from - 1].last;
      const bool may_block = j > 0 && stage_may_block(j, bound);
      for (std::size_t i = from; i < to; ++i) {
        const CutRange cur = sets_[i];
        // Cut j at c, cut j+1 at c+1: a one-layer stage, possible unless that layer is too big.
        if (cur.last > cur.first) {
          const std::size_t hi = std::min(cur.last, room);
          if (cur.first + 1 <= hi) {
            if (may_block) {
              append_unblocked(out, j, cur.first, hi, bound, ev);
            } else {
              append(out, cur.first + 1, hi);
            }
          }
        }
        // Cut j at the range's last position, cut j+1 beyond it: up to the next range (from
        // which later cuts are reached with less work) or the room left.
        const std::size_t next_first = i + 1 < to ? sets_[i + 1].first : n;
        std::size_t lo = cur.last, hi = std::min(next_first, room);
        if (lo < hi) {
          if (i + 1 == to) {
            // The largest feasible cut grows with the bound: earlier probes bracket it.
            lo = std::max(lo, std::min(low_max_[j + 1], hi));
            hi = std::max(lo, std::min(hi, high_max_[j + 1]));
          }
          // Stages tend to be alike: guess this one as long as the previous (no guess when the
          // ranges give no previous length).
          const std::size_t guess = cur.last > previous_max ? cur.last + (cur.last - previous_max) : 0;
          const std::size_t end = last_fitting_end_near(m_, j, cur.last, lo, hi, guess, bound, ev);
          if (end > cur.last) append(out, cur.last + 1, end);
        }
      }
      if (sets_.size() == out) return false;
      begin_.push_back(sets_.size());
    }
    const std::size_t last_start = sets_[begin_[k] - 1].last;
    if (stage_fits(m_, k - 1, last_start, n, bound, ev)) return true;
    overflow_ = m_.fits_memory(k - 1, last_start, n) ? m_.time(k - 1, last_start, n) - bound : chain_infinity;
    return false;
  }

  // After an infeasible run that only failed on the last stage: where the optimum probably
  // is, if the last stage's excess were spread over all stages. A hint for the search, not
  // a bound.
  [[nodiscard]] constexpr double suggest_after_failure(double bound) const noexcept {
    return overflow_ < chain_infinity ? bound + overflow_ / static_cast<double>(m_.stages) : chain_infinity;
  }

  // After a feasible run: walk back from the end, each cut at the latest position that reaches
  // the next one.
  constexpr void split(std::vector<std::size_t>& boundaries) const {
    const std::size_t k = m_.stages;
    fill_vector(boundaries, k + 1, std::size_t{0});
    boundaries[k] = m_.layers;
    for (std::size_t j = k - 1; j >= 1; --j) {
      const std::size_t next = boundaries[j + 1];
      std::size_t lo = begin_[j], hi = begin_[j + 1];  // find the last range starting before `next`
      while (hi - lo > 1) {
        const std::size_t mid = lo + (hi - lo) / 2;
        if (sets_[mid].first < next) {
          lo = mid;
        } else {
          hi = mid;
        }
      }
      boundaries[j] = std::min(sets_[lo].last, next - 1);
    }
  }

  constexpr void remember_infeasible() {
    for (std::size_t j = 0; j < low_max_.size(); ++j) {
      low_max_[j] = j + 1 < begin_.size() ? sets_[begin_[j + 1] - 1].last : 0;
    }
  }
  constexpr void remember_feasible() {
    for (std::size_t j = 0; j + 1 < begin_.size(); ++j) high_max_[j] = sets_[begin_[j + 1] - 1].last;
  }

 private:
  constexpr void append(std::size_t out, std::size_t first, std::size_t last) {
    if (sets_.size() > out && first <= sets_.back().last + 1) {
      sets_.back().last = std::max(sets_.back().last, last);
    } else {
      sets_.push_back({first, last});
    }
  }

  // Interior stages (0 < j < k-1) see the same cut cost on both sides, whatever their layers.
  [[nodiscard]] constexpr double single_time_upper(std::size_t j, double compute) const noexcept {
    double t = m_.speed.empty() ? compute : compute / m_.speed[j];
    if (!m_.comm.empty()) {
      const double c = m_.comm[1];
      t = t + c;
      t = t + c;
    }
    return t;
  }
  [[nodiscard]] constexpr bool group_may_block(std::size_t j, const SingleLayerMaxima::Max& v,
                                               double bound) const noexcept {
    if (single_time_upper(j, v.compute) > bound) return true;
    if (m_.memory_cap.empty()) return false;
    double mem = 0.0;
    if (!m_.params.empty()) mem = m_.optimizer_state_factor * v.params;
    if (!m_.activations.empty()) mem = mem + m_.inflight[j] * v.activations;
    return mem > m_.memory_cap[j];
  }
  // Whether some layer might be too big to be stage j alone; builds the per-group maxima the
  // first time the answer is yes, so identical uncapped devices never pay for them.
  [[nodiscard]] constexpr bool stage_may_block(std::size_t j, double bound) {
    if (!memory_maxima_known_ && !m_.memory_cap.empty()) {
      for (std::size_t x = 0; x < m_.layers; ++x) SingleLayerMaxima::merge(everywhere_, SingleLayerMaxima::leaf(m_, x));
      memory_maxima_known_ = true;
    }
    if (!group_may_block(j, everywhere_, bound)) return false;
    if (maxima_.levels.empty()) maxima_.build(m_);
    return true;
  }

  // Adds cuts first+1 .. hi except those right after a layer that cannot be a stage alone.
  constexpr void append_unblocked(std::size_t out, std::size_t j, std::size_t first, std::size_t hi, double bound,
                                  NextEvent& ev) {
    std::size_t run_start = first + 1;
    visit_blocked(j, first, hi, bound, ev, [&](std::size_t x) {
      if (run_start <= x) append(out, run_start, x);
      run_start = x + 2;
    });
    if (run_start <= hi) append(out, run_start, hi);
  }

  // Calls blocked(x), in increasing x, for each layer x in [lo, hi) that cannot be stage j alone.
  template <class Blocked>
  constexpr void visit_blocked(std::size_t j, std::size_t lo, std::size_t hi, double bound, NextEvent& ev,
                               Blocked&& blocked) {
    std::size_t span = SingleLayerMaxima::fan;
    for (std::size_t L = 1; L < maxima_.levels.size(); ++L) span *= SingleLayerMaxima::fan;
    const std::size_t top = maxima_.levels.size() - 1;
    for (std::size_t g = lo / span; g * span < hi; ++g) visit_group(top, g, span, j, lo, hi, bound, ev, blocked);
  }
  template <class Blocked>
  constexpr void visit_group(std::size_t level, std::size_t g, std::size_t span, std::size_t j, std::size_t lo,
                             std::size_t hi, double bound, NextEvent& ev, Blocked& blocked) {
    if (!group_may_block(j, maxima_.levels[level][g], bound)) return;
    const std::size_t first = g * span, last = std::min(first + span, hi);
    if (level == 0) {
      for (std::size_t x = std::max(first, lo); x < last; ++x) {
        if (!stage_fits(m_, j, x, x + 1, bound, ev)) blocked(x);
      }
      return;
    }
    const std::size_t child_span = span / SingleLayerMaxima::fan;
    for (std::size_t c = std::max(first, lo) / child_span; c * child_span < last; ++c) {
      visit_group(level - 1, c, child_span, j, lo, hi, bound, ev, blocked);
    }
  }

  ChainModel m_;
  std::vector<CutRange> sets_;      // the ranges of every cut, cut after cut
  std::vector<std::size_t> begin_;  // cut j's ranges are sets_[begin_[j] .. begin_[j+1])
  std::vector<std::size_t> low_max_, high_max_;
  double overflow_ = chain_infinity;   // the last failed run's last-stage excess
  SingleLayerMaxima::Max everywhere_;  // over all layers (memory parts filled on first use)
  bool memory_maxima_known_ = false;
  SingleLayerMaxima maxima_;
};

// Feasibility probe for arbitrary cut costs, where a longer stage may be cheaper because it
// ends at a cheaper cut. For each cut j it marks every feasible position, inside a window
// bounded by the monotone relaxation that charges every interior cut the cheapest cut cost.
// For a candidate end b, an earlier start a is useless when a later start a' (less work) has
// comm[a'] <= comm[a]; the remaining starts form a deque with rising cut costs.
class SweepProbe {
 public:
  constexpr explicit SweepProbe(const ChainModel& m) : m_(m), lower_(m.stages + 1), upper_(m.stages + 1) {
    cheapest_cut_ = chain_infinity;
    for (std::size_t b = 1; b < m.layers; ++b) cheapest_cut_ = std::min(cheapest_cut_, m.comm[b]);
    if (m.layers < 2) cheapest_cut_ = 0.0;
  }

  [[nodiscard]] constexpr bool run(double bound, NextEvent& ev) {
    const std::size_t n = m_.layers, k = m_.stages;
    if (!bracket(bound, ev)) return false;
    fill_vector(word_begin_, k + 2, std::size_t{0});
    for (std::size_t j = 0; j <= k; ++j) word_begin_[j + 1] = word_begin_[j] + (upper_[j] - lower_[j]) / 64 + 1;
    fill_vector(bits_, word_begin_[k + 1], decltype(bits_)::value_type{0});
    mark(0, 0);
    for (std::size_t j = 0; j < k; ++j) {
      deque_.clear();
      std::size_t head = 0, next_start = lower_[j];
      bool any = false;
      for (std::size_t b = lower_[j + 1]; b <= upper_[j + 1]; ++b) {
        for (; next_start < b && next_start <= upper_[j]; ++next_start) {
          if (!marked(j, next_start)) continue;
          while (deque_.size() > head && m_.comm[deque_.back()] >= m_.comm[next_start]) deque_.pop_back();
          deque_.push_back(next_start);
        }
        while (head < deque_.size() && !(m_.fits_memory(j, deque_[head], b) &&
                                         ev.within(m_.compute_time(j, deque_[head], b), bound))) {
          ++head;  // too much work or memory for this end, so for every later end too
        }
        for (std::size_t i = deque_.size(); i-- > head;) {
          if (ev.within(m_.time(j, deque_[i], b), bound)) {
            mark(j + 1, b);
            any = true;
            break;
          }
        }
      }
      if (!any) return false;
    }
    return marked(k, n);
  }

  constexpr void split(std::vector<std::size_t>& boundaries) const {
    const std::size_t k = m_.stages;
    fill_vector(boundaries, k + 1, std::size_t{0});
    boundaries[k] = m_.layers;
    NextEvent unused;
    for (std::size_t j = k; j-- > 1;) {
      const std::size_t next = boundaries[j + 1];
      for (std::size_t a = std::min(next - 1, upper_[j]) + 1; a-- > lower_[j];) {
        if (marked(j, a) && stage_fits(m_, j, a, next, bound_, unused)) {
          boundaries[j] = a;
          break;
        }
      }
    }
  }

  constexpr void remember_infeasible() {}
  constexpr void remember_feasible() {}
  [[nodiscard]] constexpr double suggest_after_failure(double) const noexcept { return chain_infinity; }

 private:
  // The relaxation: every interior cut costs the cheapest cut. It never exceeds the true
  // time and grows with the stage, so greedy sweeps bound where each cut can be.
  [[nodiscard]] constexpr double relaxed_time(std::size_t j, std::size_t a, std::size_t b) const noexcept {
    double t = m_.compute_time(j, a, b);
    t = t + (a == 0 || a == m_.layers ? 0.0 : cheapest_cut_);
    t = t + (b == 0 || b == m_.layers ? 0.0 : cheapest_cut_);
    return t;
  }
  [[nodiscard]] constexpr bool relaxed_fits(std::size_t j, std::size_t a, std::size_t b, double bound,
                                            NextEvent& ev) const noexcept {
    return m_.fits_memory(j, a, b) && ev.within(relaxed_time(j, a, b), bound);
  }

  // Fills lower_/upper_: cut j lies in [lower_[j], upper_[j]] in every feasible split.
  [[nodiscard]] constexpr bool bracket(double bound, NextEvent& ev) {
    const std::size_t n = m_.layers, k = m_.stages;
    bound_ = bound;
    lower_[0] = upper_[0] = 0;
    lower_[k] = upper_[k] = n;
    for (std::size_t j = 0; j + 1 < k; ++j) {  // furthest reach, stage after stage
      const std::size_t room = n - (k - 1 - j), a = upper_[j];
      std::size_t lo = a, hi = room;
      while (lo < hi) {
        const std::size_t mid = lo + (hi - lo + 1) / 2;
        if (relaxed_fits(j, a, mid, bound, ev)) {
          lo = mid;
        } else {
          hi = mid - 1;
        }
      }
      upper_[j + 1] = lo;
      if (upper_[j + 1] < j + 1) return false;
    }
    for (std::size_t j = k - 1; j >= 1; --j) {  // furthest reach backwards from the end
      const std::size_t e = lower_[j + 1];
      if (e <= j) return false;
      std::size_t first = e;  // no start reaches e: then cut j is at least e
      if (relaxed_fits(j, e - 1, e, bound, ev)) {
        std::size_t lo = j, hi = e - 1;
        while (lo < hi) {
          const std::size_t mid = lo + (hi - lo) / 2;
          if (relaxed_fits(j, mid, e, bound, ev)) {
            hi = mid;
          } else {
            lo = mid + 1;
          }
        }
        first = lo;
      }
      lower_[j] = std::max(first, j);
      if (lower_[j] > upper_[j]) return false;
    }
    return true;
  }

  [[nodiscard]] constexpr bool marked(std::size_t j, std::size_t pos) const noexcept {
    if (pos < lower_[j] || pos > upper_[j]) return false;
    const std::size_t off = pos - lower_[j];
    return (bits_[word_begin_[j] + off / 64] >> (off % 64)) & 1U;
  }
  constexpr void mark(std::size_t j, std::size_t pos) noexcept {
    const std::size_t off = pos - lower_[j];
    bits_[word_begin_[j] + off / 64] |= std::uint64_t{1} << (off % 64);
  }

  ChainModel m_;
  double cheapest_cut_ = 0.0;
  double bound_ = 0.0;
  std::vector<std::size_t> lower_, upper_;
  std::vector<std::size_t> word_begin_;
  std::vector<std::uint64_t> bits_;
  std::vector<std::size_t> deque_;
};

// Halfway between two non-negative doubles in their ordering, so a search over doubles ends
// after at most 64 halvings whatever their magnitude.
[[nodiscard]] constexpr double double_midpoint(double lo, double hi) noexcept {
  const auto a = std::bit_cast<std::uint64_t>(lo + 0.0), b = std::bit_cast<std::uint64_t>(hi);
  return std::bit_cast<double>(a + (b - a) / 2);
}

// A bound no split beats: the largest layer on the fastest device, and the total work spread
// perfectly over all devices (less a margin that covers the rounding of the sums).
[[nodiscard]] constexpr double chain_lower_bound(const ChainModel& m, double largest_layer) noexcept {
  double fastest = 1.0, total_speed = static_cast<double>(m.stages);
  if (!m.speed.empty()) {
    fastest = 0.0;
    total_speed = 0.0;
    for (const double s : m.speed) {
      fastest = std::max(fastest, s);
      total_speed += s;
    }
  }
  const double spread = m.compute[m.layers] / total_speed * (1.0 - 1e-6);
  return std::max(largest_layer / fastest, spread);
}

// Exact search over bottleneck values: a probe at B either finds a split (whose bottleneck
// becomes the new upper end) or proves nothing below NextEvent::value works (the new lower
// end). `start`, when given, is a known split that brackets the search from above. Returns
// an empty split when no bound works, i.e. when the memory caps rule out every split.
template <class Probe>
[[nodiscard]] constexpr ChainSplit search_bottleneck(const ChainModel& m, Probe& probe, double lo, double guess,
                                                     const ChainSplit& start = {}) {
  ChainSplit best;
  double hi = chain_infinity;
  bool best_is_canonical = false;  // found by a probe of this model, so it follows the tie rule
  if (!start.boundaries.empty()) {
    best.boundaries = start.boundaries;
    hi = bottleneck_of(m, start.boundaries);
  }
  std::vector<std::size_t> candidate;
  double hint = chain_infinity;
  auto attempt = [&](double bound) {
    NextEvent ev;
    if (probe.run(bound, ev)) {
      probe.remember_feasible();
      probe.split(candidate);
      const double got = bottleneck_of(m, candidate);
      if (!(got <= bound)) {  // a probe's split always meets its bound; never loop on a broken one
        detail::fail({"partition", "internal error: a feasibility probe returned a split above its bound", "",
              "please report this with the input that caused it"});
      }
      if (got < hi || (got == hi && !best_is_canonical)) {
        hi = got;
        best.boundaries = candidate;
        best_is_canonical = true;
      }
    } else {
      probe.remember_infeasible();
      lo = std::max(lo, ev.value);
      hint = probe.suggest_after_failure(bound);
    }
  };
  if (guess > lo && guess < hi) attempt(guess);
  if (hi == chain_infinity) attempt(chain_infinity);
  if (hi == chain_infinity) return {};
  // Halving the range bounds the number of probes; the probe's hint, tried on every other
  // step, usually lands much closer.
  bool hinted = false;
  while (lo < hi) {
    hinted = !hinted && hint > lo && hint < hi;
    attempt(hinted ? hint : double_midpoint(lo, hi));
  }
  if (!best_is_canonical) attempt(hi);
  best.bottleneck = hi;
  return best;
}

// True when every interior cut costs the same, so stages only get slower as they grow.
[[nodiscard]] constexpr bool cut_costs_uniform(const ChainModel& m) noexcept {
  for (std::size_t b = 2; b < m.layers && !m.comm.empty(); ++b) {
    if (m.comm[b] != m.comm[1]) return false;
  }
  return true;
}

// The solver on a validated model.
[[nodiscard]] constexpr ChainSplit solve_chain(const ChainModel& m, double largest_layer) {
  const double lo = chain_lower_bound(m, largest_layer);
  double slowest = m.speed.empty() ? 1.0 : chain_infinity;
  for (const double s : m.speed) slowest = std::min(slowest, s);
  double cheapest_cut = chain_infinity, dearest_cut = 0.0;
  for (std::size_t b = 1; b < m.layers && !m.comm.empty(); ++b) {
    cheapest_cut = std::min(cheapest_cut, m.comm[b]);
    dearest_cut = std::max(dearest_cut, m.comm[b]);
  }
  // Feasible for identical devices without caps: a greedy stage overshoots the mean by less
  // than one layer.
  const double guess = lo + largest_layer / slowest + 2.0 * dearest_cut;
  if (cut_costs_uniform(m)) {
    MonotoneProbe probe(m, largest_layer);
    return search_bottleneck(m, probe, lo, guess);
  }
  // Cut costs differ. Charging every interior cut the cheapest cost gives a problem whose
  // optimum is a lower bound; charging the dearest, one whose optimal split is a real split
  // no slower than that optimum. Both are quick to solve exactly, and they leave the sweep
  // a narrow range.
  std::vector<double> flat = filled_vector(m.layers + 1, 0.0);
  ChainModel relaxed = m;
  relaxed.comm = flat;
  std::fill(flat.begin() + 1, flat.end() - 1, cheapest_cut);
  MonotoneProbe optimistic(relaxed, largest_layer);
  const ChainSplit low = search_bottleneck(relaxed, optimistic, lo, guess);
  if (low.boundaries.empty()) return {};
  std::fill(flat.begin() + 1, flat.end() - 1, dearest_cut);
  MonotoneProbe pessimistic(relaxed, largest_layer);
  const ChainSplit high = search_bottleneck(relaxed, pessimistic, low.bottleneck, guess);
  SweepProbe probe(m);
  return search_bottleneck(m, probe, low.bottleneck, chain_infinity, high);
}

// Running sums of `costs` (with the largest single-layer difference P[x+1] - P[x]), checking
// every cost on the way. The check is folded into one flag so the loop stays branch-free;
// only a failure looks for the offending cost.
[[nodiscard]] constexpr std::vector<double> chain_prefix(std::span<const double> costs, double& largest_layer) {
  std::vector<double> prefix = filled_vector(costs.size() + 1, 0.0);
  double sum = 0.0, largest = 0.0;
  bool all_ok = true;
  for (std::size_t i = 0; i < costs.size(); ++i) {
    const double c = costs[i];
    all_ok &= chain_value_ok(c);
    const double next = sum + c;
    largest = std::max(largest, next - sum);
    prefix[i + 1] = next;
    sum = next;
  }
  if (!all_ok) {
    std::size_t i = 0;
    while (chain_value_ok(costs[i])) ++i;
    const double c = costs[i];
    detail::fail({"partition_chain", detail::concat("cost ", i, " is ", c != c ? "NaN" : c < 0.0 ? "negative" : "infinite"),
          detail::concat("costs[", i, "]"), "layer costs must be finite and >= 0"});
  }
  if (!chain_value_ok(sum)) {
    detail::fail({"partition_chain", "the costs add up to more than the largest double", "costs",
          "rescale the costs (choose a larger time unit)"});
  }
  largest_layer = largest;
  return prefix;
}

inline void check_chain_stages(std::size_t layers, std::int32_t stages) {
  if (layers == 0) detail::fail({"partition_chain", "there are no layers to split", "costs", "give at least one layer cost"});
  if (stages <= 0) detail::fail({"partition_chain", detail::concat(stages, " stages requested"), "stages", "ask for at least one stage"});
  if (static_cast<std::size_t>(stages) > layers) {
    detail::fail({"partition_chain", detail::concat(stages, " stages requested for ", layers, " layers; a stage cannot be empty"),
          "stages", detail::concat("ask for at most ", layers, " stages")});
  }
}

}  // namespace detail

}  // namespace ppsched

