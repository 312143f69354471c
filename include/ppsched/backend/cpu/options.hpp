// How a CPU cluster runs: on threads (one worker per stream, as a GPU runs streams
// concurrently) or deterministically (one engine thread steps every stream of every rank in
// one fixed order, so that an ordering bug reproduces on every run); with or without the
// checking mode that turns what would be a silent race on CUDA into an error; and how long
// any wait inside the backend may block before it is reported.
#pragma once

#include "ppsched/config.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ppsched::inline PPSCHED_MODE {

enum class CpuMode : std::uint8_t {
  threaded,       // one worker thread per stream; streams of all ranks run concurrently
  deterministic,  // one engine thread runs one task at a time, in a fixed order
};

[[nodiscard]] constexpr std::string_view to_string(CpuMode m) noexcept {
  return m == CpuMode::threaded ? "threaded" : "deterministic";
}

struct CpuOptions {
  CpuMode mode = CpuMode::threaded;
  // Report races that CUDA would not: waiting on an event never recorded, writing a buffer a
  // pending send may still read, receiving into a buffer still in use, transfers matched
  // with a different tag. Costs a few vector-clock comparisons per issued operation.
  bool checking = true;
  // Longest time a stream's head may wait (on an event or a transfer) before the rank fails
  // with an error naming what it waits for; a host wait inside the backend gives up after
  // twice this (the stream reports first). A backstop: the executor's own watchdog is
  // shorter. ppsched::no_timeout (milliseconds::max()) for none.
  std::chrono::milliseconds watchdog{60'000};
  // Operations a stream holds before the host must wait for the stream to catch up (CUDA's
  // launch queue behaves the same way). Allocated once per stream. A step may issue more:
  // a host that finds the queue full waits until it has drained to half (deterministic mode)
  // or for a free slot (threaded mode, where the stream runs while the host issues).
  std::size_t queue_capacity = 4096;
};

}  // namespace ppsched
