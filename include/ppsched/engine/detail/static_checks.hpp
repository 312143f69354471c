// The checks that do not need the programs to run (shape, ranges, placement, completeness,
// orders within one rank, pairs, groups, the bookkeeping of communication), made while the
// flat index is built. lower checks its compute-only input with them, validate reports what
// they find, simulate refuses a schedule they fault; each gets the same index back.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/engine/detail/flat_schedule.hpp"
#include "ppsched/engine/problems.hpp"
#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/schedule.hpp"

namespace ppsched::inline PPSCHED_MODE::detail {

// The per-action part of static_checks for a schedule without problems: fills the index
// (owner, rank_begin but its last entry, rank_actions, slots and the flags) and returns
// true, or returns false at the first action the full loop would report.
[[nodiscard]] inline bool index_clean_programs(const std::vector<const std::vector<Action>*>& programs,
                                               bool split_backward, FlatSchedule& flat) noexcept {
  const auto S = static_cast<std::uint32_t>(flat.stages), M = static_cast<std::uint32_t>(flat.microbatches);
  const std::int32_t* const placement = flat.placement.data();
  std::int32_t* const slots = flat.slots.data();
  std::int32_t* const owner = flat.owner.data();
  bool has_backward = false, lowered = false, has_pairs = false, has_memory = false, has_copies = false;
  std::size_t compute_count = 0;
  std::int32_t index = 0;
  for (std::size_t r = 0; r < programs.size(); ++r) {
    const auto rank = static_cast<std::int32_t>(r);
    flat.rank_begin[r] = index;
    flat.rank_actions[r] = programs[r]->data();
    for (const Action& a : *programs[r]) {
      owner[static_cast<std::size_t>(index)] = rank;
      if (static_cast<std::uint32_t>(a.stage) >= S || static_cast<std::uint32_t>(a.microbatch) >= M) return false;
      const std::int32_t home = placement[static_cast<std::size_t>(a.stage)];
      if (home != rank) return false;
      if (is_compute(a.op)) {
        has_pairs = has_pairs || a.group != 0;
        if (a.op != Op::F) {
          if (a.op != Op::B && !split_backward) return false;
          has_backward = true;
        }
        ++compute_count;
      } else if (is_memory(a.op)) {
        if (a.group != 0) return false;
        has_memory = true;
        has_copies = has_copies || is_copy(a.op);
        ++compute_count;
      } else {
        const std::int32_t peer_stage = (a.op == Op::SEND_F || a.op == Op::RECV_B) ? a.stage + 1 : a.stage - 1;
        if (static_cast<std::uint32_t>(peer_stage) >= S || placement[static_cast<std::size_t>(peer_stage)] == home) return false;
        lowered = true;
      }
      std::int32_t& slot = slots[flat.slot_index(a.op, a.stage, a.microbatch)];
      if (slot != no_action) return false;
      slot = index++;
    }
  }
  flat.has_backward = has_backward;
  flat.lowered = lowered;
  flat.has_pairs = has_pairs;
  flat.has_memory = has_memory;
  flat.has_copies = has_copies;
  flat.compute_count = compute_count;
  return true;
}

// True when the completeness and order checks of static_checks have nothing to report.
// Called only once the per-action checks found nothing, so every action sits on its
// stage's rank and "on the same rank" is a property of the two stages.
[[nodiscard]] inline bool table_consistent(const FlatSchedule& flat) noexcept {
  const std::int32_t S = flat.stages, M = flat.microbatches;
  const bool backward = flat.has_backward, lowered = flat.lowered;
  const std::int32_t* const slots = flat.slots.data();
  constexpr auto F = static_cast<std::size_t>(Op::F), B = static_cast<std::size_t>(Op::B);
  constexpr auto BI = static_cast<std::size_t>(Op::BI), BW = static_cast<std::size_t>(Op::BW);
  constexpr auto SEND_F = static_cast<std::size_t>(Op::SEND_F), RECV_F = static_cast<std::size_t>(Op::RECV_F);
  constexpr auto SEND_B = static_cast<std::size_t>(Op::SEND_B), RECV_B = static_cast<std::size_t>(Op::RECV_B);
  for (std::int32_t st = 0; st < S; ++st) {
    const bool has_next = st + 1 < S;
    const bool next_local = has_next && flat.rank_of(st + 1) == flat.rank_of(st);
    const bool next_remote = has_next && !next_local;
    for (std::int32_t mb = 0; mb < M; ++mb) {
      const std::int32_t* const line = slots + flat.slot_index(Op::F, st, mb);
      const std::int32_t* const next = has_next ? slots + flat.slot_index(Op::F, st + 1, mb) : nullptr;
      const std::int32_t f = line[F];
      if (f == no_action) return false;
      std::int32_t bin = no_action;
      if (backward) {
        const std::int32_t b = line[B], bi = line[BI], bw = line[BW];
        if (b != no_action ? (bi != no_action || bw != no_action) : (bi == no_action || bw == no_action)) return false;
        bin = b != no_action ? b : bi;
        if (bin < f) return false;
        if (bi != no_action && bw < bi) return false;
      }
      if (flat.has_memory) {
        // F -> R -> B/BI, F -> OFFLOAD -> RELOAD -> B/BI, or both: F -> OFFLOAD -> RELOAD -> R ->
        // B/BI (the checkpoints of a recomputation offloaded).
        constexpr auto R = static_cast<std::size_t>(Op::R);
        constexpr auto OFFLOAD = static_cast<std::size_t>(Op::OFFLOAD), RELOAD = static_cast<std::size_t>(Op::RELOAD);
        const std::int32_t r = line[R], off = line[OFFLOAD], rel = line[RELOAD];
        if (r != no_action || off != no_action || rel != no_action) {
          if (bin == no_action) return false;
          if ((off == no_action) != (rel == no_action)) return false;
          if (r != no_action && !((off != no_action ? rel : f) < r && r < bin)) return false;
          if (off != no_action && !(f < off && off < rel && rel < bin)) return false;
        }
      }
      if (next_local) {
        if (next[F] != no_action && next[F] < f) return false;
        const std::int32_t bin_next = next[B] != no_action ? next[B] : next[BI];
        if (bin != no_action && bin_next != no_action && bin < bin_next) return false;
      }
      if (!lowered) continue;
      const std::int32_t recv_f = line[RECV_F], send_f = line[SEND_F], recv_b = line[RECV_B], send_b = line[SEND_B];
      if (recv_f != no_action && f < recv_f) return false;
      if (send_f != no_action && send_f < f) return false;
      if (bin != no_action && recv_b != no_action && bin < recv_b) return false;
      if (bin != no_action && send_b != no_action && send_b < bin) return false;
      if (next_remote) {
        if (send_f == no_action || next[RECV_F] == no_action) return false;
        if (backward && (next[SEND_B] == no_action || recv_b == no_action)) return false;
      }
    }
  }
  return true;
}

// Overlapped pairs (docs/execution-model.md): each run of consecutive actions sharing a group
// that holds a compute action must be two compute actions, one F and one B or BI, of two
// micro-batches. Any backward of a micro-batch needs every forward of it (through the loss),
// so a pair of one micro-batch could never start. A run whose id recurs elsewhere on the rank
// is left to the contiguity check, which names both places.
inline void check_pairs(const FlatSchedule& flat, ProblemSink& sink) {
  for (std::int32_t r = 0; r < flat.ranks; ++r) {
    const std::int32_t count = flat.rank_begin[static_cast<std::size_t>(r) + 1] - flat.rank_begin[static_cast<std::size_t>(r)];
    const Action* prog = flat.rank_actions[static_cast<std::size_t>(r)];
    for (std::int32_t i = 0; i < count;) {
      const std::uint32_t g = prog[i].group;
      std::int32_t j = i + 1;
      while (j < count && g != 0 && prog[j].group == g) ++j;
      const std::int32_t first = i, size = j - i;
      i = j;
      if (g == 0) continue;
      std::int32_t computes = 0;
      for (std::int32_t k = first; k < first + size; ++k) computes += is_compute(prog[k].op) ? 1 : 0;
      if (computes == 0) continue;
      const Action& a = prog[first];
      if (computes != size) {
        std::int32_t c = first;
        while (!is_compute(prog[c].op)) ++c;
        sink.add(ProblemKind::group_mixed, r, c, prog[c],
                 concat(to_string(prog[c]), " at ", at_rank(r, c), " shares group ", g,
                        " with communication actions next to it; a group is either an overlapped pair of two compute "
                        "actions or communication posted together: give the pair its own id"));
        continue;
      }
      if (size != 2) {
        if (size == 1) {
          bool recurs = false;
          for (std::int32_t k = 0; k < count && !recurs; ++k) recurs = k != first && prog[k].group == g;
          if (recurs) continue;
        }
        sink.add(ProblemKind::pair_size, r, first, a,
                 concat("group ", g, " at ", at_rank(r, first), " holds ", size, " compute action",
                        size == 1 ? "" : "s", " (", to_string(a), size == 1 ? "" : ", ...",
                        "); a compute group is an overlapped pair of exactly two adjacent actions: ",
                        size == 1 ? "set its group to 0 or put its partner next to it" : "split it into pairs"));
        continue;
      }
      const Action& b = prog[first + 1];
      const auto backward = [](Op op) { return op == Op::B || op == Op::BI; };
      if (!((a.op == Op::F && backward(b.op)) || (backward(a.op) && b.op == Op::F))) {
        sink.add(ProblemKind::pair_ops, r, first, a,
                 concat("the pair ", to_string(a), " and ", to_string(b), " at ", at_rank(r, first),
                        " is not one forward and one backward (B or BI); only an F and a backward overlap: set "
                        "their group to 0"));
        continue;
      }
      if (a.microbatch == b.microbatch) {
        sink.add(ProblemKind::pair_dependent, r, first, a,
                 concat("the pair ", to_string(a), " and ", to_string(b), " at ", at_rank(r, first),
                        " is of one micro-batch, whose backward needs that forward's result (through the loss), "
                        "so the pair could never start; pair the forward with another micro-batch's backward"));
      }
    }
  }
}

// Memory actions (docs/execution-model.md, "Memory actions"): per (stage, micro-batch),
// F -> R -> B/BI, F -> OFFLOAD -> RELOAD -> B/BI, or F -> OFFLOAD -> RELOAD -> R -> B/BI (a
// recomputation whose checkpoints are offloaded) on the stage's rank, in program order. A
// duplicate (a second R) is reported by the duplicate check, a missing F by completeness, an
// action on the wrong rank by the per-action checks.
inline void check_memory_actions(const FlatSchedule& flat, ProblemSink& sink) {
  const auto describe = [&](std::int32_t x) {
    return concat(to_string(flat.at(x)), " (", at_rank(flat.owner[static_cast<std::size_t>(x)], flat.position(x)), ")");
  };
  const auto place = [&](std::int32_t x, ProblemKind kind, const std::string& message) {
    sink.add(kind, flat.owner[static_cast<std::size_t>(x)], flat.position(x), flat.at(x), message);
  };
  const auto same_rank = [&](std::int32_t x, std::int32_t y) {
    return x != no_action && y != no_action && flat.owner[static_cast<std::size_t>(x)] == flat.owner[static_cast<std::size_t>(y)];
  };
  // `early` must come before `late` in the rank's program.
  const auto order = [&](std::int32_t early, std::int32_t late, const char* why) {
    if (!same_rank(early, late) || early < late) return;
    place(late, ProblemKind::memory_order,
          concat(describe(late), " comes before ", describe(early), ", but ", why, "; move ", to_string(flat.at(late)),
                 " after ", to_string(flat.at(early))));
  };
  for (std::int32_t st = 0; st < flat.stages; ++st) {
    for (std::int32_t mb = 0; mb < flat.microbatches; ++mb) {
      const std::int32_t r = flat.find(Op::R, st, mb), off = flat.find(Op::OFFLOAD, st, mb);
      const std::int32_t rel = flat.find(Op::RELOAD, st, mb);
      if (r == no_action && off == no_action && rel == no_action) continue;
      const std::int32_t f = flat.find(Op::F, st, mb), bin = flat.backward_input(st, mb);
      const std::int32_t any = r != no_action ? r : (off != no_action ? off : rel);
      if (bin == no_action) {
        place(any, ProblemKind::memory_unmatched,
              concat(describe(any), " keeps an activation for a backward, but micro-batch ", mb, " on stage ", st,
                     " has no B or BI in this schedule; remove it (a forward-only step stores nothing)"));
        continue;
      }
      if (off != no_action && rel == no_action) {
        place(off, ProblemKind::memory_unmatched,
              concat(describe(off), " moves the activation to host memory, but nothing brings it back: add ",
                     to_string(Action{Op::RELOAD, st, mb, 0}), " before ", to_string(flat.at(bin))));
        continue;
      }
      if (rel != no_action && off == no_action) {
        place(rel, ProblemKind::memory_unmatched,
              concat(describe(rel), " brings back an activation that was never offloaded: add ",
                     to_string(Action{Op::OFFLOAD, st, mb, 0}), " after ", to_string(Action{Op::F, st, mb, 0}),
                     ", or remove it"));
        continue;
      }
      if (r != no_action && off != no_action) {
        // The checkpoints R recomputes from are offloaded: they must be back before R.
        order(f, off, "OFFLOAD copies the checkpoints F keeps");
        order(off, rel, "RELOAD brings back what OFFLOAD moved to host memory");
        order(rel, r, "R recomputes from the checkpoints RELOAD brings back");
        order(r, bin, "the backward needs the activation R restores");
      } else if (r != no_action) {
        order(f, r, "R re-runs the forward from the input that F keeps");
        order(r, bin, "the backward needs the activation R restores");
      } else {
        order(f, off, "OFFLOAD copies the activation F stores");
        order(off, rel, "RELOAD brings back what OFFLOAD moved to host memory");
        order(rel, bin, "the backward needs the activation RELOAD brings back");
      }
    }
  }
}

// Checks that do not need the programs to run: shape, ranges, placement, completeness,
// orders within one rank, communication bookkeeping. Builds `flat` as it goes; returns
// false when the shape itself is unusable (nothing else could be checked).
// `skip_comm`: index the compute actions only (a dependency-only run). `proven`: `s` is a
// LoweredSchedule that lower() wrote (lower/lower.hpp), whose checks its construction has
// proven: it is only indexed.
PPSCHED_OUTLINE bool static_checks(const Schedule& s, FlatSchedule& flat, ProblemSink& sink, bool skip_comm = false,
                          bool proven = false);

}  // namespace ppsched::detail

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/engine/impl/static_checks.ipp"
#endif
