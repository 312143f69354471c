// V-Half and V-Min, the controllable-memory V schedules of Qi, Wan, Amar and Lin, "Pipeline
// Parallelism with Controllable Memory" (NeurIPS 2024). A schedule is built by repeating one
// micro-batch's *building block*: on a grid where every pass (F, BI or BW of one chunk) takes one
// slot, the block fixes the slot at which each rank runs each pass of micro-batch 0, and
// micro-batch j runs every pass 6 slots later than micro-batch j-1 (a rank has six passes per
// micro-batch: F, BI and BW of its two chunks). An activation lives from its F to its BW, so the
// block's lifespans set the peak memory: a rank holds about (sum of its lifespans) / 6 chunk
// activations. On the V placement (rank r holds stage r and stage 2p-1-r) the block is
// balanced — every rank's two lifespans add up to the same length — and the offset between the
// forward passes of consecutive ranks on the way down the V controls that length:
//   - V-Min: offset 1 slot, peak about 1/3 of 1F1B's p M_B, bubble about 2p/3 passes of a rank's
//     whole F+BI+BW per step;
//   - V-Half: offset 2 slots, peak about 1/2 of 1F1B's, bubble about p/2 of F+BI+BW;
//   - ZB-V (zero_bubble.hpp) is the same family at the largest offset: 1F1B's memory, no bubble.
// A gap of a few slots is inserted at the turn of the V when the plain offsets would put two
// passes of one rank on the same slot of the 6-slot cycle (V-Min when 3 divides p, V-Half when p
// is even). The BWs fill the free slots of each rank's cycle, oldest BI first. The rank's
// program is then its passes in slot order; the executor and the simulator remove the slack the
// grid leaves (the paper's "squeezing"), and the warm-up and cool-down are compacted — passes
// moved into earlier free slots — without raising the peak memory of the block. The paper's
// reference implementation orders the same block differently (reorder_v_block, below); the
// families take whichever of the two orders is shorter with unit passes.
//
// Any p, m >= 1 with v = 2; a compute-only Schedule with split backward (BI, BW).
#pragma once

#include "ppsched/config.hpp"

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

#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/request.hpp"
#include "ppsched/schedule/schedule.hpp"

namespace ppsched::inline PPSCHED_MODE {

inline constexpr std::string_view v_half_name = "v-half";
inline constexpr std::string_view v_min_name = "v-min";

// One rank's row of a V building block: the slot of each input-critical pass of micro-batch 0.
// Chunk 0 is stage r (reached on the way down the V), chunk 1 is stage 2p-1-r (on the way back).
struct VBlockRow {
  std::int32_t forward0 = 0;   // F of chunk 0
  std::int32_t forward1 = 0;   // F of chunk 1
  std::int32_t backward1 = 0;  // BI of chunk 1
  std::int32_t backward0 = 0;  // BI of chunk 0

