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
// moved into earlier free slots — without raising the peak memory of the block.
//
// Any p, m >= 1 with v = 2; a compute-only Schedule with split backward (BI, BW).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/request.hpp"
#include "ppsched/schedule/schedule.hpp"

namespace ppsched {

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

// Throws unless `block` is a building block of the V for p = block.size() ranks: slots
// non-negative, every pass after the passes it needs (one slot each), and no two passes of a
// rank on the same slot of the cycle (they would collide once the block repeats).
inline void check_v_block(std::string_view family, std::span<const VBlockRow> block) {
  const auto p = static_cast<std::int32_t>(block.size());
  const auto bad = [&](std::int32_t r, std::string problem) {
    fail({family_subject(family), std::move(problem), concat("building block, rank ", r),
          "give every rank its four slots with each pass after what it needs and distinct slots modulo 6"});
  };
  for (std::int32_t r = 0; r < p; ++r) {
    const VBlockRow& row = block[static_cast<std::size_t>(r)];
    if (std::min({row.forward0, row.forward1, row.backward1, row.backward0}) < 0) bad(r, "a slot is negative");
    if (r > 0 && row.forward0 <= block[static_cast<std::size_t>(r) - 1].forward0)
      bad(r, "F of chunk 0 does not come after the previous rank's");
    if (r > 0 && row.backward1 <= block[static_cast<std::size_t>(r) - 1].backward1)
      bad(r, "BI of chunk 1 does not come after the previous rank's");
    if (r + 1 < p && row.forward1 <= block[static_cast<std::size_t>(r) + 1].forward1)
      bad(r, "F of chunk 1 does not come after the next rank's");
    if (r + 1 < p && row.backward0 <= block[static_cast<std::size_t>(r) + 1].backward0)
      bad(r, "BI of chunk 0 does not come after the next rank's");
    if (r + 1 == p && row.forward1 <= row.forward0) bad(r, "F of chunk 1 does not come after F of chunk 0");
    if (r + 1 == p && row.backward0 <= row.backward1) bad(r, "BI of chunk 0 does not come after BI of chunk 1");
    if (r == 0 && row.backward1 <= row.forward1) bad(r, "BI of chunk 1 does not come after F of chunk 1");
    const std::array<std::int32_t, 4> cycle{cycle_slot(row.forward0), cycle_slot(row.forward1),
                                            cycle_slot(row.backward1), cycle_slot(row.backward0)};
    for (std::size_t i = 0; i < cycle.size(); ++i)
      for (std::size_t j = i + 1; j < cycle.size(); ++j)
        if (cycle[i] == cycle[j]) bad(r, concat("two passes share slot ", cycle[i], " of the 6-slot cycle"));
  }
}

// One pass of a rank on the slot grid.
struct SlotPass {
  std::int32_t slot = 0;
  Op op = Op::F;
  std::int32_t chunk = 0;
  std::int32_t microbatch = 0;
};

}  // namespace detail

