// Bounded host waits. The backend never calls a CUDA or NCCL function that can block the host
// without limit (cudaStreamSynchronize on a stream stuck behind a NCCL kernel whose peer died
// would never return). Instead the host polls — cudaEventQuery, ncclCommGetAsyncError — until
// the work is done, the `HostWait` deadline passes, or another rank asks everyone to stop; the
// caller then aborts what it owns and reports which wait gave up. `poll_until` is the one loop
// every such wait goes through; `HostWait` and `WaitResult` are the runtime's own types, so a
// wait in the backend and a wait in the executor speak the same language.
//
// Host-only; no CUDA header needed.
#pragma once

#include "ppsched/config.hpp"

#include <chrono>
#include <thread>

#include "ppsched/runtime/backend.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace cuda {

// Calls `done()` until it returns true or the wait's limit is reached. Yields the core for the
// first polls (the common case: the work is about to finish) and then sleeps briefly, so that
// p waiting ranks do not each burn a host core for a whole step.
template <class Done>
[[nodiscard]] WaitResult poll_until(Done&& done, const HostWait& wait) {
  constexpr int yielding_polls = 1000;
  constexpr auto pause = std::chrono::microseconds(20);
  for (int polls = 0;; ++polls) {
    if (done()) return WaitResult::done;
    if (wait.stop.stop_requested()) return WaitResult::stopped;
    if (std::chrono::steady_clock::now() >= wait.deadline) return WaitResult::timed_out;
    if (polls < yielding_polls) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(pause);
    }
  }
}

}  // namespace cuda
}  // namespace ppsched
