// Internals of <ppsched/schedule/controllable_memory.hpp>: the V-block slot grids of the
// controllable-memory families, their memory walk and their reordering. They are in
// ppsched::detail and not part of the API: no example or page uses them, and they may change in
// any release (docs/architecture.md).
//
// They build on public types of <ppsched/schedule/controllable_memory.hpp>, which includes this
// file after declaring them. So that this file also compiles alone, it includes that header
// first, and its guard opens only below that include: included alone, the header's own include of
// this file emits these internals where the header needs them, and this outer copy is then
// skipped.
#include "ppsched/schedule/controllable_memory.hpp"

#ifndef PPSCHED_SCHEDULE_DETAIL_CONTROLLABLE_MEMORY_HPP
#define PPSCHED_SCHEDULE_DETAIL_CONTROLLABLE_MEMORY_HPP

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

namespace ppsched::inline PPSCHED_MODE {

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

}  // namespace ppsched

#endif  // PPSCHED_SCHEDULE_DETAIL_CONTROLLABLE_MEMORY_HPP