namespace detail {

// Each rank's passes in slot order: the four input-critical passes of every micro-batch at the
// block's slots plus 6 per micro-batch, and the BWs in the slots left free, oldest BI first
// (after the last critical pass they follow one per slot).
[[nodiscard]] inline std::vector<std::vector<SlotPass>> v_block_slots(std::span<const VBlockRow> block,
                                                                      std::int32_t microbatches) {
  std::vector<std::vector<SlotPass>> ranks(block.size());
  for (std::size_t r = 0; r < block.size(); ++r) {
    const VBlockRow& row = block[r];
    std::vector<SlotPass> critical;
    critical.reserve(4 * static_cast<std::size_t>(microbatches));
    for (std::int32_t mb = 0; mb < microbatches; ++mb) {
      const std::int32_t shift = v_block_period * mb;
      critical.push_back({row.forward0 + shift, Op::F, 0, mb});
      critical.push_back({row.forward1 + shift, Op::F, 1, mb});
      critical.push_back({row.backward1 + shift, Op::BI, 1, mb});
      critical.push_back({row.backward0 + shift, Op::BI, 0, mb});
    }
    std::sort(critical.begin(), critical.end(),
              [](const SlotPass& a, const SlotPass& b) { return a.slot < b.slot; });
    std::vector<SlotPass>& out = ranks[r];
    out.reserve(6 * static_cast<std::size_t>(microbatches));
    std::vector<SlotPass> owed;  // BIs whose BW is not placed yet, oldest first
    std::size_t next_owed = 0;
    std::int32_t slot = critical.front().slot;
    for (const SlotPass& pass : critical) {
      for (; slot < pass.slot && next_owed < owed.size(); ++slot) {
        const SlotPass& bi = owed[next_owed++];
        out.push_back({slot, Op::BW, bi.chunk, bi.microbatch});
      }
      slot = pass.slot + 1;
      out.push_back(pass);
      if (pass.op == Op::BI) owed.push_back(pass);
    }
    for (; next_owed < owed.size(); ++slot) {
      const SlotPass& bi = owed[next_owed++];
      out.push_back({slot, Op::BW, bi.chunk, bi.microbatch});
    }
  }
  return ranks;
}

// Moves passes into earlier free slots of their rank where what they need is done by then, in
// slot order over all ranks, without raising the peak: an activation counts from its F to its
// BW, and no rank may come to hold more than the most any rank holds in the repeated block.
// Only the warm-up and the cool-down have free slots (the steady state fills every slot of the
// cycle), so this is the paper's reordering of those two phases. Passes of one kind and chunk
// keep their micro-batch order.
inline void compact_v_slots(std::vector<std::vector<SlotPass>>& ranks) {
  const auto p = static_cast<std::int32_t>(ranks.size());
  if (p == 0 || ranks.front().empty()) return;
  const std::int32_t m = static_cast<std::int32_t>(ranks.front().size() / 6);
  // slot_of[((rank * 6 + kind) * m + mb)], kind: 0 F0, 1 F1, 2 BI1, 3 BI0, 4 BW1, 5 BW0.
  const auto kind_of = [](const SlotPass& a) -> std::int32_t {
    if (a.op == Op::F) return a.chunk == 0 ? 0 : 1;
    if (a.op == Op::BI) return a.chunk == 1 ? 2 : 3;
    return a.chunk == 1 ? 4 : 5;
  };
  std::vector<std::int32_t> slot_of(static_cast<std::size_t>(p) * 6 * static_cast<std::size_t>(m), 0);
  const auto at = [&](std::int32_t rank, std::int32_t kind, std::int32_t mb) -> std::int32_t& {
    return slot_of[(static_cast<std::size_t>(rank) * 6 + static_cast<std::size_t>(kind)) * static_cast<std::size_t>(m) +
                   static_cast<std::size_t>(mb)];
  };
  std::int32_t end = 0;
  for (std::int32_t r = 0; r < p; ++r)
    for (const SlotPass& a : ranks[static_cast<std::size_t>(r)]) {
      at(r, kind_of(a), a.microbatch) = a.slot;
      end = std::max(end, a.slot + 1);
    }
  // Per rank: which slots are taken, and the activations held after each slot's pass.
  std::vector<std::vector<std::int8_t>> taken(static_cast<std::size_t>(p), std::vector<std::int8_t>(static_cast<std::size_t>(end), 0));
  std::vector<std::vector<std::int32_t>> held(static_cast<std::size_t>(p), std::vector<std::int32_t>(static_cast<std::size_t>(end), 0));
  std::int32_t limit = 0;
  for (std::int32_t r = 0; r < p; ++r) {
    auto& h = held[static_cast<std::size_t>(r)];
    for (const SlotPass& a : ranks[static_cast<std::size_t>(r)]) {
      taken[static_cast<std::size_t>(r)][static_cast<std::size_t>(a.slot)] = 1;
      h[static_cast<std::size_t>(a.slot)] += a.op == Op::F ? 1 : (a.op == Op::BW ? -1 : 0);
    }
    for (std::size_t t = 1; t < h.size(); ++t) h[t] += h[t - 1];
    limit = std::max(limit, *std::max_element(h.begin(), h.end()));
  }
  struct Item {
    std::int32_t slot, rank, kind, mb;
  };
  std::vector<Item> order;
  order.reserve(slot_of.size());
  for (std::int32_t r = 0; r < p; ++r)
    for (const SlotPass& a : ranks[static_cast<std::size_t>(r)]) order.push_back({a.slot, r, kind_of(a), a.microbatch});
  std::sort(order.begin(), order.end(), [](const Item& a, const Item& b) {
    return a.slot != b.slot ? a.slot < b.slot : a.rank < b.rank;
  });
  for (const Item& it : order) {
    const std::int32_t r = it.rank, k = it.kind, mb = it.mb;
    std::int32_t ready = -1;  // the latest slot of what this pass needs
    const auto need = [&](std::int32_t rank, std::int32_t kind, std::int32_t b) { ready = std::max(ready, at(rank, kind, b)); };
    if (mb > 0) need(r, k, mb - 1);
    switch (k) {
      case 0: if (r > 0) need(r - 1, 0, mb); break;
      case 1: r + 1 < p ? need(r + 1, 1, mb) : need(r, 0, mb); break;
      case 2: r > 0 ? need(r - 1, 2, mb) : need(r, 1, mb); break;
      case 3: r + 1 < p ? need(r + 1, 3, mb) : need(r, 2, mb); break;
      case 4: need(r, 2, mb); break;
      default: need(r, 3, mb); break;
    }
    const std::int32_t from = it.slot;
    auto& tk = taken[static_cast<std::size_t>(r)];
    auto& h = held[static_cast<std::size_t>(r)];
    for (std::int32_t t = ready + 1; t < from; ++t) {
      if (tk[static_cast<std::size_t>(t)] != 0) continue;
      if (k <= 1 && *std::max_element(h.begin() + t, h.begin() + from) + 1 > limit) continue;
      const std::int32_t delta = k <= 1 ? 1 : (k >= 4 ? -1 : 0);
      for (std::int32_t u = t; u < from; ++u) h[static_cast<std::size_t>(u)] += delta;
      tk[static_cast<std::size_t>(t)] = 1;
      tk[static_cast<std::size_t>(from)] = 0;
      at(r, k, mb) = t;
      break;
    }
  }
  for (std::int32_t r = 0; r < p; ++r) {
    auto& passes = ranks[static_cast<std::size_t>(r)];
    for (SlotPass& a : passes) a.slot = at(r, kind_of(a), a.microbatch);
    std::sort(passes.begin(), passes.end(), [](const SlotPass& a, const SlotPass& b) { return a.slot < b.slot; });
  }
}

}  // namespace detail

