// Peak activation memory per rank, measured from the programs' order alone, and the
// memory model a cost model implies.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "ppsched/engine/detail/flat_schedule.hpp"
#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/validate/report.hpp"
#include "ppsched/validate/detail/memory.hpp"

namespace ppsched::inline PPSCHED_MODE {

// The memory model of this cost model for validate() (per-stage sizes without the
// per-micro-batch scale; simulate() reports bytes with it).
[[nodiscard]] PPSCHED_OUTLINE MemoryModel memory_model_for(const CostModel& c, std::int32_t stages);

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/validate/impl/memory.ipp"
#endif
