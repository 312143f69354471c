// Part of <ppsched/runtime/executor.hpp> (include that): the step's results: losses, outputs and
// the timeline spans.
#pragma once

#include "ppsched/config.hpp"

#include "ppsched/runtime/executor/core.hpp"

namespace ppsched::inline PPSCHED_MODE {

template <class B>
auto Executor<B>::collect() -> void {
  if (!options_.record_timeline) return;
  // The origin as the device clock saw it, when the backend can tell; otherwise the host
  // time at which it was issued (the stream was idle, so it ran at once).
  if constexpr (requires(B & b, const typename B::event& e) {
                  { b.event_time(e) } -> std::same_as<std::chrono::steady_clock::time_point>;
                }) {
    result_.origin = b_.event_time(origin_);
  }
  for (std::size_t i = 0; i < plan_.steps.size(); ++i) {
    const PlannedStep& st = plan_.steps[i];
    const double start = b_.elapsed_ms(origin_, start_events_[i]);
    const double end = b_.elapsed_ms(origin_, end_events_[i]);
    for (std::int32_t k = 0; k < st.action_count; ++k) {
      Span& span = result_.spans[static_cast<std::size_t>(st.first_action + k)];
      span.start = start;
      span.end = end;
    }
  }
}

}  // namespace ppsched
