// Closed-form bubbles and memory bounds of the schedule families, as the literature states
// them (GPipe, PipeDream-Flush / 1F1B, Megatron's interleaved 1F1B, breadth-first looping,
// the zero-bubble paper's ZB-H1 and ZB-H2), so a planner or a document can set the
// simulator's prediction beside the formula. ZB-V has no closed form here. T_F, T_BI, T_BW are per rank — the sum over the rank's model chunks —
// and T_B = T_BI + T_BW. The tests check the simulator against these exactly.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "ppsched/error.hpp"

namespace ppsched {

struct AnalyticBubble {
  std::string family;
  std::string formula;           // in the literature's notation, e.g. "(p-1)(T_F+T_B)"
  // "makespan": every rank idles exactly idle_per_rank within the step (makespan - busy).
  // "span": the first rank idles exactly idle_per_rank between its first start and its
  // last end, and no rank idles more than that within its own span (ZB-H2: when T_BI <
  // 2 T_BW the ranks finish staggered, so their idle time against the makespan is larger).
  std::string measured_against;
  double idle_per_rank = 0.0;
  bool holds = true;      // false when the inputs are outside `condition`
  std::string condition;  // when the formula is exact (empty: always, for the family's valid inputs)
};

// Throws ppsched::error for a family without a closed form here (the message lists those
// with one) or for p, m, v below 1.
[[nodiscard]] inline AnalyticBubble analytic_bubble(std::string_view family, std::int32_t p, std::int32_t m,
                                                    std::int32_t v, double t_f, double t_bi, double t_bw) {
  if (p < 1 || m < 1 || v < 1) {
    fail({"analytic_bubble", detail::concat("p = ", p, ", m = ", m, ", v = ", v), "", "p, m and v are at least 1"});
  }
  const double k = static_cast<double>(p - 1);
  const double t_b = t_bi + t_bw;
  AnalyticBubble r;
  r.family = std::string(family);
  r.measured_against = "makespan";
  if (family == "gpipe" || family == "1f1b") {
    r.formula = "(p-1)(T_F+T_B)";
    r.idle_per_rank = k * (t_f + t_b);
  } else if (family == "interleaved-1f1b") {
    r.formula = "(p-1)(T_F+T_B)/v";
    r.idle_per_rank = k * (t_f + t_b) / v;
    r.condition = "v = 1, or m a multiple of p (Megatron's rule)";
    r.holds = v == 1 || m % p == 0;
  } else if (family == "looped-bfs") {
    r.formula = "(p-1)(T_F+T_B)/v";
    r.idle_per_rank = k * (t_f + t_b) / v;
    r.condition = "v = 1, or m >= p";
    r.holds = v == 1 || m >= p;
  } else if (family == "zb-h1") {
    r.formula = "(p-1)(T_F+T_BI-T_BW)";
    r.idle_per_rank = k * (t_f + t_bi - t_bw);
    r.condition = "T_BW <= T_F and m >= p";
    r.holds = t_bw <= t_f && m >= p;
  } else if (family == "zb-h2") {
    r.formula = "(p-1)(T_F+T_BI-2T_BW)";
    r.measured_against = "span";
    r.idle_per_rank = k * (t_f + t_bi - 2.0 * t_bw);
    r.condition = "T_BW <= T_F and m >= 2p-1 (the paper states T_BW <= T_F <= T_BI)";
    r.holds = t_bw <= t_f && m >= 2 * p - 1;
  } else if (family == "forward-only") {
    r.formula = "(p-1)T_F";
    r.idle_per_rank = k * t_f;
  } else {
    fail({"analytic_bubble", detail::concat("no closed form for family '", family, "'"), "",
          "families with one: gpipe, 1f1b, interleaved-1f1b, looped-bfs, zb-h1, zb-h2, forward-only; simulate() "
          "covers every family"});
  }
  return r;
}

// Peak number of micro-batches whose activations a stage holds (F done, B/BI not yet), as
// the literature bounds it: GPipe m; 1F1B and ZB-H1 p - s on stage s (0-based, one stage
// per rank; at most m); ZB-H2 2p - 1 on the first stage. Returns -1 where no bound is
// stated here (other families, or ZB-H2 past its first stage).
[[nodiscard]] inline std::int32_t analytic_peak_in_flight(std::string_view family, std::int32_t p, std::int32_t m,
                                                          std::int32_t stage) noexcept {
  if (family == "gpipe") return m;
  if (family == "1f1b" || family == "zb-h1") return std::min(p - stage, m);
  if (family == "zb-h2" && stage == 0) return std::min(2 * p - 1, m);
  if (family == "forward-only") return 0;
  return -1;
}

}  // namespace ppsched
