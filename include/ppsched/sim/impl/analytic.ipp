// The bodies of <ppsched/sim/analytic.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE AnalyticBubble analytic_bubble(std::string_view family, std::int32_t p, std::int32_t m,
                                                    std::int32_t v, double t_f, double t_bi, double t_bw) {
  if (p < 1 || m < 1 || v < 1) {
    detail::fail({"analytic_bubble", detail::concat("p = ", p, ", m = ", m, ", v = ", v), "", "p, m and v are at least 1"});
  }
  const FamilyInfo* f = detail::find_family(family);
  if (f == nullptr || f->bubble == nullptr) {
    std::string with;
    for (const FamilyInfo& g : schedule_families) {
      if (g.bubble != nullptr) with += detail::concat(with.empty() ? "" : ", ", g.name);
    }
    detail::fail({"analytic_bubble", detail::concat("no closed form for family '", family, "'"), "",
          detail::concat("families with one: ", with, "; simulate() covers every family")});
  }
  const BubbleFormula& b = *f->bubble;
  AnalyticBubble r;
  r.family = std::string(family);
  r.formula = std::string(b.formula);
  r.measured_against = std::string(b.measured_against);
  r.condition = std::string(b.condition);
  r.idle_per_rank = b.idle_per_rank(p, m, v, t_f, t_bi, t_bw);
  r.holds = b.holds == nullptr || b.holds(p, m, v, t_f, t_bi, t_bw);
  return r;
}

[[nodiscard]] PPSCHED_OUTLINE std::int32_t analytic_peak_in_flight(std::string_view family, std::int32_t p, std::int32_t m,
                                                          std::int32_t stage) noexcept {
  const FamilyInfo* f = detail::find_family(family);
  return f == nullptr || f->peak_in_flight == nullptr ? -1 : f->peak_in_flight(p, m, stage);
}

}  // namespace ppsched
