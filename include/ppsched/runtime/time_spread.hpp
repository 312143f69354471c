// The spread of a measured time over its repetitions: the one type every profiler of the
// library reports (the stage profiler of runtime/profile.hpp, the libtorch adapter's, and the
// Python package's, which computes the same quartiles).
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cstddef>
#include <vector>

namespace ppsched::inline PPSCHED_MODE {
namespace profiling {

// The repetitions of one measured time: median, quartiles and extremes, in the unit asked for.
struct TimeSpread {
  double median = 0.0;
  double q1 = 0.0;
  double q3 = 0.0;
  double min = 0.0;
  double max = 0.0;

  // (max - min) / median: how far one repetition may be from another; 0 for a zero median.
  [[nodiscard]] double relative_spread() const noexcept { return median > 0.0 ? (max - min) / median : 0.0; }
  friend bool operator==(const TimeSpread&, const TimeSpread&) = default;
};

}  // namespace profiling
namespace detail {

// Quartiles by linear interpolation between order statistics (the usual "type 7"). At least
// one sample: callers measure one repetition or more.
[[nodiscard]] inline profiling::TimeSpread spread_of(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  const auto quantile = [&](double q) {
    const double at = q * static_cast<double>(samples.size() - 1);
    const auto lo = static_cast<std::size_t>(at);
    const std::size_t hi = std::min(lo + 1, samples.size() - 1);
    return samples[lo] + (samples[hi] - samples[lo]) * (at - static_cast<double>(lo));
  };
  return {quantile(0.5), quantile(0.25), quantile(0.75), samples.front(), samples.back()};
}

}  // namespace detail
}  // namespace ppsched
