// A Schedule is a plain value: a placement of virtual stages on ranks and one ordered
// program of actions per rank. The same value goes to the validator, the simulator and the
// executor, so what was proven is what runs.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "ppsched/schedule/action.hpp"

namespace ppsched::inline PPSCHED_MODE {

struct Schedule {
  std::string name;                          // family or user label, e.g. "1f1b"
  std::int32_t ranks = 0;                    // pipeline ranks (devices)
  std::int32_t microbatches = 0;             // micro-batches per step
  std::vector<std::int32_t> placement;       // placement[stage] = rank; size = virtual stages
  std::vector<std::vector<Action>> programs; // programs[rank] = actions in issue order
  bool split_backward = false;               // true when backward is BI + BW rather than B

  [[nodiscard]] std::int32_t stages() const noexcept {
    return static_cast<std::int32_t>(placement.size());
  }
  [[nodiscard]] std::int32_t rank_of(std::int32_t stage) const { return placement.at(static_cast<std::size_t>(stage)); }

  friend bool operator==(const Schedule&, const Schedule&) = default;
};

// One line per rank: "rank 0: F0@s0 F1@s0 B0@s0 ...".
PPSCHED_OUTLINE std::ostream& operator<<(std::ostream& out, const Schedule& s);

// The schedule without its memory actions (R, OFFLOAD, RELOAD): the same step keeping every
// activation, e.g. for PyTorch, whose action set has none, or for a runtime that runs none.
[[nodiscard]] PPSCHED_OUTLINE Schedule strip_memory_actions(Schedule s);

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/schedule/impl/schedule.ipp"
#endif
