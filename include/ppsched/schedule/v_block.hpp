// A V building block's row and the cycle its slots repeat on: the types of
// <ppsched/schedule/controllable_memory.hpp>, whose header comment describes the families built
// from them. They sit in a header of their own so that the internals in
// schedule/detail/controllable_memory.hpp build on them without including the public header back.
#pragma once

#include <cstdint>

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace vblock {

// One rank's row of a V building block: the slot of each input-critical pass of micro-batch 0.
// Chunk 0 is stage r (reached on the way down the V), chunk 1 is stage 2p-1-r (on the way back).
struct Row {
  std::int32_t forward0 = 0;   // F of chunk 0
  std::int32_t forward1 = 0;   // F of chunk 1
  std::int32_t backward1 = 0;  // BI of chunk 1
  std::int32_t backward0 = 0;  // BI of chunk 0

  friend constexpr bool operator==(const Row&, const Row&) = default;
};

// The slots of one rank's cycle: six passes per micro-batch, one micro-batch per cycle.
inline constexpr std::int32_t period = 6;

}  // namespace vblock
}  // namespace ppsched
