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

}  // namespace ppsched

#include "ppsched/schedule/detail/controllable_memory.hpp"  // the internals below build on the types above

namespace ppsched::inline PPSCHED_MODE {

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
