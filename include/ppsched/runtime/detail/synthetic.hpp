// Internals of <ppsched/runtime/synthetic.hpp>, which includes this file: the timed waits of
// synthetic stages: the timer slack asked down, asleep then yielding to the end. They are in
// ppsched::detail and not part of the API: no example or page uses them, and they may change in
// any release (docs/architecture.md).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include "ppsched/config.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/error.hpp"
#include "ppsched/runtime/stage.hpp"
#include "ppsched/schedule/action.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

// Linux lets a sleeping thread oversleep by its timer slack, 50 us by default: 5% of a 1 ms
// action, enough to blur a bubble measurement. The waiting thread asks for the least slack.
inline void tighten_timer_slack() noexcept {
#if defined(__linux__)
  thread_local const bool done = [] {
    (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    return true;
  }();
  (void)done;
#endif
}

// Waits `units` x `per_unit` from now: asleep until shortly before the end, then yielding
// until it, because a timer wakeup (in a virtual machine above all) comes tens of
// microseconds late. The yielding tail costs at most `spin` of a core per action.
inline void busy_for(double units, std::chrono::nanoseconds per_unit) {
  if (units <= 0.0) return;
  tighten_timer_slack();
  constexpr auto spin = std::chrono::microseconds(100);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  // In double first: a large finite cost times the unit does not fit the clock's integer
  // nanoseconds (the cast overflowed); such a wait saturates at the clock's end.
  const double ns = static_cast<double>(per_unit.count()) * units;
  const auto room = static_cast<double>((Clock::time_point::max() - start).count());
  const auto end = ns >= room ? Clock::time_point::max() : start + Clock::duration(static_cast<Clock::rep>(ns));
  if (end - start > spin) std::this_thread::sleep_until(end - spin);
  while (std::chrono::steady_clock::now() < end) std::this_thread::yield();
}

}  // namespace detail

}  // namespace ppsched
