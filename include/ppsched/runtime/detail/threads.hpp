// Internals of <ppsched/runtime/threads.hpp>, which includes this file: the count of live library
// threads, kept from before a thread exists until its body returns. They are in ppsched::detail
// and not part of the API: no example or page uses them, and they may change in any release
// (docs/architecture.md).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "ppsched/config.hpp"

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

// Host threads kept for every step, one per index: the World's rank threads and the data
// parallel world's replica drivers. Each step, `begin` wakes every thread to call body(i)
// once and `wait` returns when all have returned. The body reports its own errors (the
// callers keep the step's first): one that escaped would end the program. Starting threads
// once and keeping them is what makes a step cost no thread creation.
class StepThreads {
 public:
  StepThreads() = default;
  StepThreads(const StepThreads&) = delete;
  StepThreads& operator=(const StepThreads&) = delete;
  StepThreads(StepThreads&&) = delete;
  StepThreads& operator=(StepThreads&&) = delete;
  ~StepThreads() { stop(); }

  // Threads for indices first .. end-1; when one cannot start, those already started are
  // stopped and the error is thrown.
  void start(std::size_t first, std::size_t end, std::function<void(std::size_t)> body) {
    body_ = std::move(body);
    try {
      for (std::size_t i = first; i < end; ++i) threads_.push_back(start_thread([this, i] { loop(i); }));
    } catch (...) {
      stop();
      throw;
    }
  }

  // Wakes every thread for one step. What the caller wrote before is visible to the bodies.
  void begin() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      remaining_ = threads_.size();
      ++generation_;
    }
    start_.notify_all();
  }

  // Until every thread has run its body for the step begun last. What the bodies wrote is
  // visible to the caller after it.
  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [&] { return remaining_ == 0; });
  }

  // Ends and joins every thread (between steps); idempotent.
  void stop() noexcept {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      shutdown_ = true;
    }
    start_.notify_all();
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  std::vector<std::thread> threads_;
  std::function<void(std::size_t)> body_;
  std::mutex mutex_;
  std::condition_variable start_;
  std::condition_variable finished_;
  std::uint64_t generation_ = 0;
  std::size_t remaining_ = 0;
  bool shutdown_ = false;

  void loop(std::size_t i) {
    std::uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        start_.wait(lock, [&] { return shutdown_ || generation_ != seen; });
        if (shutdown_) return;
        seen = generation_;
      }
      body_(i);
      {
        const std::lock_guard<std::mutex> lock(mutex_);
        if (--remaining_ == 0) finished_.notify_all();
      }
    }
  }
};

}  // namespace detail

}  // namespace ppsched