// The block-repetition core: the schedule that repeats `block` (one row per rank, p =
// block.size() ranks on the V placement) for r.microbatches micro-batches, with the BWs in the
// free slots of each rank's cycle, oldest BI first. Throws ppsched::error for a request other
// than p = block.size() and v = 2, or a block that is not one (check_v_block's rules).
[[nodiscard]] inline Schedule repeat_v_block(std::string_view name, const ScheduleRequest& r,
                                             std::span<const VBlockRow> block) {
  detail::check_request_sizes(name, r);
  detail::require_chunks(name, r, 2, detail::concat(name, " places two chunks per rank in a V shape"),
                         "for one stage per rank use zb-h1 or zb-h2");
  if (static_cast<std::size_t>(r.ranks) != block.size()) {
    fail({detail::family_subject(name),
          detail::concat("the building block has ", block.size(), " rows for p=", r.ranks, " ranks"),
          detail::concat("request ", to_string(r)), "give one row per rank"});
  }
  detail::check_v_block(name, block);
  const std::int32_t p = r.ranks;
  Schedule s = detail::empty_schedule(name, r, v_shape_placement(p), true, 6 * static_cast<std::size_t>(r.microbatches));
  std::vector<std::vector<detail::SlotPass>> slots = detail::v_block_slots(block, r.microbatches);
  detail::compact_v_slots(slots);
  for (std::int32_t rank = 0; rank < p; ++rank) {
    auto& program = s.programs[static_cast<std::size_t>(rank)];
    for (const detail::SlotPass& pass : slots[static_cast<std::size_t>(rank)])
      program.push_back(detail::compute_action(pass.op, pass.chunk == 0 ? rank : 2 * p - 1 - rank, pass.microbatch));
  }
  return s;
}

// V-Min: any p, m >= 1; v = 2. Peak about 1/3 of 1F1B's activation memory.
[[nodiscard]] inline Schedule make_v_min(const ScheduleRequest& r) {
  detail::check_request_sizes(v_min_name, r);
  return repeat_v_block(v_min_name, r, v_min_block(r.ranks));
}

// V-Half: any p, m >= 1; v = 2. Peak about 1/2 of 1F1B's activation memory.
[[nodiscard]] inline Schedule make_v_half(const ScheduleRequest& r) {
  detail::check_request_sizes(v_half_name, r);
  return repeat_v_block(v_half_name, r, v_half_block(r.ranks));
}

}  // namespace ppsched