  friend constexpr bool operator==(const VBlockRow&, const VBlockRow&) = default;
};

// The slots of one rank's cycle: six passes per micro-batch, one micro-batch per cycle.
inline constexpr std::int32_t v_block_period = 6;

// V-Min's block: F of chunk 0 one slot after the rank before, everything else as tight as the
// dependencies allow; two more slots at the turn of the backward when 3 divides p (otherwise
// BI of chunk 1 on a rank would share its slot of the cycle with that rank's F of chunk 0).
[[nodiscard]] inline std::vector<VBlockRow> v_min_block(std::int32_t ranks) {
  std::vector<VBlockRow> block;
  if (ranks < 1) return block;
  const std::int32_t p = ranks, gap = p % 3 == 0 ? 2 : 0;
  block.reserve(static_cast<std::size_t>(p));
  for (std::int32_t r = 0; r < p; ++r) block.push_back({r, 2 * p - 1 - r, 2 * p + gap + r, 4 * p + gap - 1 - r});
  return block;
}

// V-Half's block: F of chunk 0 and BI of chunk 1 two slots after the rank before, the rest
// tight; three more slots at the turn of the backward when p is even.
[[nodiscard]] inline std::vector<VBlockRow> v_half_block(std::int32_t ranks) {
  std::vector<VBlockRow> block;
  if (ranks < 1) return block;
  const std::int32_t p = ranks, gap = p % 2 == 0 ? 3 : 0;
  block.reserve(static_cast<std::size_t>(p));
  for (std::int32_t r = 0; r < p; ++r)
    block.push_back({2 * r, 3 * p - 2 - r, 3 * p + gap + 2 * r - 1, 6 * p + gap - 2 - r});
  return block;
}

namespace detail {

[[nodiscard]] constexpr std::int32_t cycle_slot(std::int32_t slot) noexcept {
  return ((slot % v_block_period) + v_block_period) % v_block_period;
}

// What makes `block` not a building block of the V for p = block.size() ranks, or an empty
// string: slots non-negative, every pass after the passes it needs (one slot each), and no two
// passes of a rank on the same slot of the cycle (they would collide once the block repeats).
// `rank` is set to the row at fault. The candidate generator asks this of many blocks, most of
// them fine, so a valid block costs no string.
[[nodiscard]] inline std::string v_block_problem(std::span<const VBlockRow> block, std::int32_t& rank) {
  const auto p = static_cast<std::int32_t>(block.size());
  for (std::int32_t r = 0; r < p; ++r) {
    rank = r;
    const VBlockRow& row = block[static_cast<std::size_t>(r)];
    if (std::min({row.forward0, row.forward1, row.backward1, row.backward0}) < 0) return "a slot is negative";
    if (r > 0 && row.forward0 <= block[static_cast<std::size_t>(r) - 1].forward0)
      return "F of chunk 0 does not come after the previous rank's";
    if (r > 0 && row.backward1 <= block[static_cast<std::size_t>(r) - 1].backward1)
      return "BI of chunk 1 does not come after the previous rank's";
    if (r + 1 < p && row.forward1 <= block[static_cast<std::size_t>(r) + 1].forward1)
      return "F of chunk 1 does not come after the next rank's";
    if (r + 1 < p && row.backward0 <= block[static_cast<std::size_t>(r) + 1].backward0)
      return "BI of chunk 0 does not come after the next rank's";
    if (r + 1 == p && row.forward1 <= row.forward0) return "F of chunk 1 does not come after F of chunk 0";
    if (r + 1 == p && row.backward0 <= row.backward1) return "BI of chunk 0 does not come after BI of chunk 1";
    if (r == 0 && row.backward1 <= row.forward1) return "BI of chunk 1 does not come after F of chunk 1";
    const std::array<std::int32_t, 4> cycle{cycle_slot(row.forward0), cycle_slot(row.forward1),
                                            cycle_slot(row.backward1), cycle_slot(row.backward0)};
    for (std::size_t i = 0; i < cycle.size(); ++i)
      for (std::size_t j = i + 1; j < cycle.size(); ++j)
        if (cycle[i] == cycle[j]) return concat("two passes share slot ", cycle[i], " of the 6-slot cycle");
  }
  return {};
}

// Throws unless `block` is a building block of the V (v_block_problem's rules).
inline void check_v_block(std::string_view family, std::span<const VBlockRow> block) {
  std::int32_t rank = 0;
  std::string problem = v_block_problem(block, rank);
  if (!problem.empty()) {
    fail({family_subject(family), std::move(problem), concat("building block, rank ", rank),
          "give every rank its four slots with each pass after what it needs and distinct slots modulo 6"});
  }
}

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
[[nodiscard]] inline VSlotGrid v_block_grid(std::span<const VBlockRow> block, std::int32_t microbatches) {
  VSlotGrid g;
  g.ranks = block.size();
  g.microbatches = static_cast<std::size_t>(microbatches);
  const std::size_t p = g.ranks, m = g.microbatches;
  const auto last_critical = [&](const VBlockRow& row) {
    return static_cast<std::size_t>(std::max({row.forward0, row.forward1, row.backward1, row.backward0})) +
           static_cast<std::size_t>(v_block_period) * (m - 1);
  };
  // After its last critical pass a rank runs at most its 2m BWs, one per slot.
  for (const VBlockRow& row : block) g.lane = std::max(g.lane, last_critical(row) + 1 + 2 * m);
  g.pass.assign(p * g.lane, v_free_slot);
  g.slot_of.resize(p * 6 * m);
  std::vector<std::int32_t> owed;  // a rank's BIs whose BW is not placed yet, oldest first
  owed.reserve(2 * m);
  for (std::size_t r = 0; r < p; ++r) {
    const VBlockRow& row = block[r];
    std::int32_t* lane = g.pass.data() + r * g.lane;
    const std::array<std::int32_t, 4> first_slot{row.forward0, row.forward1, row.backward1, row.backward0};
    for (std::int32_t kind = 0; kind < 4; ++kind)
      for (std::size_t mb = 0; mb < m; ++mb)
        lane[static_cast<std::size_t>(first_slot[static_cast<std::size_t>(kind)]) + v_block_period * mb] =
            v_pass_code(kind, static_cast<std::int32_t>(mb));
    const std::size_t last = last_critical(row);
    owed.clear();
    std::size_t next_owed = 0;
    std::int32_t held = 0;
    for (std::size_t slot = static_cast<std::size_t>(*std::min_element(first_slot.begin(), first_slot.end()));
         slot <= last || next_owed < owed.size(); ++slot) {
      std::int32_t code = lane[slot];
      if (code != v_free_slot) {
        if ((code & 7) == 2 || (code & 7) == 3) owed.push_back(code);
      } else if (next_owed < owed.size()) {
        const std::int32_t bi = owed[next_owed++];
        code = (bi & ~7) | ((bi & 7) == 2 ? 4 : 5);
        lane[slot] = code;
      } else {
        continue;
      }
      g.slot_of[(static_cast<std::size_t>(code >> 3) * p + r) * 6 + static_cast<std::size_t>(code & 7)] =
          static_cast<std::int32_t>(slot);
      held += v_held_change(code & 7);
      g.peak_held = std::max(g.peak_held, held);
      g.slots = std::max(g.slots, static_cast<std::int32_t>(slot) + 1);
    }
  }
  return g;
}

// The first slot in [from, to) whose bit is clear in `taken` (one bit per slot), or `to`.
[[nodiscard]] inline std::int32_t first_free_slot(const std::uint64_t* taken, std::int32_t from,
                                                  std::int32_t to) noexcept {
  while (from < to) {
    const std::uint64_t free = ~taken[from >> 6] >> (from & 63);
    if (free != 0) return std::min(to, from + static_cast<std::int32_t>(std::countr_zero(free)));
    from = (from | 63) + 1;
  }
  return to;
}

// The last slot in [lowest, at] whose bit is set in `taken`, or -1.
[[nodiscard]] inline std::int32_t last_taken_slot(const std::uint64_t* taken, std::int32_t lowest,
                                                  std::int32_t at) noexcept {
  while (at >= lowest) {
    const std::uint64_t below = taken[at >> 6] << (63 - (at & 63));
    if (below != 0) {
      const std::int32_t slot = at - static_cast<std::int32_t>(std::countl_zero(below));
      return slot >= lowest ? slot : -1;
    }
    at = (at & ~63) - 1;
  }
  return -1;
}

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
inline void compact_v_grid(VSlotGrid& g) {
  const std::size_t p = g.ranks;
  const std::int32_t end = g.slots, last_rank = static_cast<std::int32_t>(p) - 1;
  const std::size_t words = (static_cast<std::size_t>(end) + 63) / 64;
  std::vector<std::uint64_t> taken(p * words, 0);
  for (std::size_t r = 0; r < p; ++r)
    for (std::int32_t s = 0; s < end; ++s)
      if (g.pass[r * g.lane + static_cast<std::size_t>(s)] != v_free_slot)
        taken[r * words + static_cast<std::size_t>(s >> 6)] |= std::uint64_t{1} << (s & 63);
  const auto at = [&](std::int32_t rank, std::int32_t kind, std::int32_t mb) -> std::int32_t& {
    return g.slot_of[(static_cast<std::size_t>(mb) * p + static_cast<std::size_t>(rank)) * 6 +
                     static_cast<std::size_t>(kind)];
  };
  std::vector<std::int32_t> held_before(p, 0);  // held in the block before the current slot
  for (std::int32_t s = 0; s < end; ++s) {
    for (std::int32_t r = 0; r <= last_rank; ++r) {
      std::int32_t* lane = g.pass.data() + static_cast<std::size_t>(r) * g.lane;
      const std::int32_t code = lane[s];
      if (code == v_free_slot) continue;
      const std::int32_t k = code & 7, mb = code >> 3;
      const std::int32_t held_at_previous_slot = held_before[static_cast<std::size_t>(r)];
      held_before[static_cast<std::size_t>(r)] += v_held_change(k);
      std::int32_t ready = mb > 0 ? at(r, k, mb - 1) : -1;  // the latest slot of what this pass needs
      switch (k) {
        case 0: if (r > 0) ready = std::max(ready, at(r - 1, 0, mb)); break;
        case 1: ready = std::max(ready, r < last_rank ? at(r + 1, 1, mb) : at(r, 0, mb)); break;
        case 2: ready = std::max(ready, r > 0 ? at(r - 1, 2, mb) : at(r, 1, mb)); break;
        case 3: ready = std::max(ready, r < last_rank ? at(r + 1, 3, mb) : at(r, 2, mb)); break;
        case 4: ready = std::max(ready, at(r, 2, mb)); break;
        default: ready = std::max(ready, at(r, 3, mb)); break;
      }
      std::uint64_t* tk = taken.data() + static_cast<std::size_t>(r) * words;
      std::int32_t to = first_free_slot(tk, ready + 1, s);
      if (to >= s) continue;
      if (k <= 1) {
        // Down from the slot before this one, a run of slots at a time: the held count is the
        // same from a taken slot up to the next one.
        std::int32_t top = s - 1, held = held_at_previous_slot;
        for (;;) {
          if (held + 1 > g.peak_held) {
            to = first_free_slot(tk, top + 1, s);
            break;
          }
          const std::int32_t run = last_taken_slot(tk, to, top);
          if (run < 0) break;
          held -= v_held_change(lane[run] & 7);
          top = run - 1;
        }
        if (to >= s) continue;
      }
      lane[to] = code;
      lane[s] = v_free_slot;
      tk[to >> 6] |= std::uint64_t{1} << (to & 63);
      tk[s >> 6] &= ~(std::uint64_t{1} << (s & 63));
      at(r, k, mb) = to;
    }
  }
}

}  // namespace detail

namespace detail {

// The request and block checks repeat_v_block and reorder_v_block share.
inline void check_v_block_request(std::string_view name, const ScheduleRequest& r, std::span<const VBlockRow> block) {
  check_request_sizes(name, r);
  require_chunks(name, r, 2, concat(name, " places two chunks per rank in a V shape"),
                         "for one stage per rank use zb-h1 or zb-h2");
  if (static_cast<std::size_t>(r.ranks) != block.size()) {
    fail({family_subject(name),
          concat("the building block has ", block.size(), " rows for p=", r.ranks, " ranks"),
          concat("request ", to_string(r)), "give one row per rank"});
  }
  check_v_block(name, block);
  // Every slot up to the last BW is a 32-bit slot of the grid: the block's latest slot, 6 more
  // per micro-batch and the 2m BWs that may follow must stay in range.
  std::int64_t latest = 0;
  for (const VBlockRow& row : block) latest = std::max<std::int64_t>({latest, row.forward0, row.forward1, row.backward1, row.backward0});
  if (latest + 8 * std::int64_t{r.microbatches} > std::numeric_limits<std::int32_t>::max()) {
    fail({family_subject(name),
          concat("the building block's latest slot ", latest, " leaves no room for m=", r.microbatches,
                         " micro-batches of 6 slots"),
          concat("request ", to_string(r)), "start the block near slot 0, one slot per pass"});
  }
}

}  // namespace detail

// The block-repetition core: the schedule that repeats `block` (one row per rank, p =
// block.size() ranks on the V placement) for r.microbatches micro-batches, with the BWs in the
// free slots of each rank's cycle, oldest BI first. Throws ppsched::error for a request other
// than p = block.size() and v = 2, or a block that is not one (check_v_block's rules).
[[nodiscard]] inline Schedule repeat_v_block(std::string_view name, const ScheduleRequest& r,
                                             std::span<const VBlockRow> block) {
  detail::check_v_block_request(name, r, block);
  const std::int32_t p = r.ranks;
  Schedule s = detail::empty_schedule(name, r, v_shape_placement(p), true, 6 * static_cast<std::size_t>(r.microbatches));
  detail::VSlotGrid grid = detail::v_block_grid(block, r.microbatches);
  detail::compact_v_grid(grid);
  constexpr std::array<Op, 6> op_of{Op::F, Op::F, Op::BI, Op::BI, Op::BW, Op::BW};
  constexpr std::array<bool, 6> on_chunk0{true, false, false, true, false, true};
  for (std::int32_t rank = 0; rank < p; ++rank) {
    auto& program = s.programs[static_cast<std::size_t>(rank)];
    const std::int32_t* lane = grid.pass.data() + static_cast<std::size_t>(rank) * grid.lane;
    for (std::int32_t slot = 0; slot < grid.slots; ++slot) {
      const std::int32_t code = lane[slot];
      if (code == detail::v_free_slot) continue;
      const auto kind = static_cast<std::size_t>(code & 7);
      program.push_back(detail::compute_action(op_of[kind], on_chunk0[kind] ? rank : 2 * p - 1 - rank, code >> 3));
    }
  }
  return s;
}

// ------------------------------------------------------------- the reference reordering
//
// The paper's repository (sail-sg/zero-bubble-pipeline-parallelism, zbv_greedy.py) turns the
// same repeated block into a schedule differently from compact_v_grid: it works on lists of
// slots per pass kind, twice, and squeezes the slots between the passes:
//   1. the BWs go to the free slots, oldest BI first (one BW kind); then, in slot order over
//      all ranks, every pass of the warm-up (before rank 0's first BI of chunk 0) and of the
//      cool-down (after rank 0's last F of chunk 0) moves to the first free slot of its rank
//      after what it needs where the rank's peak stays within the block's (only an F can raise
//      it); then every pass starts as early as its dependencies allow, one slot each;
//   2. the BWs are dropped and the cool-down is reordered again, the BWs now counted as taking
//      the free slots as they come; BWs placed again, squeezed again;
//   3. the BWs are dropped once more and placed per chunk — a free slot takes a BW of chunk 1
//      while one is owed, else one of chunk 0 — and the rank's program is its passes in slot
//      order.
// The result does not depend on the costs. Neither it nor compact_v_grid's is faster for every
// p, m and cost; the families keep the faster (make_v_half, make_v_min).

namespace detail {

// Pass kinds of the reference lists: 0 F of chunk 0, 1 F of chunk 1, 2 BI of chunk 1, 3 BI of
// chunk 0, then either 4 the BWs in BI order or 4 the BWs of chunk 1 and 5 those of chunk 0.
using VKindSlots = std::vector<std::vector<std::int32_t>>;  // [kind][microbatch] -> slot

[[nodiscard]] inline std::int32_t last_slot_of(const VKindSlots& rank) noexcept {
  std::int32_t last = -1;
  for (const auto& kind : rank)
    if (!kind.empty()) last = std::max(last, kind.back());
  return last;
}

// Kind at each slot of a rank's four input-critical kinds, -1 where free; slots 0..last.
[[nodiscard]] inline std::vector<std::int8_t> v_kind_lane(const VKindSlots& rank, std::size_t kinds) {
  std::vector<std::int8_t> lane(static_cast<std::size_t>(last_slot_of(rank) + 1), -1);
  for (std::size_t k = 0; k < kinds; ++k)
    for (const std::int32_t slot : rank[k]) lane[static_cast<std::size_t>(slot)] = static_cast<std::int8_t>(k);
  return lane;
}

// Appends the BW lists to a rank's four kinds: each free slot takes a BW of a BI already run;
// per chunk (chunk 1's first) when `per_chunk`, else one list in BI order. The BWs still owed
// after the last slot follow one a slot.
inline void place_v_weights(VKindSlots& rank, bool per_chunk) {
  rank.resize(4);
  const std::vector<std::int8_t> lane = v_kind_lane(rank, 4);
  const std::size_t lists = per_chunk ? 2 : 1;
  rank.resize(4 + lists);
  std::array<std::int32_t, 2> owed{0, 0};
  for (std::size_t slot = 0; slot < lane.size(); ++slot) {
    const std::int8_t k = lane[slot];
    if (k >= 2) {
      ++owed[per_chunk ? static_cast<std::size_t>(k - 2) : 0];
      continue;
    }
    if (k >= 0) continue;
    for (std::size_t w = 0; w < lists; ++w) {
      if (owed[w] == 0) continue;
      rank[4 + w].push_back(static_cast<std::int32_t>(slot));
      --owed[w];
      break;
    }
  }
  auto next = static_cast<std::int32_t>(lane.size());
  for (std::size_t w = 0; w < lists; ++w)
    for (; owed[w] > 0; --owed[w]) rank[4 + w].push_back(next++);
}

struct VPassRef {
  std::int32_t slot, rank, kind, microbatch;
  friend constexpr auto operator<=>(const VPassRef&, const VPassRef&) = default;
};

// Every pass of every rank in the order the reference visits them: slot, then rank, kind and
// micro-batch. A rank's passes have distinct slots, so each rank's lane of slots is filled and
// the lanes are read slot by slot.
[[nodiscard]] inline std::vector<VPassRef> v_visit_order(const std::vector<VKindSlots>& ranks) {
  std::int32_t last = -1;
  std::size_t n = 0;
  for (const VKindSlots& rank : ranks) {
    last = std::max(last, last_slot_of(rank));
    for (const auto& kind : rank) n += kind.size();
  }
  const auto width = static_cast<std::size_t>(last) + 1;
  std::vector<std::int32_t> lanes(ranks.size() * width, -1);  // kind * 2^24 + micro-batch
  for (std::size_t r = 0; r < ranks.size(); ++r)
    for (std::size_t k = 0; k < ranks[r].size(); ++k)
      for (std::size_t mb = 0; mb < ranks[r][k].size(); ++mb)
        lanes[r * width + static_cast<std::size_t>(ranks[r][k][mb])] =
            static_cast<std::int32_t>((k << 24) | mb);
  std::vector<VPassRef> order;
  order.reserve(n);
  for (std::size_t slot = 0; slot < width; ++slot)
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      const std::int32_t code = lanes[r * width + slot];
      if (code >= 0)
        order.push_back({static_cast<std::int32_t>(slot), static_cast<std::int32_t>(r), code >> 24, code & 0xffffff});
    }
  return order;
}

// The k-th smallest (from 0) of two ascending lists.
[[nodiscard]] inline std::int32_t kth_of_two(const std::vector<std::int32_t>& a, const std::vector<std::int32_t>& b,
                                             std::size_t k) noexcept {
  // i taken from a and k+1-i from b: the largest i whose a[i-1] is not above b[k+1-i].
  std::size_t lo = k + 1 > b.size() ? k + 1 - b.size() : 0, hi = std::min(k + 1, a.size());
  while (lo < hi) {
    const std::size_t i = (lo + hi + 1) / 2;
    if (k + 1 - i < b.size() && a[i - 1] > b[k + 1 - i]) {
      hi = i - 1;
    } else {
      lo = i;
    }
  }
  const std::int32_t from_a = lo > 0 ? a[lo - 1] : std::numeric_limits<std::int32_t>::min();
  const std::int32_t from_b = k + 1 - lo > 0 ? b[k - lo] : std::numeric_limits<std::int32_t>::min();
  return std::max(from_a, from_b);
}

// Squeezing: every pass starts one slot after the latest of what it needs and of the pass
// before it on its rank (the passes visited in slot order).
inline void squeeze_v_slots(std::vector<VKindSlots>& ranks) {
  // What a pass needs is visited before it (its slot is lower), so its slot is already its
  // squeezed start: it ends one slot later.
  const auto p = static_cast<std::int32_t>(ranks.size());
  std::vector<std::int32_t> rank_free(ranks.size(), 0);
  for (const VPassRef& e : v_visit_order(ranks)) {
    const auto r = static_cast<std::size_t>(e.rank), k = static_cast<std::size_t>(e.kind),
               mb = static_cast<std::size_t>(e.microbatch);
    std::int32_t start = rank_free[r];
    if ((e.kind == 0 || e.kind == 2) && e.rank > 0) start = std::max(start, ranks[r - 1][k][mb] + 1);
    if ((e.kind == 1 || e.kind == 3) && e.rank + 1 < p) start = std::max(start, ranks[r + 1][k][mb] + 1);
    if (e.kind >= 1 && e.kind <= 3) start = std::max(start, ranks[r][k - 1][mb] + 1);
    if (mb > 0) start = std::max(start, ranks[r][k][mb - 1] + 1);
    ranks[r][k][mb] = start;
    rank_free[r] = start + 1;
  }
}

// The slot the pass (rank, kind, mb) may take at the earliest: one after what it needs.
[[nodiscard]] inline std::int32_t v_earliest_slot(const std::vector<VKindSlots>& ranks, const VPassRef& e) {
  const auto p = static_cast<std::int32_t>(ranks.size());
  const auto r = static_cast<std::size_t>(e.rank), k = static_cast<std::size_t>(e.kind),
             mb = static_cast<std::size_t>(e.microbatch);
  std::int32_t need = -1;
  if ((e.kind == 0 || e.kind == 2) && e.rank > 0) need = std::max(need, ranks[r - 1][k][mb]);
  if ((e.kind == 1 || e.kind == 3) && e.rank + 1 < p) need = std::max(need, ranks[r + 1][k][mb]);
  if (e.kind >= 1 && e.kind <= 3) need = std::max(need, ranks[r][k - 1][mb]);
  if (e.kind == 4) need = std::max(need, kth_of_two(ranks[r][2], ranks[r][3], mb));  // the BW's BI
  if (mb > 0) need = std::max(need, ranks[r][k][mb - 1]);
  return need + 1;
}

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
inline void reorder_v_round_with_weights(std::vector<VKindSlots>& ranks, std::int32_t microbatches) {
  for (VKindSlots& rank : ranks) place_v_weights(rank, false);
  std::vector<std::vector<std::int32_t>> held(ranks.size());
  std::vector<std::vector<std::uint8_t>> taken(ranks.size());
  std::int32_t cap = 0;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const std::vector<std::int8_t> lane = v_kind_lane(ranks[r], 5);
    held[r].resize(lane.size());
    taken[r].assign(lane.size(), 0);
    std::int32_t now = 0;
    for (std::size_t slot = 0; slot < lane.size(); ++slot) {
      if (lane[slot] >= 0) now += v_held_change(lane[slot]);
      held[r][slot] = now;
      cap = std::max(cap, now);
    }
  }
  VPhase phase(microbatches, true);
  for (const VPassRef& e : v_visit_order(ranks)) {
    const auto r = static_cast<std::size_t>(e.rank);
    std::int32_t& at = ranks[r][static_cast<std::size_t>(e.kind)][static_cast<std::size_t>(e.microbatch)];
    const std::int32_t from = at;
    if (phase.moves(e)) {
      const std::int32_t earliest = v_earliest_slot(ranks, e);
      std::int32_t to = from;
      if (e.kind <= 1) {
        // An F moved to t holds one more activation over [t, from).
        std::int32_t most = std::numeric_limits<std::int32_t>::min();
        for (std::int32_t t = from - 1; t >= earliest; --t) {
          most = std::max(most, held[r][static_cast<std::size_t>(t)]);
          if (!taken[r][static_cast<std::size_t>(t)] && most + 1 <= cap) to = t;
        }
      } else {
        for (std::int32_t t = earliest; t < from && to == from; ++t)
          if (!taken[r][static_cast<std::size_t>(t)]) to = t;
      }
      if (to < from) {
        const std::int32_t change = e.kind <= 1 ? 1 : (e.kind == 4 ? -1 : 0);
        for (std::int32_t t = to; t < from; ++t) held[r][static_cast<std::size_t>(t)] += change;
        at = to;
      }
    }
    taken[r][static_cast<std::size_t>(at)] = 1;
  }
  squeeze_v_slots(ranks);
  for (VKindSlots& rank : ranks) rank.resize(4);
}

