// Internals of <ppsched/schedule/controllable_memory.hpp>: the V-block slot grids of the
// controllable-memory families, their memory walk and their reordering. They are in
// ppsched::detail and not part of the API: no example or page uses them, and they may change in
// any release (docs/architecture.md).
//
// They build on the part's types, which <ppsched/schedule/v_block.hpp> holds.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/request.hpp"
#include "ppsched/schedule/schedule.hpp"
#include "ppsched/schedule/v_block.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

[[nodiscard]] constexpr std::int32_t cycle_slot(std::int32_t slot) noexcept {
  return ((slot % vblock::period) + vblock::period) % vblock::period;
}

// What makes `block` not a building block of the V for p = block.size() ranks, or an empty
// string: slots non-negative, every pass after the passes it needs (one slot each), and no two
// passes of a rank on the same slot of the cycle (they would collide once the block repeats).
// `rank` is set to the row at fault. The candidate generator asks this of many blocks, most of
// them fine, so a valid block costs no string.
[[nodiscard]] PPSCHED_OUTLINE std::string v_block_problem(std::span<const vblock::Row> block, std::int32_t& rank);

// Throws unless `block` is a building block of the V (v_block_problem's rules).
PPSCHED_OUTLINE void check_v_block(std::string_view family, std::span<const vblock::Row> block);

// The slot grid of a repeated block, one lane of slots per rank: pass[rank * lane + slot] is the
// pass the rank runs at that slot, coded microbatch * 8 + kind (kind: 0 F of chunk 0, 1 F of
// chunk 1, 2 BI of chunk 1, 3 BI of chunk 0, 4 BW of chunk 1, 5 BW of chunk 0), or -1 for a free
// slot.
struct VSlotGrid {
  std::size_t ranks = 0;
  std::size_t microbatches = 0;
  std::size_t lane = 0;        // slots per rank in `pass`, at least `slots`
  std::int32_t slots = 0;      // one past the last taken slot of any rank
  std::int32_t peak_held = 0;  // the most chunk activations a rank holds after any slot
  std::vector<std::int32_t> pass;
  // [(microbatch * ranks + rank) * 6 + kind]: what a pass needs is of its micro-batch or the one
  // before, so compaction finds it near the passes it has just looked at.
  std::vector<std::int32_t> slot_of;
};

inline constexpr std::int32_t v_free_slot = -1;

[[nodiscard]] constexpr std::int32_t v_pass_code(std::int32_t kind, std::int32_t microbatch) noexcept {
  return microbatch * 8 + kind;
}

// What a pass of this kind does to the activations its rank holds: F adds one, BW frees one.
[[nodiscard]] constexpr std::int32_t v_held_change(std::int32_t kind) noexcept {
  return kind <= 1 ? 1 : (kind >= 4 ? -1 : 0);
}

// Each rank's passes on the grid: the four input-critical passes of every micro-batch at the
// block's slots plus 6 per micro-batch, and the BWs in the slots left free, oldest BI first
// (after the last critical pass they follow one per slot).
[[nodiscard]] PPSCHED_OUTLINE VSlotGrid v_block_grid(std::span<const vblock::Row> block, std::int32_t microbatches);

// The first slot in [from, to) whose bit is clear in `taken` (one bit per slot), or `to`.
[[nodiscard]] PPSCHED_OUTLINE std::int32_t first_free_slot(const std::uint64_t* taken, std::int32_t from,
                                                  std::int32_t to) noexcept;

// The last slot in [lowest, at] whose bit is set in `taken`, or -1.
[[nodiscard]] PPSCHED_OUTLINE std::int32_t last_taken_slot(const std::uint64_t* taken, std::int32_t lowest,
                                                  std::int32_t at) noexcept;

// Moves passes into earlier free slots of their rank where what they need is done by then, in
// slot order over all ranks, without raising the peak: an activation counts from its F to its
// BW, and no rank may come to hold more than the most any rank holds in the repeated block.
// Only the warm-up and the cool-down have free slots (the steady state fills every slot of the
// cycle), so this is the paper's reordering of those two phases. Passes of one kind and chunk
// keep their micro-batch order.
//
// A pass goes to the first free slot after what it needs; an F only where no slot between there
// and its own holds the peak already. The held count is not kept per slot (an F moved k slots
// would add to k of them, and V-Half moves every pass about 2p slots): it changes only at taken
// slots, and just before the current slot it is still the block's (every earlier move was from
// an earlier slot of the rank), so it is walked back over the taken slots alone, found by bits.
PPSCHED_OUTLINE void compact_v_grid(VSlotGrid& g);

}  // namespace detail

