// Internals of <ppsched/runtime/backend.hpp>, which includes this file: deadlines that saturate
// instead of overflowing, and whether a limit of any size has been reached. They are in
// ppsched::detail and not part of the API: no example or page uses them, and they may change in
// any release (docs/architecture.md).
#pragma once

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stop_token>
#include <string_view>
#include <utility>

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

// `t + d`, or `time_point::max()` when the sum does not fit: a timeout of
// `std::chrono::milliseconds::max()` is the natural way to write "no timeout", and adding it
// to a clock reading overflows (it does not even fit the clock's nanoseconds). Every deadline
// ppsched computes from a user's duration goes through here. A negative `d` counts as zero.
template <class Rep, class Period>
[[nodiscard]] constexpr std::chrono::steady_clock::time_point saturating_deadline(
    std::chrono::steady_clock::time_point t, std::chrono::duration<Rep, Period> d) noexcept {
  using Clock = std::chrono::steady_clock;
  using D = std::chrono::duration<Rep, Period>;
  static_assert(Period::num * Clock::period::den >= Clock::period::num * Period::den,
                "saturating_deadline: durations finer than the clock's tick are not supported");
  if (d <= D::zero()) return t;
  if (t == Clock::time_point::max()) return t;
  // Room left before the clock's end, in d's unit (rounded down: no overflow in the cast).
  const D room = std::chrono::duration_cast<D>(Clock::time_point::max() - t);
  if (d >= room) return Clock::time_point::max();
  return t + std::chrono::duration_cast<Clock::duration>(d);
}

// Whether `elapsed` has reached `limit`, for any `limit` up to its type's maximum (compared
// without converting `limit` to nanoseconds, which overflows for milliseconds::max()).
template <class Rep, class Period>
[[nodiscard]] constexpr bool reached(std::chrono::steady_clock::duration elapsed,
                                     std::chrono::duration<Rep, Period> limit) noexcept {
  return saturating_deadline(std::chrono::steady_clock::time_point{}, limit) <=
         std::chrono::steady_clock::time_point{} + std::max(elapsed, std::chrono::steady_clock::duration::zero());
}

}  // namespace detail

}  // namespace ppsched
