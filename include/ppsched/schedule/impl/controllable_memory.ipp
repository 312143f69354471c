// The bodies of <ppsched/schedule/controllable_memory.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace vblock {

[[nodiscard]] PPSCHED_OUTLINE std::vector<Row> v_min(std::int32_t ranks) {
  std::vector<Row> block;
  if (ranks < 1) return block;
  const std::int32_t p = ranks, gap = p % 3 == 0 ? 2 : 0;
  block.reserve(static_cast<std::size_t>(p));
  for (std::int32_t r = 0; r < p; ++r) block.push_back({r, 2 * p - 1 - r, 2 * p + gap + r, 4 * p + gap - 1 - r});
  return block;
}

[[nodiscard]] PPSCHED_OUTLINE std::vector<Row> v_half(std::int32_t ranks) {
  std::vector<Row> block;
  if (ranks < 1) return block;
  const std::int32_t p = ranks, gap = p % 2 == 0 ? 3 : 0;
  block.reserve(static_cast<std::size_t>(p));
  for (std::int32_t r = 0; r < p; ++r)
    block.push_back({2 * r, 3 * p - 2 - r, 3 * p + gap + 2 * r - 1, 6 * p + gap - 2 - r});
  return block;
}

}  // namespace vblock
}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

PPSCHED_OUTLINE void check_v_block_request(std::string_view name, const ScheduleRequest& r, std::span<const vblock::Row> block) {
  check_request_sizes(name, r);
  require_chunks(name, r, 2, detail::concat(name, " places two chunks per rank in a V shape"),
                         "for one stage per rank use zb-h1 or zb-h2");
  if (static_cast<std::size_t>(r.ranks) != block.size()) {
    detail::fail({family_subject(name),
          detail::concat("the building block has ", block.size(), " rows for p=", r.ranks, " ranks"),
          detail::concat("request ", to_string(r)), "give one row per rank"});
  }
  check_v_block(name, block);
  // Every slot up to the last BW is a 32-bit slot of the grid: the block's latest slot, 6 more
  // per micro-batch and the 2m BWs that may follow must stay in range.
  std::int64_t latest = 0;
  for (const vblock::Row& row : block) latest = std::max<std::int64_t>({latest, row.forward0, row.forward1, row.backward1, row.backward0});
  if (latest + 8 * std::int64_t{r.microbatches} > std::numeric_limits<std::int32_t>::max()) {
    detail::fail({family_subject(name),
          detail::concat("the building block's latest slot ", latest, " leaves no room for m=", r.microbatches,
                         " micro-batches of 6 slots"),
          detail::concat("request ", to_string(r)), "start the block near slot 0, one slot per pass"});
  }
}

}  // namespace detail
}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {
namespace vblock {

[[nodiscard]] PPSCHED_OUTLINE Schedule repeat(std::string_view name, const ScheduleRequest& r,
                                             std::span<const Row> block) {
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

[[nodiscard]] PPSCHED_OUTLINE Schedule reorder(std::string_view name, const ScheduleRequest& r,
                                              std::span<const Row> block) {
  detail::check_v_block_request(name, r, block);
  const std::int32_t p = r.ranks, m = r.microbatches;
  Schedule s = detail::empty_schedule(name, r, v_shape_placement(p), true, 6 * static_cast<std::size_t>(m));
  std::vector<detail::VKindSlots> ranks(static_cast<std::size_t>(p));
  for (std::size_t rank = 0; rank < ranks.size(); ++rank) {
    const Row& row = block[rank];
    ranks[rank].resize(4);
    const std::array<std::int32_t, 4> first{row.forward0, row.forward1, row.backward1, row.backward0};
    for (std::size_t k = 0; k < 4; ++k)
      for (std::int32_t mb = 0; mb < m; ++mb) ranks[rank][k].push_back(first[k] + period * mb);
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

[[nodiscard]] PPSCHED_OUTLINE std::string name_of(const Shape& shape) {
  return detail::concat("v-block(f=", shape.forward_spacing, ",b=", shape.backward_spacing, ",gap=", shape.turn_gap,
                        ")");
}

[[nodiscard]] PPSCHED_OUTLINE std::vector<Row> of_shape(std::int32_t ranks, const Shape& shape) {
  if (shape.forward_spacing < 1 || shape.backward_spacing < 1 || shape.turn_gap < 0) {
    detail::fail({"V building block", detail::concat("spacings f=", shape.forward_spacing, ", b=", shape.backward_spacing,
                                             " and turn gap ", shape.turn_gap),
          "vblock::Shape", "give spacings of at least 1 slot and a gap of at least 0"});
  }
  std::vector<Row> block;
  if (ranks < 1) return block;
  const std::int64_t p = ranks, f = shape.forward_spacing, b = shape.backward_spacing, g = shape.turn_gap;
  // The last slot the block can reach (turn of 6 included) must be a 32-bit slot.
  const std::int64_t forward1_first = f * (p - 1) + 1 + (p - 1);
  const std::int64_t backward1_first = forward1_first + 1 + g;
  if (backward1_first + b * (p - 1) + period + (p - 1) > std::numeric_limits<std::int32_t>::max()) {
    detail::fail({"V building block", detail::concat("p=", ranks, " ranks with f=", f, ", b=", b, ", gap=", g),
          "vblock::Shape", "the block's slots exceed 32 bits: use fewer ranks or smaller spacings"});
  }
  block.resize(static_cast<std::size_t>(ranks));
  for (std::int64_t r = 0; r < p; ++r) {
    Row& row = block[static_cast<std::size_t>(r)];
    row.forward0 = static_cast<std::int32_t>(f * r);
    row.forward1 = static_cast<std::int32_t>(forward1_first - r);
    row.backward1 = static_cast<std::int32_t>(backward1_first + b * r);
  }
  const std::int32_t last_backward1 = block.back().backward1;
  for (std::int32_t turn = 1; turn <= period; ++turn) {
    for (std::int32_t r = 0; r < ranks; ++r) block[static_cast<std::size_t>(r)].backward0 = last_backward1 + turn + (ranks - 1 - r);
    std::int32_t at = 0;
    if (detail::v_block_problem(block, at).empty()) return block;
  }
  block.clear();
  return block;
}

[[nodiscard]] PPSCHED_OUTLINE std::vector<Candidate> candidates(std::int32_t ranks) {
  std::vector<Candidate> out;
  if (ranks < 1) return out;
  for (std::int32_t f = 1; f <= max_spacing; ++f) {
    for (std::int32_t b = 1; b <= max_spacing; ++b) {
      for (std::int32_t g = 0; g <= max_turn_gap; ++g) {
        const Shape shape{f, b, g};
        std::vector<Row> block = of_shape(ranks, shape);
        if (block.empty()) continue;
        const bool seen = std::any_of(out.begin(), out.end(), [&](const Candidate& c) { return c.block == block; });
        if (!seen) out.push_back({shape, name_of(shape), std::move(block)});
      }
    }
  }
  return out;
}

}  // namespace vblock
}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

[[nodiscard]] PPSCHED_OUTLINE double v_unit_step(const Schedule& s) {
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

[[nodiscard]] PPSCHED_OUTLINE Schedule v_family_schedule(std::string_view name, const ScheduleRequest& r,
                                                std::span<const vblock::Row> block) {
  Schedule compacted = vblock::repeat(name, r, block);
  Schedule reordered = vblock::reorder(name, r, block);
  return v_unit_step(reordered) < v_unit_step(compacted) ? reordered : compacted;
}

[[nodiscard]] PPSCHED_OUTLINE std::optional<error_context> v_family_problem(std::string_view name, const ScheduleRequest& r) {
  return sizes_and_chunks_problem(name, r, 2, detail::concat(name, " places two chunks per rank in a V shape"),
                                  "for one stage per rank use zb-h1 or zb-h2");
}

[[nodiscard]] PPSCHED_OUTLINE std::optional<error_context> v_min_problem(const ScheduleRequest& r) {
  return v_family_problem(detail::v_min_name, r);
}

[[nodiscard]] PPSCHED_OUTLINE std::optional<error_context> v_half_problem(const ScheduleRequest& r) {
  return v_family_problem(detail::v_half_name, r);
}

}  // namespace detail
}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE Schedule make_v_min(const ScheduleRequest& r) {
  if (auto problem = detail::v_min_problem(r)) detail::fail(*problem);
  return detail::v_family_schedule(detail::v_min_name, r, vblock::v_min(r.ranks));
}

[[nodiscard]] PPSCHED_OUTLINE Schedule make_v_half(const ScheduleRequest& r) {
  if (auto problem = detail::v_half_problem(r)) detail::fail(*problem);
  return detail::v_family_schedule(detail::v_half_name, r, vblock::v_half(r.ranks));
}

}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

[[nodiscard]] PPSCHED_OUTLINE std::string v_block_problem(std::span<const vblock::Row> block, std::int32_t& rank) {
  const auto p = static_cast<std::int32_t>(block.size());
  for (std::int32_t r = 0; r < p; ++r) {
    rank = r;
    const vblock::Row& row = block[static_cast<std::size_t>(r)];
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
        if (cycle[i] == cycle[j]) return detail::concat("two passes share slot ", cycle[i], " of the 6-slot cycle");
  }
  return {};
}

PPSCHED_OUTLINE void check_v_block(std::string_view family, std::span<const vblock::Row> block) {
  std::int32_t rank = 0;
  std::string problem = v_block_problem(block, rank);
  if (!problem.empty()) {
    detail::fail({family_subject(family), std::move(problem), detail::concat("building block, rank ", rank),
          "give every rank its four slots with each pass after what it needs and distinct slots modulo 6"});
  }
}

[[nodiscard]] PPSCHED_OUTLINE VSlotGrid v_block_grid(std::span<const vblock::Row> block, std::int32_t microbatches) {
  VSlotGrid g;
  g.ranks = block.size();
  g.microbatches = static_cast<std::size_t>(microbatches);
  const std::size_t p = g.ranks, m = g.microbatches;
  const auto last_critical = [&](const vblock::Row& row) {
    return static_cast<std::size_t>(std::max({row.forward0, row.forward1, row.backward1, row.backward0})) +
           static_cast<std::size_t>(vblock::period) * (m - 1);
  };
  // After its last critical pass a rank runs at most its 2m BWs, one per slot.
  for (const vblock::Row& row : block) g.lane = std::max(g.lane, last_critical(row) + 1 + 2 * m);
  g.pass.assign(p * g.lane, v_free_slot);
  g.slot_of.resize(p * 6 * m);
  std::vector<std::int32_t> owed;  // a rank's BIs whose BW is not placed yet, oldest first
  owed.reserve(2 * m);
  for (std::size_t r = 0; r < p; ++r) {
    const vblock::Row& row = block[r];
    std::int32_t* lane = g.pass.data() + r * g.lane;
    const std::array<std::int32_t, 4> first_slot{row.forward0, row.forward1, row.backward1, row.backward0};
    for (std::int32_t kind = 0; kind < 4; ++kind)
      for (std::size_t mb = 0; mb < m; ++mb)
        lane[static_cast<std::size_t>(first_slot[static_cast<std::size_t>(kind)]) + vblock::period * mb] =
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

[[nodiscard]] PPSCHED_OUTLINE std::int32_t first_free_slot(const std::uint64_t* taken, std::int32_t from,
                                                  std::int32_t to) noexcept {
  while (from < to) {
    const std::uint64_t free = ~taken[from >> 6] >> (from & 63);
    if (free != 0) return std::min(to, from + static_cast<std::int32_t>(std::countr_zero(free)));
    from = (from | 63) + 1;
  }
  return to;
}

[[nodiscard]] PPSCHED_OUTLINE std::int32_t last_taken_slot(const std::uint64_t* taken, std::int32_t lowest,
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

PPSCHED_OUTLINE void compact_v_grid(VSlotGrid& g) {
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

[[nodiscard]] PPSCHED_OUTLINE std::int32_t last_slot_of(const VKindSlots& rank) noexcept {
  std::int32_t last = -1;
  for (const auto& kind : rank)
    if (!kind.empty()) last = std::max(last, kind.back());
  return last;
}

[[nodiscard]] PPSCHED_OUTLINE std::vector<std::int8_t> v_kind_lane(const VKindSlots& rank, std::size_t kinds) {
  std::vector<std::int8_t> lane(static_cast<std::size_t>(last_slot_of(rank) + 1), -1);
  for (std::size_t k = 0; k < kinds; ++k)
    for (const std::int32_t slot : rank[k]) lane[static_cast<std::size_t>(slot)] = static_cast<std::int8_t>(k);
  return lane;
}

PPSCHED_OUTLINE void place_v_weights(VKindSlots& rank, bool per_chunk) {
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

[[nodiscard]] PPSCHED_OUTLINE std::vector<VPassRef> v_visit_order(const std::vector<VKindSlots>& ranks) {
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

[[nodiscard]] PPSCHED_OUTLINE std::int32_t kth_of_two(const std::vector<std::int32_t>& a, const std::vector<std::int32_t>& b,
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

PPSCHED_OUTLINE void squeeze_v_slots(std::vector<VKindSlots>& ranks) {
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

[[nodiscard]] PPSCHED_OUTLINE std::int32_t v_earliest_slot(const std::vector<VKindSlots>& ranks, const VPassRef& e) {
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

PPSCHED_OUTLINE void reorder_v_round_with_weights(std::vector<VKindSlots>& ranks, std::int32_t microbatches) {
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

[[nodiscard]] PPSCHED_OUTLINE std::int32_t v_peak_from(const std::vector<std::int8_t>& lane, std::size_t from,
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

PPSCHED_OUTLINE void reorder_v_round_implied_weights(std::vector<VKindSlots>& ranks, std::int32_t microbatches) {
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
