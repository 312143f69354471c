// Every thread ppsched starts — the CPU backend's stream workers and its deterministic
// engine, the World's host threads — is started through `detail::start_thread`, which counts
// it while it runs. `live_threads()` lets a test prove that a failed step, a timeout or a
// destroyed World leaves no thread behind.
#pragma once

#include "ppsched/config.hpp"

#include <atomic>
#include <thread>
#include <utility>

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

inline std::atomic<int> live_thread_count{0};

// Counted from before the thread exists until its body has returned, so that a count taken
// after joining every thread is exact.
template <class F>
[[nodiscard]] std::thread start_thread(F&& body) {
  live_thread_count.fetch_add(1, std::memory_order_relaxed);
  try {
    return std::thread([b = std::forward<F>(body)]() mutable {
      struct Uncount {
        ~Uncount() { live_thread_count.fetch_sub(1, std::memory_order_release); }
      } uncount;
      b();
    });
  } catch (...) {
    live_thread_count.fetch_sub(1, std::memory_order_relaxed);
    throw;
  }
}

}  // namespace detail

// Threads started by ppsched that have not finished yet.
[[nodiscard]] inline int live_threads() noexcept { return detail::live_thread_count.load(std::memory_order_acquire); }

}  // namespace ppsched
