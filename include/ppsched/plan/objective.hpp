// What a plan optimises. ppsched ranks schedules by makespan (the step's wall time: the first
// action's start to the last one's end over all ranks); the zero-bubble paper scores by the
// longest per-rank span (a rank's first compute start to its last compute end,
// SimRankStats::span), which leaves out the ramp-up and ramp-down that other ranks' spans
// cover; and a caller short of memory may trade time for it: the least peak memory among the
// schedules that finish within a time. compare_families (recommend) and the schedule search
// take the same Objective, and both report makespan and span whatever it is.
#pragma once

#include "ppsched/config.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "ppsched/error.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace plan {

enum class ObjectiveKind : std::uint8_t {
  makespan,  // the step's wall time (the default)
  span,      // the longest per-rank span
  memory,    // the largest per-rank peak of stored activations (M_B), within a makespan bound
};

struct Objective {
  ObjectiveKind kind = ObjectiveKind::makespan;
  // ObjectiveKind::memory only: the makespan a schedule may take at most (infinity: any).
  double makespan_bound = std::numeric_limits<double>::infinity();

  friend bool operator==(const Objective&, const Objective&) = default;
};

[[nodiscard]] constexpr std::string_view objective_kind_name(ObjectiveKind k) noexcept {
  switch (k) {
    case ObjectiveKind::makespan:
      return "makespan";
    case ObjectiveKind::span:
      return "span";
    case ObjectiveKind::memory:
      return "memory";
  }
  return "?";
}

// "makespan", "span", "memory", "memory:120" (the spelling ppsched-plan --objective takes).
[[nodiscard]] inline std::string to_string(const Objective& o) {
  std::string out(objective_kind_name(o.kind));
  if (o.kind == ObjectiveKind::memory && !std::isinf(o.makespan_bound)) out += detail::concat(':', o.makespan_bound);
  return out;
}

}  // namespace plan
namespace detail {

// How much less `faster` takes than `slower`, as a share of `slower`: 0 when `slower` takes no
// time (all-zero costs), so a reason never says "-nan% faster" (issue 24).
[[nodiscard]] inline double relative_gain(double faster, double slower) noexcept {
  return slower > 0.0 ? (slower - faster) / slower : 0.0;
}

inline void check_objective(const plan::Objective& o, const std::string& where) {
  if (o.kind != plan::ObjectiveKind::makespan && o.kind != plan::ObjectiveKind::span && o.kind != plan::ObjectiveKind::memory) {
    detail::fail({"objective", detail::concat("kind ", static_cast<int>(o.kind), " is not an ObjectiveKind"), where,
          "use ObjectiveKind::makespan, span or memory"});
  }
  if (!(o.makespan_bound > 0.0)) {
    detail::fail({"objective", detail::concat("makespan_bound = ", o.makespan_bound, " is not positive"), where + ".makespan_bound",
          "give the longest makespan a schedule may take (> 0), or infinity for none"});
  }
}

}  // namespace detail
}  // namespace ppsched
