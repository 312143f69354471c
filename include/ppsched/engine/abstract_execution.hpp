// The abstract execution of docs/execution-model.md: the one engine under lower (which orders
// the communication by an idealised run), validate (which runs it with unit times to prove
// that no timing can deadlock) and simulate (which runs it with a cost model's durations).
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "ppsched/engine/detail/flat_schedule.hpp"
#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"

namespace ppsched::inline PPSCHED_MODE {

// Where communication runs on each rank (docs/execution-model.md, "Streams").
enum class StreamMode : std::uint8_t {
  separate_comm_stream,    // a compute stream and a comm stream per rank (overlap)
  comm_on_compute_stream,  // one in-order stream per rank runs everything
};

[[nodiscard]] constexpr std::string_view stream_mode_name(StreamMode m) noexcept {
  return m == StreamMode::separate_comm_stream ? "communication on its own stream"
                                               : "communication on the compute stream";
}

// How activation memory is counted. A stored activation (F done, its B or BI not yet) is
// 1 M_B; what BI leaves for BW is `weight_fraction` M_B. Bytes use `activation_bytes[stage]`

}  // namespace ppsched

#include "ppsched/engine/detail/abstract_execution.hpp"  // the internals below build on the types above

namespace ppsched::inline PPSCHED_MODE {

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/engine/impl/abstract_execution.ipp"
#endif