// A rank's peak from `from` on, the BWs taking free slots as they come up to its last pass;
// held, owed and peak give the state before `from`.
[[nodiscard]] inline std::int32_t v_peak_from(const std::vector<std::int8_t>& lane, std::size_t from,
                                              std::int32_t held, std::int32_t owed, std::int32_t peak) noexcept {
  for (std::size_t slot = from; slot < lane.size(); ++slot) {
    const std::int8_t k = lane[slot];
    if (k >= 0) {
      held += v_held_change(k);
      owed += k >= 2 ? 1 : 0;
    } else if (owed > 0) {
      --held;
      --owed;
    }
    peak = std::max(peak, held);
  }
  return peak;
}

// Round 2: the BWs implied (taking free slots as they come); only the cool-down moves.
inline void reorder_v_round_implied_weights(std::vector<VKindSlots>& ranks, std::int32_t microbatches) {
  const std::size_t p = ranks.size();
  std::vector<std::vector<std::int8_t>> lanes(p);
  // State after each slot: held, owed BWs, peak so far.
  std::vector<std::vector<std::array<std::int32_t, 3>>> state(p);
  const auto refresh = [&](std::size_t r, std::size_t from) {
    const std::vector<std::int8_t>& lane = lanes[r];
    state[r].resize(lane.size());
    std::array<std::int32_t, 3> s = from > 0 ? state[r][from - 1] : std::array<std::int32_t, 3>{0, 0, 0};
    for (std::size_t slot = from; slot < lane.size(); ++slot) {
      const std::int8_t k = lane[slot];
      if (k >= 0) {
        s[0] += v_held_change(k);
        s[1] += k >= 2 ? 1 : 0;
      } else if (s[1] > 0) {
        --s[0];
        --s[1];
      }
      s[2] = std::max(s[2], s[0]);
      state[r][slot] = s;
    }
  };
  std::int32_t cap = 0;
  for (std::size_t r = 0; r < p; ++r) {
    lanes[r] = v_kind_lane(ranks[r], 4);
    refresh(r, 0);
    if (!state[r].empty()) cap = std::max(cap, state[r].back()[2]);
  }
  VPhase phase(microbatches, false);
  for (const VPassRef& e : v_visit_order(ranks)) {
    if (!phase.moves(e)) continue;
    const auto r = static_cast<std::size_t>(e.rank);
    std::int32_t& at = ranks[r][static_cast<std::size_t>(e.kind)][static_cast<std::size_t>(e.microbatch)];
    const std::int32_t from = at;
    std::vector<std::int8_t>& lane = lanes[r];
    const auto kind = static_cast<std::int8_t>(e.kind);
    for (std::int32_t t = v_earliest_slot(ranks, e); t < from; ++t) {
      const auto ts = static_cast<std::size_t>(t);
      if (lane[ts] >= 0) continue;
      lane[ts] = kind;
      lane[static_cast<std::size_t>(from)] = -1;
      const bool last = static_cast<std::size_t>(from) + 1 == lane.size();
      std::size_t size = lane.size();
      if (last) {
        while (size > 0 && lane[size - 1] < 0) --size;
        lane.resize(size);
      }
      const std::array<std::int32_t, 3> before = ts > 0 ? state[r][ts - 1] : std::array<std::int32_t, 3>{0, 0, 0};
      if (v_peak_from(lane, ts, before[0], before[1], before[2]) <= cap) {
        at = t;
        refresh(r, ts);
        break;
      }
      if (last) lane.resize(static_cast<std::size_t>(from) + 1, -1);
      lane[static_cast<std::size_t>(from)] = kind;
      lane[ts] = -1;
    }
  }
  for (VKindSlots& rank : ranks) place_v_weights(rank, false);
  squeeze_v_slots(ranks);
  for (VKindSlots& rank : ranks) rank.resize(4);
}

}  // namespace detail

