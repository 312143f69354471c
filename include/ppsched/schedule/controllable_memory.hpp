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
// reference implementation orders the same block differently (vblock::reorder, below); the
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
#include "ppsched/schedule/detail/controllable_memory.hpp"
#include "ppsched/schedule/v_block.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {  // the canonical names; users read them from family_info(name).name
inline constexpr std::string_view v_half_name = "v-half";
inline constexpr std::string_view v_min_name = "v-min";
}  // namespace detail
namespace vblock {

// V-Min's block: F of chunk 0 one slot after the rank before, everything else as tight as the
// dependencies allow; two more slots at the turn of the backward when 3 divides p (otherwise
// BI of chunk 1 on a rank would share its slot of the cycle with that rank's F of chunk 0).
[[nodiscard]] PPSCHED_OUTLINE std::vector<Row> v_min(std::int32_t ranks);

// V-Half's block: F of chunk 0 and BI of chunk 1 two slots after the rank before, the rest
// tight; three more slots at the turn of the backward when p is even.
[[nodiscard]] PPSCHED_OUTLINE std::vector<Row> v_half(std::int32_t ranks);

}  // namespace vblock
namespace detail {

// The request and block checks vblock::repeat and vblock::reorder share.
PPSCHED_OUTLINE void check_v_block_request(std::string_view name, const ScheduleRequest& r, std::span<const vblock::Row> block);

}  // namespace detail
namespace vblock {

// The block-repetition core: the schedule that repeats `block` (one row per rank, p =
// block.size() ranks on the V placement) for r.microbatches micro-batches, with the BWs in the
// free slots of each rank's cycle, oldest BI first. Throws ppsched::error for a request other
// than p = block.size() and v = 2, or a block that is not one (check_v_block's rules).
[[nodiscard]] PPSCHED_OUTLINE Schedule repeat(std::string_view name, const ScheduleRequest& r,
                                             std::span<const Row> block);

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
// r.microbatches micro-batches; same requests and errors as repeat.
[[nodiscard]] PPSCHED_OUTLINE Schedule reorder(std::string_view name, const ScheduleRequest& r,
                                              std::span<const Row> block);

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

struct Shape {
  std::int32_t forward_spacing = 1;   // f, slots between consecutive ranks' F of chunk 0
  std::int32_t backward_spacing = 1;  // b, slots between consecutive ranks' BI of chunk 1
  std::int32_t turn_gap = 0;          // g, free slots at rank 0 between F and BI of chunk 1

  friend constexpr bool operator==(const Shape&, const Shape&) = default;
};

// The ranges candidates spans: f and b 1..3 (spacings past 3 hold about as much as ZB-V,
// which the search has as a family), g 0..5 (the cycle has 6 slots: a gap of 6 repeats one of 0).
inline constexpr std::int32_t max_spacing = 3;
inline constexpr std::int32_t max_turn_gap = period - 1;

// "v-block(f=2,b=1,gap=3)": the name a block candidate carries in the search.
[[nodiscard]] PPSCHED_OUTLINE std::string name_of(const Shape& shape);

// The block of `shape` for p ranks (see above), or an empty block when no turn on the last rank
// makes it valid or p < 1. Throws ppsched::error for a spacing below 1 or a negative gap.
[[nodiscard]] PPSCHED_OUTLINE std::vector<Row> of_shape(std::int32_t ranks, const Shape& shape);

// One candidate block: its parameters, its name and its rows.
struct Candidate {
  Shape shape;
  std::string name;  // name_of(shape)
  std::vector<Row> block;
};

// The valid blocks of the shapes f, b in 1..max_spacing and g in 0..max_turn_gap
// for p ranks, each block once (the first shape that makes it; at p = 1 every f and b make the
// same block), in the order f, b, g. Includes V-Min's and V-Half's blocks. Empty for p < 1.
[[nodiscard]] PPSCHED_OUTLINE std::vector<Candidate> candidates(std::int32_t ranks);
}  // namespace vblock

namespace detail {

// The step of a compute-only V schedule (split backward) when every pass takes one unit and
// communication is free: each rank runs its program in order, a pass once what it needs is
// done. Infinity when the order cannot run.
[[nodiscard]] PPSCHED_OUTLINE double v_unit_step(const Schedule& s);

// The family's schedule of `block`: compact_v_grid's order or the reference's (vblock::reorder),
// whichever is shorter with one unit a pass (the paper's setting); compact_v_grid's on a tie.
// Both keep to the block's peak. Neither is shorter for every cost: the search (plan/search)
// builds both and times them with the model's costs.
[[nodiscard]] PPSCHED_OUTLINE Schedule v_family_schedule(std::string_view name, const ScheduleRequest& r,
                                                std::span<const vblock::Row> block);

}  // namespace detail

namespace detail {

// What make_v_min and make_v_half refuse in a request (FamilyInfo::problem), or nothing: the
// sizes, then the V's two chunks, as check_v_block_request words them.
[[nodiscard]] PPSCHED_OUTLINE std::optional<error_context> v_family_problem(std::string_view name, const ScheduleRequest& r);
[[nodiscard]] PPSCHED_OUTLINE std::optional<error_context> v_min_problem(const ScheduleRequest& r);
[[nodiscard]] PPSCHED_OUTLINE std::optional<error_context> v_half_problem(const ScheduleRequest& r);

}  // namespace detail

// V-Min: any p, m >= 1; v = 2. Peak about 1/3 of 1F1B's activation memory.
[[nodiscard]] PPSCHED_OUTLINE Schedule make_v_min(const ScheduleRequest& r);

// V-Half: any p, m >= 1; v = 2. Peak about 1/2 of 1F1B's activation memory.
[[nodiscard]] PPSCHED_OUTLINE Schedule make_v_half(const ScheduleRequest& r);

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/schedule/impl/controllable_memory.ipp"
#endif
