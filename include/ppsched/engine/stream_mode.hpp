// The mode the abstract execution (<ppsched/engine/abstract_execution.hpp>) runs a schedule in.
// It sits in a header of its own so that the internals in engine/detail/abstract_execution.hpp
// build on it without including the public header back.
#pragma once

#include <cstdint>
#include <string_view>

#include "ppsched/config.hpp"

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

}  // namespace ppsched