// The schedule the paper's reference implementation makes of `block` (see above) for
// r.microbatches micro-batches; same requests and errors as repeat_v_block.
[[nodiscard]] inline Schedule reorder_v_block(std::string_view name, const ScheduleRequest& r,
                                              std::span<const VBlockRow> block) {
  detail::check_v_block_request(name, r, block);
  const std::int32_t p = r.ranks, m = r.microbatches;
  Schedule s = detail::empty_schedule(name, r, v_shape_placement(p), true, 6 * static_cast<std::size_t>(m));
  std::vector<detail::VKindSlots> ranks(static_cast<std::size_t>(p));
  for (std::size_t rank = 0; rank < ranks.size(); ++rank) {
    const VBlockRow& row = block[rank];
    ranks[rank].resize(4);
    const std::array<std::int32_t, 4> first{row.forward0, row.forward1, row.backward1, row.backward0};
    for (std::size_t k = 0; k < 4; ++k)
      for (std::int32_t mb = 0; mb < m; ++mb) ranks[rank][k].push_back(first[k] + v_block_period * mb);
  }
  detail::reorder_v_round_with_weights(ranks, m);
  detail::reorder_v_round_implied_weights(ranks, m);
  for (detail::VKindSlots& rank : ranks) detail::place_v_weights(rank, true);
  constexpr std::array<Op, 6> op_of{Op::F, Op::F, Op::BI, Op::BI, Op::BW, Op::BW};
  constexpr std::array<bool, 6> on_chunk0{true, false, false, true, false, true};
  // A rank's passes have distinct slots: its program is its lane read in slot order.
  std::vector<Action> lane;
  for (std::int32_t rank = 0; rank < p; ++rank) {
    const detail::VKindSlots& lists = ranks[static_cast<std::size_t>(rank)];
    lane.assign(static_cast<std::size_t>(detail::last_slot_of(lists)) + 1, Action{Op::F, -1, -1, 0});  // free
    for (std::size_t k = 0; k < lists.size(); ++k)
      for (std::size_t mb = 0; mb < lists[k].size(); ++mb)
        lane[static_cast<std::size_t>(lists[k][mb])] = detail::compute_action(
            op_of[k], on_chunk0[k] ? rank : 2 * p - 1 - rank, static_cast<std::int32_t>(mb));
    auto& program = s.programs[static_cast<std::size_t>(rank)];
    program.clear();
    for (const Action& a : lane)
      if (a.stage >= 0) program.push_back(a);
  }
  return s;
}

