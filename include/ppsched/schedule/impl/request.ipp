// The bodies of <ppsched/schedule/request.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE std::vector<std::int32_t> one_stage_per_rank_placement(std::int32_t ranks) {
  std::vector<std::int32_t> placement(static_cast<std::size_t>(ranks > 0 ? ranks : 0));
  for (std::int32_t s = 0; s < ranks; ++s) placement[static_cast<std::size_t>(s)] = s;
  return placement;
}

[[nodiscard]] PPSCHED_OUTLINE std::vector<std::int32_t> looped_placement(std::int32_t ranks, std::int32_t chunks) {
  std::vector<std::int32_t> placement;
  if (ranks <= 0 || chunks <= 0) return placement;
  placement.reserve(static_cast<std::size_t>(ranks) * static_cast<std::size_t>(chunks));
  for (std::int32_t c = 0; c < chunks; ++c)
    for (std::int32_t r = 0; r < ranks; ++r) placement.push_back(r);
  return placement;
}

[[nodiscard]] PPSCHED_OUTLINE std::vector<std::int32_t> v_shape_placement(std::int32_t ranks) {
  std::vector<std::int32_t> placement;
  if (ranks <= 0) return placement;
  placement.reserve(2 * static_cast<std::size_t>(ranks));
  for (std::int32_t s = 0; s < 2 * ranks; ++s) placement.push_back(s < ranks ? s : 2 * ranks - 1 - s);
  return placement;
}

}  // namespace ppsched
