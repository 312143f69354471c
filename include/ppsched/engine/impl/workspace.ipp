// The bodies of <ppsched/engine/workspace.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE std::size_t Workspace::capacity_bytes() const noexcept {
  const auto bytes = [](const auto& v) { return v.capacity() * sizeof(v[0]); };
  return bytes(flat_.owner) + bytes(flat_.slots) + bytes(flat_.placement) + bytes(flat_.rank_begin) +
         bytes(flat_.rank_actions) + bytes(execution_.stream_begin) + bytes(execution_.items) +
         bytes(execution_.ops) + bytes(execution_.pair_deps) + bytes(execution_.starts) + bytes(execution_.ends) +
         bytes(execution_.streams) + bytes(execution_.worklist) + bytes(execution_.durations) +
         bytes(lowering_.receivers) + bytes(lowering_.durations) +
         bytes(lowering_.comm) + bytes(lowering_.merged) + bytes(lowering_.scratch) +
         bytes(lowering_.candidate.owner) + bytes(lowering_.candidate.slots) +
         bytes(lowering_.candidate.placement) + bytes(lowering_.candidate.rank_begin) +
         bytes(lowering_.candidate.rank_actions);
}

PPSCHED_OUTLINE void Workspace::release() noexcept { *this = Workspace{}; }

}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {
namespace detail {

PPSCHED_OUTLINE ScratchPool& ScratchPool::instance() {
  static ScratchPool pool;
  return pool;
}

[[nodiscard]] PPSCHED_OUTLINE std::unique_ptr<Workspace> ScratchPool::take() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (kept_) return std::move(kept_);
  }
  return std::make_unique<Workspace>();
}

PPSCHED_OUTLINE void ScratchPool::give_back(std::unique_ptr<Workspace> ws) noexcept {
  if (ws->capacity_bytes() <= limit_.load(std::memory_order_relaxed)) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!kept_) kept_ = std::move(ws);
  }
  // (`ws`, when not kept, is freed here, outside the lock.)
}

[[nodiscard]] PPSCHED_OUTLINE std::size_t ScratchPool::kept_bytes() {
  const std::lock_guard<std::mutex> lock(mutex_);
  return kept_ ? kept_->capacity_bytes() : 0;
}

PPSCHED_OUTLINE void ScratchPool::release() noexcept {
  std::unique_ptr<Workspace> dropped;
  const std::lock_guard<std::mutex> lock(mutex_);
  dropped = std::move(kept_);
}

PPSCHED_OUTLINE void ScratchPool::set_limit(std::size_t bytes) noexcept {
  limit_.store(bytes, std::memory_order_relaxed);
  std::unique_ptr<Workspace> dropped;
  const std::lock_guard<std::mutex> lock(mutex_);
  if (kept_ && kept_->capacity_bytes() > bytes) dropped = std::move(kept_);
}

}  // namespace detail
}  // namespace ppsched
