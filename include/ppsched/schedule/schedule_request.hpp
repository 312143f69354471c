// What a schedule generator is asked for (<ppsched/schedule/request.hpp>, which also holds the
// checks every family shares and the placements). It sits in a header of its own so that the
// internals in schedule/detail/request.hpp build on it without including the public header back.
#pragma once

#include <cstdint>
#include <string>

#include "ppsched/config.hpp"
#include "ppsched/error.hpp"

namespace ppsched::inline PPSCHED_MODE {

struct ScheduleRequest {
  std::int32_t ranks = 1;         // p: pipeline ranks (devices)
  std::int32_t microbatches = 1;  // m: micro-batches per step
  std::int32_t chunks = 1;        // v: model chunks (virtual stages) per rank

  friend constexpr bool operator==(const ScheduleRequest&, const ScheduleRequest&) = default;
};

[[nodiscard]] inline std::string to_string(const ScheduleRequest& r) {
  return detail::concat("p=", r.ranks, ", m=", r.microbatches, ", v=", r.chunks);
}

}  // namespace ppsched
