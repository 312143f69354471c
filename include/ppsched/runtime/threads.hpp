// Every thread ppsched starts — the CPU backend's stream workers and its deterministic
// engine, the World's host threads — is started through `detail::start_thread`, which counts
// it while it runs. `live_threads()` lets a test prove that a failed step, a timeout or a
// destroyed World leaves no thread behind.
#pragma once

#include "ppsched/config.hpp"
#include "ppsched/runtime/detail/threads.hpp"

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace ppsched::inline PPSCHED_MODE {

// Threads started by ppsched that have not finished yet.
[[nodiscard]] inline int live_threads() noexcept { return detail::live_thread_count.load(std::memory_order_acquire); }

}  // namespace ppsched