// ------------------------------------------------------------- candidate building blocks
//
// The paper's point is that the block is a design space: the offsets between consecutive
// ranks' passes set the lifespans, hence the memory, and the order a rank runs its passes in,
// hence the bubble once the costs are uneven. The generator spans a small part of that space,
// the part V-Min and V-Half are points of:
//   - forward_spacing f: F of chunk 0 on rank r at slot f·r (the way down the V);
//   - backward_spacing b: BI of chunk 1 on rank r at b·r after rank 0's (the backward down);
//   - turn_gap g: free slots between F of chunk 1 and BI of chunk 1 on rank 0, the turn of the
//     backward (the slots that would otherwise make two passes meet on the 6-slot cycle).
// The way back up (F of chunk 1, BI of chunk 0) is tight, one slot a rank, and the forward turn
// on the last rank takes the next slot. The backward's turn on the last rank (BI of chunk 1 to
// BI of chunk 0) is not a parameter: it is the fewest slots, 1 to 6, that make the block valid
// (a longer turn only holds the chunk-0 activations longer). V-Min is (1, 1, g) and V-Half
// (2, 2, g) with their own gaps; larger f and b hold more and idle less, towards ZB-V.

struct VBlockShape {
  std::int32_t forward_spacing = 1;   // f, slots between consecutive ranks' F of chunk 0
  std::int32_t backward_spacing = 1;  // b, slots between consecutive ranks' BI of chunk 1
  std::int32_t turn_gap = 0;          // g, free slots at rank 0 between F and BI of chunk 1

