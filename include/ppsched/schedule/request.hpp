// What a schedule generator is asked for (ranks p, micro-batches m, chunks per rank v), the
// checks every family shares, and the three stage-to-rank placements the families use.
// A family's own rule (v must be 1, m a multiple of p, ...) is checked in the family's header;
// the checks here are the ones no family may skip: sizes at least 1 and a schedule small
// enough to hold in memory, so that no generator ever overflows an index or allocates
// without bound.
#pragma once

#include "ppsched/config.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/schedule/detail/request.hpp"
#include "ppsched/schedule/schedule_request.hpp"

namespace ppsched::inline PPSCHED_MODE {

// Stage s on rank s: GPipe, 1F1B, ZB-H1, ZB-H2, forward-only.
[[nodiscard]] PPSCHED_OUTLINE std::vector<std::int32_t> one_stage_per_rank_placement(std::int32_t ranks);

// Stage chunk*p + rank on rank: Megatron's virtual pipeline, used by interleaved 1F1B and
// looped BFS. Consecutive stages sit on consecutive ranks, so every stage boundary crosses
// ranks when p > 1.
[[nodiscard]] PPSCHED_OUTLINE std::vector<std::int32_t> looped_placement(std::int32_t ranks, std::int32_t chunks);

// Two stages per rank in a V: stage s on rank s for s < p and on rank 2p-1-s for s >= p, so
// rank p-1 holds the two middle stages and rank 0 holds the first and the last (ZB-V).
[[nodiscard]] PPSCHED_OUTLINE std::vector<std::int32_t> v_shape_placement(std::int32_t ranks);

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/schedule/impl/request.ipp"
#endif