namespace detail {

// Pass kinds of the reference lists: 0 F of chunk 0, 1 F of chunk 1, 2 BI of chunk 1, 3 BI of
// chunk 0, then either 4 the BWs in BI order or 4 the BWs of chunk 1 and 5 those of chunk 0.
using VKindSlots = std::vector<std::vector<std::int32_t>>;  // [kind][microbatch] -> slot

[[nodiscard]] PPSCHED_OUTLINE std::int32_t last_slot_of(const VKindSlots& rank) noexcept;

// Kind at each slot of a rank's four input-critical kinds, -1 where free; slots 0..last.
[[nodiscard]] PPSCHED_OUTLINE std::vector<std::int8_t> v_kind_lane(const VKindSlots& rank, std::size_t kinds);

// Appends the BW lists to a rank's four kinds: each free slot takes a BW of a BI already run;
// per chunk (chunk 1's first) when `per_chunk`, else one list in BI order. The BWs still owed
// after the last slot follow one a slot.
PPSCHED_OUTLINE void place_v_weights(VKindSlots& rank, bool per_chunk);

struct VPassRef {
  std::int32_t slot, rank, kind, microbatch;
  friend constexpr auto operator<=>(const VPassRef&, const VPassRef&) = default;
};

// Every pass of every rank in the order the reference visits them: slot, then rank, kind and
// micro-batch. A rank's passes have distinct slots, so each rank's lane of slots is filled and
// the lanes are read slot by slot.
[[nodiscard]] PPSCHED_OUTLINE std::vector<VPassRef> v_visit_order(const std::vector<VKindSlots>& ranks);

// The k-th smallest (from 0) of two ascending lists.
[[nodiscard]] PPSCHED_OUTLINE std::int32_t kth_of_two(const std::vector<std::int32_t>& a, const std::vector<std::int32_t>& b,
                                             std::size_t k) noexcept;

// Squeezing: every pass starts one slot after the latest of what it needs and of the pass
// before it on its rank (the passes visited in slot order).
PPSCHED_OUTLINE void squeeze_v_slots(std::vector<VKindSlots>& ranks);

// The slot the pass (rank, kind, mb) may take at the earliest: one after what it needs.
[[nodiscard]] PPSCHED_OUTLINE std::int32_t v_earliest_slot(const std::vector<VKindSlots>& ranks, const VPassRef& e);

// Which passes the reference moves: not those from rank 0's first BI of chunk 0 up to the first
// F of chunk 0 of the last micro-batch (the steady state), nor, in the second round, the
// warm-up's.
class VPhase {
 public:
  VPhase(std::int32_t microbatches, bool warmup_moves) : last_(microbatches - 1), warmup_moves_(warmup_moves) {}
  // Whether the pass visited now may move.
  bool moves(const VPassRef& e) noexcept {
    if (phase_ == 0 && e.kind == 3 && e.rank == 0) phase_ = 1;
    if (phase_ == 1) {
      if (e.kind == 0 && e.microbatch == last_) phase_ = 2;
      return false;
    }
    return phase_ == 2 || warmup_moves_;
  }

 private:
  std::int32_t phase_ = 0, last_;
  bool warmup_moves_;
};

// Round 1: the BWs held in lists, a move checked by the range it lengthens.
PPSCHED_OUTLINE void reorder_v_round_with_weights(std::vector<VKindSlots>& ranks, std::int32_t microbatches);

// A rank's peak from `from` on, the BWs taking free slots as they come up to its last pass;
// held, owed and peak give the state before `from`.
[[nodiscard]] PPSCHED_OUTLINE std::int32_t v_peak_from(const std::vector<std::int8_t>& lane, std::size_t from,
                                              std::int32_t held, std::int32_t owed, std::int32_t peak) noexcept;

// Round 2: the BWs implied (taking free slots as they come); only the cool-down moves.
PPSCHED_OUTLINE void reorder_v_round_implied_weights(std::vector<VKindSlots>& ranks, std::int32_t microbatches);

}  // namespace detail

}  // namespace ppsched