  friend constexpr bool operator==(const VBlockShape&, const VBlockShape&) = default;
};

// The ranges v_block_candidates spans: f and b 1..3 (spacings past 3 hold about as much as ZB-V,
// which the search has as a family), g 0..5 (the cycle has 6 slots: a gap of 6 repeats one of 0).
inline constexpr std::int32_t v_block_max_spacing = 3;
inline constexpr std::int32_t v_block_max_turn_gap = v_block_period - 1;

// "v-block(f=2,b=1,gap=3)": the name a block candidate carries in the search.
[[nodiscard]] inline std::string v_block_name(const VBlockShape& shape) {
  return detail::concat("v-block(f=", shape.forward_spacing, ",b=", shape.backward_spacing, ",gap=", shape.turn_gap,
                        ")");
}

// The block of `shape` for p ranks (see above), or an empty block when no turn on the last rank
// makes it valid or p < 1. Throws ppsched::error for a spacing below 1 or a negative gap.
[[nodiscard]] inline std::vector<VBlockRow> v_block_of_shape(std::int32_t ranks, const VBlockShape& shape) {
  if (shape.forward_spacing < 1 || shape.backward_spacing < 1 || shape.turn_gap < 0) {
    fail({"V building block", detail::concat("spacings f=", shape.forward_spacing, ", b=", shape.backward_spacing,
                                             " and turn gap ", shape.turn_gap),
          "VBlockShape", "give spacings of at least 1 slot and a gap of at least 0"});
  }
  std::vector<VBlockRow> block;
  if (ranks < 1) return block;
  const std::int64_t p = ranks, f = shape.forward_spacing, b = shape.backward_spacing, g = shape.turn_gap;
  // The last slot the block can reach (turn of 6 included) must be a 32-bit slot.
  const std::int64_t forward1_first = f * (p - 1) + 1 + (p - 1);
  const std::int64_t backward1_first = forward1_first + 1 + g;
  if (backward1_first + b * (p - 1) + v_block_period + (p - 1) > std::numeric_limits<std::int32_t>::max()) {
    fail({"V building block", detail::concat("p=", ranks, " ranks with f=", f, ", b=", b, ", gap=", g),
          "VBlockShape", "the block's slots exceed 32 bits: use fewer ranks or smaller spacings"});
  }
  block.resize(static_cast<std::size_t>(ranks));
  for (std::int64_t r = 0; r < p; ++r) {
    VBlockRow& row = block[static_cast<std::size_t>(r)];
    row.forward0 = static_cast<std::int32_t>(f * r);
    row.forward1 = static_cast<std::int32_t>(forward1_first - r);
    row.backward1 = static_cast<std::int32_t>(backward1_first + b * r);
  }
  const std::int32_t last_backward1 = block.back().backward1;
  for (std::int32_t turn = 1; turn <= v_block_period; ++turn) {
    for (std::int32_t r = 0; r < ranks; ++r) block[static_cast<std::size_t>(r)].backward0 = last_backward1 + turn + (ranks - 1 - r);
    std::int32_t at = 0;
    if (detail::v_block_problem(block, at).empty()) return block;
  }
  block.clear();
  return block;
}

