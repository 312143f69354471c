// The simulator's transfer sizes from typed stage boundaries (graph/tensor.hpp). The runtime
// moves a boundary's whole payload — the count header and every tensor at its declared
// maximum — whatever a micro-batch actually carries, so that is what a transfer costs here:
// a model with per-micro-batch scales (variable-length micro-batches) keeps its scaled
// times, but not scaled transfer bytes.
#pragma once

#include "ppsched/config.hpp"

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

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/sim/impl/boundaries.ipp"
#endif
