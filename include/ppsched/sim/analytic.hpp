// Closed-form bubbles and memory bounds of the schedule families, as the literature states
// them (GPipe, PipeDream-Flush / 1F1B, Megatron's interleaved 1F1B, breadth-first looping,
// the zero-bubble paper's ZB-H1 and ZB-H2), so a planner or a document can set the
// simulator's prediction beside the formula. The formulas are data on each family's record
// (FamilyInfo::bubble and FamilyInfo::peak_in_flight, schedule/generators.hpp), so a family
// registered there is covered here. ZB-V has no closed form. T_F, T_BI, T_BW are per rank —
// the sum over the rank's model chunks — and T_B = T_BI + T_BW. The tests check the simulator against these exactly.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "ppsched/error.hpp"
#include "ppsched/schedule/generators.hpp"

namespace ppsched::inline PPSCHED_MODE {

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
[[nodiscard]] PPSCHED_OUTLINE AnalyticBubble analytic_bubble(std::string_view family, std::int32_t p, std::int32_t m,
                                                    std::int32_t v, double t_f, double t_bi, double t_bw);

// Peak number of micro-batches whose activations a stage holds (F done, B/BI not yet), as
// the literature bounds it: GPipe m; 1F1B and ZB-H1 p - s on stage s (0-based, one stage
// per rank; at most m); ZB-H2 2p - 1 on the first stage. Returns -1 where no bound is
// stated here (other families, or ZB-H2 past its first stage).
[[nodiscard]] PPSCHED_OUTLINE std::int32_t analytic_peak_in_flight(std::string_view family, std::int32_t p, std::int32_t m,
                                                          std::int32_t stage) noexcept;

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/sim/impl/analytic.ipp"
#endif