// One candidate block: its parameters, its name and its rows.
struct VBlockCandidate {
  VBlockShape shape;
  std::string name;  // v_block_name(shape)
  std::vector<VBlockRow> block;
};

// The valid blocks of the shapes f, b in 1..v_block_max_spacing and g in 0..v_block_max_turn_gap
// for p ranks, each block once (the first shape that makes it; at p = 1 every f and b make the
// same block), in the order f, b, g. Includes V-Min's and V-Half's blocks. Empty for p < 1.
[[nodiscard]] inline std::vector<VBlockCandidate> v_block_candidates(std::int32_t ranks) {
  std::vector<VBlockCandidate> out;
  if (ranks < 1) return out;
  for (std::int32_t f = 1; f <= v_block_max_spacing; ++f) {
    for (std::int32_t b = 1; b <= v_block_max_spacing; ++b) {
      for (std::int32_t g = 0; g <= v_block_max_turn_gap; ++g) {
        const VBlockShape shape{f, b, g};
        std::vector<VBlockRow> block = v_block_of_shape(ranks, shape);
        if (block.empty()) continue;
        const bool seen = std::any_of(out.begin(), out.end(), [&](const VBlockCandidate& c) { return c.block == block; });
        if (!seen) out.push_back({shape, v_block_name(shape), std::move(block)});
      }
    }
  }
  return out;
}

