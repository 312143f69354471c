// Scratch memory. Lowering, validation and simulation of a large schedule each need arrays of
// tens of megabytes (the flat index, the abstract execution's items and times, lowering's
// transfer keys). Allocated fresh, they cost the kernel a page fault per 4 KiB (about 40 ms
// per 80 MiB on the development VM, a quarter of a run). A caller that makes many calls keeps
// one Workspace and passes it to each, and the arrays of the previous call are reused,
// already mapped:
//
//   ppsched::Workspace ws;
//   for (...) { auto l = lower(s, options, ws); auto r = validate(l, {}, ws); ... }
//
// A Workspace serves one call at a time (it is not shared between threads) and holds what the
// largest call so far needed until it is destroyed or release()d.
//
// A call given no Workspace borrows one from the library's scratch pool (below) and gives it
// back when it returns, so plain calls in a row run as fast as calls that share a Workspace.
// Scratch is never part of a result: what a call returns is the same whichever arrays it
// borrowed (the tests compare both). The pool keeps one Workspace for the whole process, of at
// most scratch_pool_limit() bytes (128 MiB by default; p = 64 ranks, m = 1024 micro-batches
// and v = 2 chunks need 67 MiB); a call that finds it lent out (another thread, or a call made
// from inside a call) uses a fresh one, freed on return, and so does a call that ends in an
// exception. release_scratch_pool() frees what the pool keeps.
#pragma once

#include "ppsched/config.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "ppsched/engine/abstract_execution.hpp"
#include "ppsched/engine/detail/flat_schedule.hpp"
#include "ppsched/engine/detail/workspace.hpp"

namespace ppsched::inline PPSCHED_MODE {

class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  Workspace(Workspace&&) noexcept = default;
  Workspace& operator=(Workspace&&) noexcept = default;
  ~Workspace() = default;

  // The bytes held for the next call.
  [[nodiscard]] std::size_t capacity_bytes() const noexcept;
  // Frees everything it holds; the next call allocates again.
  void release() noexcept;

  // The library's passes take their arrays from here (lower, validate, simulate).
  [[nodiscard]] detail::FlatSchedule& flat() noexcept { return flat_; }
  [[nodiscard]] detail::AbstractExecution::Buffers& execution() noexcept { return execution_; }
  [[nodiscard]] detail::LoweringBuffers& lowering() noexcept { return lowering_; }

 private:
  detail::FlatSchedule flat_;
  detail::AbstractExecution::Buffers execution_;
  detail::LoweringBuffers lowering_;
};

namespace detail {

// The Workspace that plain calls (lower, validate, simulate without one) share: one, lent to
// one call at a time, kept between calls while it holds at most `limit` bytes.
class ScratchPool {
 public:
  static ScratchPool& instance();

  // The kept Workspace, or a new empty one when it is lent out (or was never kept).
  [[nodiscard]] std::unique_ptr<Workspace> take();
  // Keeps `ws` for the next call when nothing is kept and it fits the limit; frees it otherwise.
  void give_back(std::unique_ptr<Workspace> ws) noexcept;
  [[nodiscard]] std::size_t kept_bytes();
  void release() noexcept;
  [[nodiscard]] std::size_t limit() const noexcept { return limit_.load(std::memory_order_relaxed); }
  void set_limit(std::size_t bytes) noexcept;

 private:
  ScratchPool() = default;
  std::mutex mutex_;
  std::unique_ptr<Workspace> kept_;
  std::atomic<std::size_t> limit_{std::size_t{128} << 20};
};

// A Workspace borrowed from the pool for one call: given back when the call returns, dropped
// when it ends in an exception (its arrays are then in no known state).
class BorrowedWorkspace {
 public:
  BorrowedWorkspace() : ws_(ScratchPool::instance().take()), exceptions_(std::uncaught_exceptions()) {}
  BorrowedWorkspace(const BorrowedWorkspace&) = delete;
  BorrowedWorkspace& operator=(const BorrowedWorkspace&) = delete;
  ~BorrowedWorkspace() {
    if (std::uncaught_exceptions() == exceptions_) ScratchPool::instance().give_back(std::move(ws_));
  }
  [[nodiscard]] Workspace& get() noexcept { return *ws_; }

 private:
  std::unique_ptr<Workspace> ws_;
  int exceptions_;
};

}  // namespace detail

// The scratch pool of plain calls (see the top of this file): the bytes it keeps now, the most
// it keeps (a Workspace that grew past it is freed when its call returns; 0: keep nothing, as
// a call with a fresh Workspace of its own), and freeing what it keeps.
[[nodiscard]] inline std::size_t scratch_pool_bytes() { return detail::ScratchPool::instance().kept_bytes(); }
[[nodiscard]] inline std::size_t scratch_pool_limit() noexcept { return detail::ScratchPool::instance().limit(); }
inline void set_scratch_pool_limit(std::size_t bytes) noexcept { detail::ScratchPool::instance().set_limit(bytes); }
inline void release_scratch_pool() noexcept { detail::ScratchPool::instance().release(); }

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/engine/impl/workspace.ipp"
#endif
