// The simulator's transfer sizes as the runtime moves them. Without Batch::sizes the runtime
// moves a typed boundary's whole payload — the count header and every tensor at its declared
// maximum — whatever a micro-batch carries: with_boundary_bytes charges that (a model with
// per-micro-batch scales keeps its scaled times, not scaled transfer bytes). With
// Batch::sizes every transfer moves its micro-batch's size: with_boundary_floats charges each
// micro-batch its own.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "ppsched/costs/cost_model.hpp"
#include "ppsched/error.hpp"
#include "ppsched/graph/tensor.hpp"

namespace ppsched::inline PPSCHED_MODE {

// `c` with stage s's output_bytes set to payload_bytes(outputs[s]) for every stage and
// micro-batch; `outputs` has one tensor list per stage (the last one's is never sent).
// A single-entry or scaled model becomes a per-(stage, micro-batch) table.
[[nodiscard]] PPSCHED_OUTLINE CostModel with_boundary_bytes(CostModel c, std::span<const std::vector<TensorSpec>> outputs,
                                                   std::int32_t microbatches);

// `c` with stage s's output_bytes of micro-batch k set to output_floats[s * m + k] floats (4
// bytes each): what the runtime moves for a variable-length batch (each Batch::sizes entry's
// `output`), so that the prediction charges every transfer the micro-batch's own size. The
// stage count is output_floats.size() / m; the result is a per-(stage, micro-batch) table.
[[nodiscard]] PPSCHED_OUTLINE CostModel with_boundary_floats(CostModel c, std::span<const std::size_t> output_floats,
                                                            std::int32_t microbatches);

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/sim/impl/boundaries.ipp"
#endif