namespace detail {

// The step of a compute-only V schedule (split backward) when every pass takes one unit and
// communication is free: each rank runs its program in order, a pass once what it needs is
// done. Infinity when the order cannot run.
[[nodiscard]] inline double v_unit_step(const Schedule& s) {
  const auto S = static_cast<std::size_t>(s.stages()), M = static_cast<std::size_t>(s.microbatches);
  // end[(kind * S + stage) * M + mb] for kind 0 F, 1 BI, 2 BW; -1 until it has run.
  std::vector<double> end(3 * S * M, -1.0);
  const auto at = [&](std::size_t kind, std::int32_t stage, std::int32_t mb) -> double& {
    return end[(kind * S + static_cast<std::size_t>(stage)) * M + static_cast<std::size_t>(mb)];
  };
  std::vector<std::size_t> next(s.programs.size(), 0);
  std::vector<double> free(s.programs.size(), 0.0);
  double step = 0.0;
  for (bool moved = true; moved;) {
    moved = false;
    for (std::size_t r = 0; r < s.programs.size(); ++r) {
      for (; next[r] < s.programs[r].size(); ++next[r]) {
        const Action& a = s.programs[r][next[r]];
        const auto last = static_cast<std::int32_t>(S) - 1;
        double need = 0.0;
        if (a.op == Op::F) {
          need = a.stage > 0 ? at(0, a.stage - 1, a.microbatch) : 0.0;
        } else if (a.op == Op::BI) {
          const double forward = at(0, a.stage, a.microbatch);
          const double below = a.stage < last ? at(1, a.stage + 1, a.microbatch) : 0.0;
          need = forward < 0.0 || below < 0.0 ? -1.0 : std::max(forward, below);
        } else {
          need = at(1, a.stage, a.microbatch);
        }
        if (need < 0.0) break;
        free[r] = std::max(free[r], need) + 1.0;
        at(a.op == Op::F ? 0 : (a.op == Op::BI ? 1 : 2), a.stage, a.microbatch) = free[r];
        step = std::max(step, free[r]);
        moved = true;
      }
    }
  }
  for (std::size_t r = 0; r < s.programs.size(); ++r)
    if (next[r] < s.programs[r].size()) return std::numeric_limits<double>::infinity();
  return step;
}

// The family's schedule of `block`: compact_v_grid's order or the reference's (reorder_v_block),
// whichever is shorter with one unit a pass (the paper's setting); compact_v_grid's on a tie.
// Both keep to the block's peak. Neither is shorter for every cost: the search (plan/search)
// builds both and times them with the model's costs.
[[nodiscard]] inline Schedule v_family_schedule(std::string_view name, const ScheduleRequest& r,
                                                std::span<const VBlockRow> block) {
  Schedule compacted = repeat_v_block(name, r, block);
  Schedule reordered = reorder_v_block(name, r, block);
  return v_unit_step(reordered) < v_unit_step(compacted) ? reordered : compacted;
}

}  // namespace detail

namespace detail {

// What make_v_min and make_v_half refuse in a request (FamilyInfo::problem), or nothing: the
// sizes, then the V's two chunks, as check_v_block_request words them.
[[nodiscard]] inline std::optional<error_context> v_family_problem(std::string_view name, const ScheduleRequest& r) {
  return sizes_and_chunks_problem(name, r, 2, concat(name, " places two chunks per rank in a V shape"),
                                  "for one stage per rank use zb-h1 or zb-h2");
}
[[nodiscard]] inline std::optional<error_context> v_min_problem(const ScheduleRequest& r) {
  return v_family_problem(v_min_name, r);
}
[[nodiscard]] inline std::optional<error_context> v_half_problem(const ScheduleRequest& r) {
  return v_family_problem(v_half_name, r);
}

}  // namespace detail

// V-Min: any p, m >= 1; v = 2. Peak about 1/3 of 1F1B's activation memory.
[[nodiscard]] inline Schedule make_v_min(const ScheduleRequest& r) {
  if (auto problem = detail::v_min_problem(r)) fail(*problem);
  return detail::v_family_schedule(v_min_name, r, v_min_block(r.ranks));
}

// V-Half: any p, m >= 1; v = 2. Peak about 1/2 of 1F1B's activation memory.
[[nodiscard]] inline Schedule make_v_half(const ScheduleRequest& r) {
  if (auto problem = detail::v_half_problem(r)) fail(*problem);
  return detail::v_family_schedule(v_half_name, r, v_half_block(r.ranks));
}

}  // namespace ppsched
