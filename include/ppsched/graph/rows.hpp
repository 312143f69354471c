// Costs measured at several micro-batch sizes, and the one rule that prices any other size.
// A layer's time is not proportional to the rows of its micro-batch: small micro-batches pay
// fixed costs (kernel launches, dispatch, a GEMM too small to fill the machine) that a linear
// scale from one measured size hides, which is how a planner ends up choosing 64 micro-batches
// of 2 rows that run 40% slower than 8 of 32. So a profile may carry measured points, and every
// part of ppsched prices a size through `value_at_rows` (docs/profile-format.md says the rule).
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <string>

#include "ppsched/error.hpp"

namespace ppsched::inline PPSCHED_MODE {

// A layer's (or a stage function's) costs measured at one micro-batch size: the median of the
// repetitions, with the spread of the slowest-spread time beside it.
struct CostPoint {
  double rows = 0.0;  // samples per micro-batch
  double forward = 0.0;
  double backward_input = 0.0;
  double backward_weight = 0.0;
  std::optional<double> backward{};  // the full backward, when measured
  double activation_bytes = 0.0;
  double output_bytes = 0.0;
  // (max - min) / median of the repetitions, the largest over the times above; informational
  // (how far to trust the point), never priced.
  double spread = 0.0;
  std::optional<double> weight_bytes{};  // what BI leaves for BW, when measured (Layer::weight_bytes)
  std::optional<double> boundary_bytes{};  // what a cut right after the layer lets go (Layer::boundary_bytes)
  std::optional<double> boundary_weight_bytes{};  // likewise of weight_bytes (Layer::boundary_weight_bytes)

  friend bool operator==(const CostPoint&, const CostPoint&) = default;
};

// One measured value at one size, the input of value_at_rows.
struct RowsValue {
  double rows = 0.0;
  double value = 0.0;
};

// The value at `rows` from points measured at distinct sizes, sorted by rows:
//  - between two measured sizes: piecewise linear in rows (exact at every measured size);
//  - above the largest: the straight line through the last two points, its slope taken as at
//    least 0 (more rows never cost less);
//  - below the smallest: the straight line through the first two points, kept between that
//    line's value at 0 rows (the fixed part, itself kept within [0, the first value]) and the
//    first value, so a small micro-batch never costs less than the fixed part measured;
//  - one point only: proportional to rows (no fixed part can be told from one size).
// Throws ppsched::error for no points, unsorted or repeated sizes, or rows <= 0.
[[nodiscard]] PPSCHED_OUTLINE double value_at_rows(std::span<const RowsValue> points, double rows);

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/graph/impl/rows.ipp"
#endif
