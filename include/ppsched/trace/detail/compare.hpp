// Internals of <ppsched/trace/compare.hpp>: matching measured spans to predicted ones and their
// deviations. They are in ppsched::detail and not part of the API: no example or page uses them,
// and they may change in any release (docs/architecture.md).
//
// They build on the part's types, which <ppsched/trace/compare_types.hpp> holds.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/trace/compare_types.hpp"
#include "ppsched/trace/detail/text.hpp"
#include "ppsched/trace/stats.hpp"
#include "ppsched/trace/timeline.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

// Accumulates deviations; the worst is the first one with the largest magnitude.
class DeviationAccumulator {
 public:
  void add(double value, std::int32_t rank, const Action& action) noexcept {
    ++result_.count;
    sum_ += value;
    sum_abs_ += std::abs(value);
    sum_squares_ += value * value;
    if (result_.worst_rank < 0 || std::abs(value) > result_.max_abs) {
      result_.max_abs = std::abs(value);
      result_.worst_rank = rank;
      result_.worst_action = action;
    }
  }
  [[nodiscard]] Deviation result() const noexcept {
    Deviation d = result_;
    if (d.count != 0) {
      const auto n = static_cast<double>(d.count);
      d.mean = sum_ / n;
      d.mean_abs = sum_abs_ / n;
      d.rms = std::sqrt(sum_squares_ / n);
    }
    return d;
  }

 private:
  Deviation result_{};
  double sum_ = 0.0;
  double sum_abs_ = 0.0;
  double sum_squares_ = 0.0;
};

// The identity of an action across timelines: rank, operation, stage, micro-batch. The
// communication group is not part of it (a measurement need not record groups).
[[nodiscard]] inline auto match_key(const Span& s) noexcept {
  return std::make_tuple(s.rank, s.action.op, s.action.stage, s.action.microbatch);
}

// Indices of the spans sorted by identity, then start: equal identities pair up in time
// order, so an action that legitimately repeats still matches one to one.
[[nodiscard]] PPSCHED_OUTLINE std::vector<std::size_t> sorted_by_identity(const Timeline& t);

PPSCHED_OUTLINE void sort_by_rank_then_start(std::vector<Span>& spans);

}  // namespace detail

}  // namespace ppsched

