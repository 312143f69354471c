// The flat index every pass over a schedule works on: the programs as one array of actions
// (rank by rank, program order) with an identity table (op, stage, micro-batch) -> index, and
// each action's links to the actions it waits for. static_checks.hpp builds it; the abstract
// execution (abstract_execution.hpp), the memory walk (validate/memory.hpp), lower and the
// simulator read it. Its large arrays are scratch: a caller that keeps a Workspace
// (workspace.hpp) keeps them mapped from one call to the next.
#pragma once

#include "ppsched/config.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "ppsched/schedule/action.hpp"

namespace ppsched::inline PPSCHED_MODE::detail {

inline constexpr std::int32_t no_action = -1;

// Makes vector::resize leave trivial elements uninitialised: arrays that are written in
// full before they are read need no clearing pass.
template <class T>
struct uninitialised_allocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = uninitialised_allocator<U>;
  };
  uninitialised_allocator() = default;
  template <class U>
  uninitialised_allocator(const uninitialised_allocator<U>&) noexcept {}  // NOLINT: rebinding copy
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// Arrays written in full before they are read.
template <class T>
using scratch_vector = std::vector<T, uninitialised_allocator<T>>;

// An action's links to others, by index (no_action when none). `same_stage` is its
// predecessor on its own stage (F, R or RELOAD for B/BI, BI for BW, the producer for a send,
// F for R (RELOAD where it has one) and OFFLOAD, OFFLOAD for RELOAD); `input` the
// neighbouring stage's contribution (F(s-1) or RECV_F for F, B/BI(s+1) or RECV_B for B/BI);
// `peer` the matching send or receive.
struct Links {
  std::int32_t same_stage = -1;
  std::int32_t input = -1;
  std::int32_t peer = -1;
};

// A schedule flattened into one array of actions (rank by rank, program order), with an
// identity table (op, stage, micro-batch) -> index. Everything downstream works on integers.
struct FlatSchedule {
  std::int32_t ranks = 0;
  std::int32_t stages = 0;
  std::int32_t microbatches = 0;
  bool lowered = false;       // has communication actions
  bool has_backward = false;  // any B / BI / BW (false: forward-only)
  bool has_pairs = false;     // any compute action with a group (an overlapped pair)
  bool has_memory = false;    // any R, OFFLOAD or RELOAD
  bool has_copies = false;    // any OFFLOAD or RELOAD (a copy lane per rank)
  std::size_t compute_count = 0;  // actions that are not communication (compute and memory)
  std::vector<std::int32_t> placement;
  std::vector<const Action*> rank_actions;  // each rank's program (the schedule's own storage)
  std::vector<std::vector<Action>> kept;    // programs without communication, when it is skipped
  scratch_vector<std::int32_t> owner;  // rank of each action
  std::vector<std::int32_t> rank_begin;  // ranks + 1 offsets into actions
  scratch_vector<std::int32_t> slots;  // identity table, no_action when absent

  // The actions of one (stage, micro-batch) share a 64-byte line: lookups come in
  // (stage, micro-batch) neighbourhoods. A power of two at least op_count.
  static constexpr std::size_t slot_stride = 16;
  static_assert(static_cast<std::size_t>(op_count) <= slot_stride);
  [[nodiscard]] std::size_t slot_index(Op op, std::int32_t stage, std::int32_t mb) const noexcept {
    return ((static_cast<std::size_t>(stage) * static_cast<std::size_t>(microbatches) + static_cast<std::size_t>(mb))
            << 4) +
           static_cast<std::size_t>(op);
  }
  [[nodiscard]] std::int32_t find(Op op, std::int32_t stage, std::int32_t mb) const noexcept {
    return slots[slot_index(op, stage, mb)];
  }
  // The action that computes the input gradient of (stage, mb): its B, or else its BI.
  [[nodiscard]] std::int32_t backward_input(std::int32_t stage, std::int32_t mb) const noexcept {
    const std::int32_t b = find(Op::B, stage, mb);
    return b != no_action ? b : find(Op::BI, stage, mb);
  }
  // What the backward of (stage, mb) waits for on its own stage: the action that last made
  // its stored activation present (R, else RELOAD, else F).
  [[nodiscard]] std::int32_t activation_source(std::int32_t stage, std::int32_t mb) const noexcept {
    if (!has_memory) return find(Op::F, stage, mb);
    const std::int32_t r = find(Op::R, stage, mb);
    if (r != no_action) return r;
    const std::int32_t reload = find(Op::RELOAD, stage, mb);
    return reload != no_action ? reload : find(Op::F, stage, mb);
  }
  [[nodiscard]] std::int32_t rank_of(std::int32_t stage) const noexcept {
    return placement[static_cast<std::size_t>(stage)];
  }
  [[nodiscard]] std::int32_t position(std::int32_t index) const noexcept {
    return index - rank_begin[static_cast<std::size_t>(owner[static_cast<std::size_t>(index)])];
  }
  [[nodiscard]] const Action& at(std::int32_t index) const noexcept {
    const auto r = static_cast<std::size_t>(owner[static_cast<std::size_t>(index)]);
    return rank_actions[r][index - rank_begin[r]];
  }
  [[nodiscard]] std::size_t size() const noexcept { return owner.size(); }

  // The links of action i. Meaningful once the static checks passed.
  [[nodiscard]] Links links(std::int32_t i) const noexcept { return links(at(i)); }
#if defined(__GNUC__)
  [[gnu::always_inline]]  // on every action of every stream build: let each caller keep what it needs
#endif
  [[nodiscard]] Links links(const Action& a) const noexcept {
    const std::int32_t s = a.stage, mb = a.microbatch;
    Links l;
    switch (a.op) {
      case Op::F:
        if (s > 0) l.input = (lowered && rank_of(s - 1) != rank_of(s)) ? find(Op::RECV_F, s, mb) : find(Op::F, s - 1, mb);
        break;
      case Op::B:
      case Op::BI:
        l.same_stage = activation_source(s, mb);
        if (s + 1 < stages) {
          l.input = (lowered && rank_of(s + 1) != rank_of(s)) ? find(Op::RECV_B, s, mb) : backward_input(s + 1, mb);
        }
        break;
      case Op::BW: l.same_stage = find(Op::BI, s, mb); break;
      case Op::SEND_F:
        l.same_stage = find(Op::F, s, mb);
        l.peer = find(Op::RECV_F, s + 1, mb);
        break;
      case Op::SEND_B:
        l.same_stage = backward_input(s, mb);
        l.peer = find(Op::RECV_B, s - 1, mb);
        break;
      case Op::RECV_F: l.peer = find(Op::SEND_F, s - 1, mb); break;
      case Op::RECV_B: l.peer = find(Op::SEND_B, s + 1, mb); break;
      // The stage's input is kept on the rank, so R needs only its own forward to have run, or,
      // where OFFLOAD moved the checkpoints it recomputes from, their RELOAD.
      case Op::R: {
        const std::int32_t reload = has_copies ? find(Op::RELOAD, s, mb) : no_action;
        l.same_stage = reload != no_action ? reload : find(Op::F, s, mb);
        break;
      }
      case Op::OFFLOAD: l.same_stage = find(Op::F, s, mb); break;
      case Op::RELOAD: l.same_stage = find(Op::OFFLOAD, s, mb); break;
    }
    return l;
  }
};

}  // namespace ppsched::detail
