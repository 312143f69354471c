// The problems a check can find in a schedule: each kind of mistake has its own kind, so tools
// and tests can tell them apart, and its message says the same in words, with the place and
// the fix. The engine's static checks (static_checks.hpp) report into a ProblemSink, which
// lower, validate and simulate each point at their own list.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"

namespace ppsched::inline PPSCHED_MODE {

// message says the same in words, with the place and the fix.
enum class ProblemKind : std::uint8_t {
  shape,                    // ranks, micro-batches, placement or program count unusable
  stage_out_of_range,
  microbatch_out_of_range,
  wrong_rank,               // compute action on a rank its stage is not placed on
  wrong_peer,               // communication action on a rank its stage is not placed on
  pair_size,                // a compute group (overlapped pair) of one action, or of three or more
  pair_ops,                 // a compute group that is not one F and one B or BI
  pair_dependent,           // the two actions of a pair are of one micro-batch: one needs the other
  group_mixed,              // one group id on compute and communication actions
  split_flag,               // BI / BW used while Schedule::split_backward is false
  duplicate,                // an action appears more than once
  missing_compute,          // an F, or a backward, of some (stage, micro-batch) is absent
  mixed_backward,           // B and BI/BW both present for one (stage, micro-batch)
  backward_before_forward,  // B or BI issued before its F on the same rank
  weight_before_input,      // BW issued before its BI
  local_order,              // stages s, s+1 on one rank used out of dependency order
  no_peer,                  // SEND_F on the last stage, RECV_F on stage 0, ...
  needless_comm,            // communication across a boundary inside one rank
  missing_send,
  missing_recv,
  missing_transfer,         // lowered schedule without send and receive for a transfer
  recv_after_consumer,      // a receive issued after the compute that needs it
  send_before_producer,     // a send issued before the compute that produces it
  group_not_contiguous,
  pair_order,               // two ranks post their messages to each other in different orders
  deadlock,
  memory_unmatched,         // R, OFFLOAD or RELOAD without its partners (F, a backward, the other copy)
  memory_order,             // a memory action out of F -> [OFFLOAD -> RELOAD ->] [R ->] B/BI on its rank
  memory_grouped,           // a memory action with a nonzero group
};

[[nodiscard]] constexpr std::string_view problem_kind_name(ProblemKind k) noexcept {
  switch (k) {
    case ProblemKind::shape: return "shape";
    case ProblemKind::stage_out_of_range: return "stage out of range";
    case ProblemKind::microbatch_out_of_range: return "micro-batch out of range";
    case ProblemKind::wrong_rank: return "wrong rank";
    case ProblemKind::wrong_peer: return "wrong peer";
    case ProblemKind::pair_size: return "pair size";
    case ProblemKind::pair_ops: return "pair operations";
    case ProblemKind::pair_dependent: return "pair dependent";
    case ProblemKind::group_mixed: return "group mixed";
    case ProblemKind::split_flag: return "split flag";
    case ProblemKind::duplicate: return "duplicate";
    case ProblemKind::missing_compute: return "missing compute";
    case ProblemKind::mixed_backward: return "mixed backward";
    case ProblemKind::backward_before_forward: return "backward before forward";
    case ProblemKind::weight_before_input: return "weight before input";
    case ProblemKind::local_order: return "local order";
    case ProblemKind::no_peer: return "no peer";
    case ProblemKind::needless_comm: return "needless communication";
    case ProblemKind::missing_send: return "missing send";
    case ProblemKind::missing_recv: return "missing receive";
    case ProblemKind::missing_transfer: return "missing transfer";
    case ProblemKind::recv_after_consumer: return "receive after consumer";
    case ProblemKind::send_before_producer: return "send before producer";
    case ProblemKind::group_not_contiguous: return "group not contiguous";
    case ProblemKind::pair_order: return "pair order";
    case ProblemKind::deadlock: return "deadlock";
    case ProblemKind::memory_unmatched: return "memory action unmatched";
    case ProblemKind::memory_order: return "memory action order";
    case ProblemKind::memory_grouped: return "memory action grouped";
  }
  return "?";
}

struct Problem {
  ProblemKind kind = ProblemKind::shape;
  std::int32_t rank = -1;      // -1 when the problem is not about one rank
  std::int32_t position = -1;  // index in the rank's program, -1 when none
  Action action{};             // meaningful when position >= 0
  std::string message;         // what, where, and how to fix it
};

namespace detail {

// Collects problems up to the cap: the listed ones into `problems`, the rest counted.
class ProblemSink {
 public:
  ProblemSink(std::vector<Problem>& problems, std::size_t& unlisted, std::size_t cap)
      : problems_(problems), unlisted_(unlisted), cap_(cap) {}
  void add(ProblemKind kind, std::int32_t rank, std::int32_t position, const Action& action, std::string message) {
    if (problems_.size() < cap_) {
      problems_.push_back(Problem{kind, rank, position, action, std::move(message)});
    } else {
      ++unlisted_;
    }
  }
  void add(ProblemKind kind, std::string message) { add(kind, -1, -1, Action{}, std::move(message)); }
  [[nodiscard]] bool any() const noexcept { return !problems_.empty() || unlisted_ != 0; }

 private:
  std::vector<Problem>& problems_;
  std::size_t& unlisted_;
  std::size_t cap_;
};

[[nodiscard]] inline std::string at_rank(std::int32_t rank, std::int32_t position) {
  return detail::concat("rank ", rank, " position ", position);
}

}  // namespace detail
}  // namespace ppsched
