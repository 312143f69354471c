// Timeline: when each action ran, on which rank. The simulator predicts one and the runtime
// measures one; both have this type, so a prediction and a measurement are compared,
// summarised and drawn by the same functions.
#pragma once

#include "ppsched/config.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ppsched/graph/time_unit.hpp"
#include "ppsched/schedule/action.hpp"

namespace ppsched::inline PPSCHED_MODE {

// Where an action ran on its rank. Compute actions (and R) run on the compute lane;
// communication on the comm lane unless the run put communication on the compute stream;
// OFFLOAD and RELOAD on the copy lane (or the compute lane when one stream runs everything).
enum class Lane : std::uint8_t { compute, comm, copy };

[[nodiscard]] constexpr std::string_view lane_name(Lane lane) noexcept {
  switch (lane) {
    case Lane::compute: return "compute";
    case Lane::comm: return "comm";
    case Lane::copy: return "copy";
  }
  return "?";
}

struct Span {
  std::int32_t rank = 0;
  Action action{};
  Lane lane = Lane::compute;
  double start = 0.0;  // in the timeline's unit, from the step's origin
  double end = 0.0;

  friend bool operator==(const Span&, const Span&) = default;
};

struct Timeline {
  std::int32_t ranks = 0;
  // The simulation's cost-model unit, "ms" for a run World measured, as each sets it. No
  // default unit: a timeline built by hand names none until the caller says, and one without
  // a unit converts to no other (compare then compares shapes, calibrate refuses it).
  TimeUnit unit;
  std::vector<Span> spans;  // any order; writers sort as they need

  friend bool operator==(const Timeline&, const Timeline&) = default;
};

}  // namespace ppsched
