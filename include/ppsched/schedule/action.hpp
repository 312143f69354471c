// The action IR: the vocabulary every part of ppsched speaks. A schedule is, for each rank,
// an ordered list of actions; an action names an operation, a (virtual) stage and a
// micro-batch. Generators emit compute actions only; `lower` adds the communication.
//
// Communication actions are named from the point of view of the stage that owns them, as in
// PyTorch's pipelining: SEND_F on stage s sends F(s)'s output to stage s+1; RECV_F on stage s
// receives F(s)'s input from stage s-1; SEND_B on stage s sends the gradient of F(s)'s input
// to stage s-1; RECV_B on stage s receives the gradient of F(s)'s output from stage s+1.
#pragma once

#include "ppsched/config.hpp"

#include <compare>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace ppsched::inline PPSCHED_MODE {

enum class Op : std::uint8_t {
  F,       // forward
  B,       // full backward (input and weight gradients together)
  BI,      // backward for the input only (zero-bubble schedules)
  BW,      // backward for the weights only (zero-bubble schedules)
  SEND_F,  // send activation to the next stage
  RECV_F,  // receive activation from the previous stage
  SEND_B,  // send gradient to the previous stage
  RECV_B,  // receive gradient from the next stage
  // Memory actions (docs/execution-model.md, "Memory actions"). On the rank that owns stage s,
  // per micro-batch m, either F -> R -> B/BI or F -> OFFLOAD -> RELOAD -> B/BI, never both.
  R,        // recompute: re-run F(s, m) from its kept input, keeping what its backward needs
  OFFLOAD,  // move F(s, m)'s stored activation to host memory (copy lane)
  RELOAD,   // bring it back before its backward (copy lane)
};

// Appended values keep the numbering of the first eight (CSV codes, fuzz seeds, tables indexed
// by Op): code that loops to op_count or switches over Op must handle the memory actions.
inline constexpr int op_count = 11;

[[nodiscard]] constexpr std::string_view op_name(Op op) noexcept {
  switch (op) {
    case Op::F: return "F";
    case Op::B: return "B";
    case Op::BI: return "BI";
    case Op::BW: return "BW";
    case Op::SEND_F: return "SEND_F";
    case Op::RECV_F: return "RECV_F";
    case Op::SEND_B: return "SEND_B";
    case Op::RECV_B: return "RECV_B";
    case Op::R: return "R";
    case Op::OFFLOAD: return "OFFLOAD";
    case Op::RELOAD: return "RELOAD";
  }
  return "?";
}

[[nodiscard]] constexpr bool is_compute(Op op) noexcept {
  return op == Op::F || op == Op::B || op == Op::BI || op == Op::BW;
}
// A backward of any kind: what makes a schedule train rather than only run forward.
[[nodiscard]] constexpr bool is_backward(Op op) noexcept { return op == Op::B || op == Op::BI || op == Op::BW; }
[[nodiscard]] constexpr bool is_send(Op op) noexcept { return op == Op::SEND_F || op == Op::SEND_B; }
[[nodiscard]] constexpr bool is_recv(Op op) noexcept { return op == Op::RECV_F || op == Op::RECV_B; }
// Point-to-point communication only: the memory actions are neither compute nor comm (R runs
// on the compute stream, OFFLOAD/RELOAD on the rank's copy lane, and neither talks to a peer).
[[nodiscard]] constexpr bool is_comm(Op op) noexcept { return is_send(op) || is_recv(op); }
[[nodiscard]] constexpr bool is_memory(Op op) noexcept {
  return op == Op::R || op == Op::OFFLOAD || op == Op::RELOAD;
}
// OFFLOAD and RELOAD: the actions of the copy lane.
[[nodiscard]] constexpr bool is_copy(Op op) noexcept { return op == Op::OFFLOAD || op == Op::RELOAD; }

struct Action {
  Op op = Op::F;
  std::int32_t stage = 0;       // virtual stage (model chunk), 0 .. stages-1
  std::int32_t microbatch = 0;  // 0 .. microbatches-1
  // Consecutive actions on one rank that share a nonzero group form one unit; 0 means a unit
  // of its own. Communication: posted together (one ncclGroupStart/End). Compute: exactly two,
  // an F and a B or BI of different micro-batches, form an overlapped pair (DualPipe's F&B
  // chunk pair) that starts when the inputs of both are ready and ends as one
  // (docs/execution-model.md). Ids are scoped to the rank; one id names one run.
  std::uint32_t group = 0;

  friend constexpr auto operator<=>(const Action&, const Action&) = default;
  // Declared, not left implied by <=>: nvcc 13's front end drops the implied one from the
  // host code it hands to g++ when a header compares vectors of actions ("used but never
  // defined").
  friend constexpr bool operator==(const Action&, const Action&) = default;
};

// "F3@s1", "SEND_B0@s2#4" (#group when grouped): short, unambiguous, used in error messages.
[[nodiscard]] PPSCHED_OUTLINE std::string to_string(const Action& a);

inline std::ostream& operator<<(std::ostream& out, const Action& a) { return out << to_string(a); }
inline std::ostream& operator<<(std::ostream& out, Op op) { return out << op_name(op); }

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/schedule/impl/action.ipp"
#endif
