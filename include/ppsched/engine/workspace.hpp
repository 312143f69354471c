// Scratch memory owned by the caller. Lowering, validation and simulation of a large schedule
// each need arrays of tens of megabytes (the flat index, the abstract execution's items and
// times, lowering's transfer keys). Allocated fresh, they cost the kernel a page fault per
// 4 KiB (about 40 ms per 80 MiB on the development VM, a quarter of a run). A caller that
// makes many calls keeps one Workspace and passes it to each, and the arrays of the previous
// call are reused, already mapped; a call given none allocates its own and frees them before
// it returns. The library keeps nothing between calls behind the caller's back.
//
//   ppsched::Workspace ws;
//   for (...) { auto l = lower(s, options, ws); auto r = validate(l, {}, ws); ... }
//
// A Workspace serves one call at a time (it is not shared between threads) and holds what the
// largest call so far needed until it is destroyed or release()d.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ppsched/engine/abstract_execution.hpp"
#include "ppsched/engine/flat_schedule.hpp"

namespace ppsched {
namespace detail {

// One side of a transfer as lowering orders it (lower/lower.hpp): the key, and the compute
// action that produces the data, whose index is also the transfer's identity (the same on both
// sides) for breaking ties.
struct CommEntry {
  double key;
  std::int32_t producer;
  std::int32_t receive;  // 0: the send, 1: the receive
};

struct LoweringBuffers {
  scratch_vector<std::int32_t> receivers;
  scratch_vector<CommEntry> comm;
  scratch_vector<CommEntry> merged;
  scratch_vector<CommEntry> scratch;
  // The index of a lowered candidate that lowering runs to compare it with another (lower.hpp),
  // kept apart from the compute-only schedule's, which the next candidate is lowered from.
  FlatSchedule candidate;
};

}  // namespace detail

class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  Workspace(Workspace&&) noexcept = default;
  Workspace& operator=(Workspace&&) noexcept = default;
  ~Workspace() = default;

  // The bytes held for the next call.
  [[nodiscard]] std::size_t capacity_bytes() const noexcept {
    const auto bytes = [](const auto& v) { return v.capacity() * sizeof(v[0]); };
    return bytes(flat_.owner) + bytes(flat_.slots) + bytes(flat_.placement) + bytes(flat_.rank_begin) +
           bytes(flat_.rank_actions) + bytes(execution_.stream_begin) + bytes(execution_.items) +
           bytes(execution_.ops) + bytes(execution_.pair_deps) + bytes(execution_.starts) + bytes(execution_.ends) +
           bytes(execution_.streams) + bytes(execution_.worklist) + bytes(lowering_.receivers) +
           bytes(lowering_.comm) + bytes(lowering_.merged) + bytes(lowering_.scratch) +
           bytes(lowering_.candidate.owner) + bytes(lowering_.candidate.slots) +
           bytes(lowering_.candidate.placement) + bytes(lowering_.candidate.rank_begin) +
           bytes(lowering_.candidate.rank_actions);
  }
  // Frees everything it holds; the next call allocates again.
  void release() noexcept { *this = Workspace{}; }

  // The library's passes take their arrays from here (lower, validate, simulate).
  [[nodiscard]] detail::FlatSchedule& flat() noexcept { return flat_; }
  [[nodiscard]] detail::AbstractExecution::Buffers& execution() noexcept { return execution_; }
  [[nodiscard]] detail::LoweringBuffers& lowering() noexcept { return lowering_; }

 private:
  detail::FlatSchedule flat_;
  detail::AbstractExecution::Buffers execution_;
  detail::LoweringBuffers lowering_;
};

}  // namespace ppsched
