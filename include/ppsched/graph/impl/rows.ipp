// The bodies of <ppsched/graph/rows.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE double value_at_rows(std::span<const RowsValue> points, double rows) {
  using detail::concat;
  if (points.empty()) detail::fail({"value_at_rows", "no measured points", "points", "measure at least one micro-batch size"});
  if (!(rows > 0.0)) detail::fail({"value_at_rows", detail::concat("rows = ", rows), "rows", "ask for a micro-batch of more than 0 rows"});
  for (std::size_t i = 0; i < points.size(); ++i) {
    if (!(points[i].rows > 0.0) || (i > 0 && !(points[i].rows > points[i - 1].rows))) {
      detail::fail({"value_at_rows", detail::concat("point ", i, " is at ", points[i].rows, " rows"), detail::concat("points[", i, "].rows"),
            "give points at distinct sizes > 0, in increasing order"});
    }
  }
  const RowsValue& first = points.front();
  if (points.size() == 1) return first.value * (rows / first.rows);
  const auto line = [](const RowsValue& a, const RowsValue& b, double x) {
    return a.value + (b.value - a.value) * ((x - a.rows) / (b.rows - a.rows));
  };
  if (rows <= first.rows) {
    const double fixed = std::clamp(line(first, points[1], 0.0), 0.0, first.value);
    return std::clamp(line(first, points[1], rows), fixed, std::max(fixed, first.value));
  }
  const RowsValue& last = points.back();
  if (rows >= last.rows) {
    const RowsValue& before = points[points.size() - 2];
    const double slope = std::max(0.0, (last.value - before.value) / (last.rows - before.rows));
    return last.value + slope * (rows - last.rows);
  }
  const auto upper = std::upper_bound(points.begin(), points.end(), rows,
                                      [](double x, const RowsValue& p) { return x < p.rows; });
  return line(*(upper - 1), *upper, rows);
}

}  // namespace ppsched
