// Bounded host waits. The backend never calls a CUDA or NCCL function that can block the host
// without limit (cudaStreamSynchronize on a stream stuck behind a NCCL kernel whose peer died
// would never return). Instead the host polls — cudaEventQuery, ncclCommGetAsyncError — until
// the work is done, a deadline passes, or another rank asks everyone to stop; the caller then
// aborts what it owns and reports which wait gave up. `WaitLimit` carries the deadline and
// the stop request; `poll_until` is the one loop every such wait goes through.
//
// Host-only; no CUDA header needed.
#pragma once

#include <chrono>
#include <cstdint>
#include <stop_token>
#include <thread>
#include <utility>

namespace ppsched {

struct WaitLimit {
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  std::stop_token stop{};  // requested when another rank failed and this one must give up too

  // A limit `timeout` from now, optionally tied to a stop request.
  [[nodiscard]] static WaitLimit within(std::chrono::nanoseconds timeout, std::stop_token stop = {}) {
    const auto now = std::chrono::steady_clock::now();
    const auto room = std::chrono::steady_clock::time_point::max() - now;
    return {timeout >= room ? std::chrono::steady_clock::time_point::max() : now + timeout, std::move(stop)};
  }
};

enum class WaitOutcome : std::uint8_t { done, timed_out, stopped };

[[nodiscard]] constexpr const char* to_string(WaitOutcome outcome) noexcept {
  switch (outcome) {
    case WaitOutcome::done: return "done";
    case WaitOutcome::timed_out: return "timed out";
    case WaitOutcome::stopped: return "stopped because another rank failed";
  }
  return "?";
}

// Calls `done()` until it returns true or the limit is reached. Yields the core for the first
// polls (the common case: the work is about to finish) and then sleeps briefly, so that p
// waiting ranks do not each burn a host core for a whole step.
template <class Done>
[[nodiscard]] WaitOutcome poll_until(Done&& done, const WaitLimit& limit) {
  constexpr int yielding_polls = 1000;
  constexpr auto sleep = std::chrono::microseconds(20);
  for (int polls = 0;; ++polls) {
    if (done()) return WaitOutcome::done;
    if (limit.stop.stop_requested()) return WaitOutcome::stopped;
    if (std::chrono::steady_clock::now() >= limit.deadline) return WaitOutcome::timed_out;
    if (polls < yielding_polls) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(sleep);
    }
  }
}

}  // namespace ppsched
