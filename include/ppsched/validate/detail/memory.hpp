// Internals of <ppsched/validate/memory.hpp>, which includes this file: the memory walk of a
// schedule: what share of a stage's activation R restores, OFFLOAD moves and BI keeps for BW, and
// the peak per rank. They are in ppsched::detail and not part of the API: no example or page uses
// them, and they may change in any release (docs/architecture.md).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/engine/detail/flat_schedule.hpp"
#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/validate/report.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

// What share of a stage's stored activation R restores, OFFLOAD moves and BI keeps for BW.
struct MemoryFractions {
  double recompute = 1.0;
  double offload = 1.0;
  // What R holds at once: `recompute` (all it restores), or less under layer-wise
  // recomputation (StageCost::recompute_peak_bytes), whose backward restores the rest one
  // layer at a time.
  double recompute_peak = 1.0;
  double weight = 0.5;  // M_W / M_B of this stage (MemoryModel::stage_weight_fraction)

  [[nodiscard]] constexpr bool layerwise() const noexcept { return recompute_peak < recompute; }
  // The share R adds. Layer-wise with a split backward: BI, while it recomputes layer by layer,
  // keeps for BW the weight-gradient share `w` of every layer, so R counts it up front (an
  // upper bound on BI's peak: the layers' inputs, one recomputed layer, and w of the whole).
  [[nodiscard]] constexpr double restored(bool split) const noexcept {
    return layerwise() ? recompute_peak + (split ? weight : 0.0) : recompute;
  }
  // The share a micro-batch holds from R until its backward frees it: exactly 1 (all of it)
  // unless layer-wise.
  [[nodiscard]] constexpr double held(bool recomputed, bool split) const noexcept {
    return recomputed && layerwise() ? (1.0 - recompute) + restored(split) : 1.0;
  }
  // The share OFFLOAD moves and RELOAD brings back: `offload` of the activation, or, on a
  // micro-batch that R recomputes, what F kept for R (its checkpoints), at most.
  [[nodiscard]] constexpr double moved(bool recomputed) const noexcept {
    return recomputed ? std::min(offload, 1.0 - recompute) : offload;
  }
};

// Peak activation memory per rank. Memory on a rank changes only at its compute actions,
// which run in program order on one stream, so the peak is a property of the order alone.
// An overlapped pair holds its forward's new activation while its backward still holds the
// one it frees, so the pair's forward counts first whatever the order of the two.
// A forward-only schedule stores nothing for a backward.
// `bytes_of(stage, mb)` is the size of one stored activation; `fractions(stage)` what share of
// it R restores and OFFLOAD moves (MemoryFractions). The memory actions count where they stand
// in the program, as if each copy ended where it is issued: simulate() times the copy lane.
// (Pairs: the schedule has overlapped pairs; a separate instance keeps the common walk lean.)
template <bool Pairs, class BytesOf, class Fractions>
void measure_memory_walk(const FlatSchedule& flat, const BytesOf& bytes_of, const Fractions& fractions,
                         ValidationReport& report) {
  std::vector<std::int32_t> stage_now(static_cast<std::size_t>(flat.stages), 0);
  // M_B (validate/report.hpp): a stored activation of a stage weighs 1 / (stages on its rank).
  std::vector<double> weight(static_cast<std::size_t>(flat.stages), 1.0);
  if (flat.placement.size() == static_cast<std::size_t>(flat.stages)) {
    std::vector<std::int32_t> per_rank(static_cast<std::size_t>(flat.ranks), 0);
    for (const std::int32_t home : flat.placement) ++per_rank[static_cast<std::size_t>(home)];
    for (std::size_t st = 0; st < weight.size(); ++st) {
      weight[st] = 1.0 / per_rank[static_cast<std::size_t>(flat.placement[st])];
    }
  }
  // (stage, micro-batch) pairs with an R: their F keeps only what R does not restore; and
  // those with a BI (what layer-wise recomputation counts differently). Read from the programs
  // alone: the walk runs on a FlatSchedule whose identity table may not be built.
  std::vector<bool> recomputed, split;
  const auto cell = [&flat](const Action& a) {
    return static_cast<std::size_t>(a.stage) * static_cast<std::size_t>(flat.microbatches) + static_cast<std::size_t>(a.microbatch);
  };
  for (std::int32_t r = 0; r < flat.ranks; ++r) {
    const Action* const prog = flat.rank_actions[static_cast<std::size_t>(r)];
    const std::int32_t count = flat.rank_begin[static_cast<std::size_t>(r) + 1] - flat.rank_begin[static_cast<std::size_t>(r)];
    for (std::int32_t k = 0; k < count; ++k) {
      const Action& a = prog[k];
      if (a.op != Op::R || a.stage < 0 || a.stage >= flat.stages || a.microbatch < 0 || a.microbatch >= flat.microbatches)
        continue;
      if (recomputed.empty()) recomputed.assign(static_cast<std::size_t>(flat.stages) * static_cast<std::size_t>(flat.microbatches), false);
      recomputed[cell(a)] = true;
    }
  }
  if (!recomputed.empty()) {
    split.assign(recomputed.size(), false);
    for (std::int32_t r = 0; r < flat.ranks; ++r) {
      const Action* const prog = flat.rank_actions[static_cast<std::size_t>(r)];
      const std::int32_t count = flat.rank_begin[static_cast<std::size_t>(r) + 1] - flat.rank_begin[static_cast<std::size_t>(r)];
      for (std::int32_t k = 0; k < count; ++k) {
        const Action& a = prog[k];
        if (a.op == Op::BI && a.stage >= 0 && a.stage < flat.stages && a.microbatch >= 0 && a.microbatch < flat.microbatches)
          split[cell(a)] = true;
      }
    }
  }
  const auto is_recomputed = [&](const Action& a) { return !recomputed.empty() && recomputed[cell(a)]; };
  // Once per stage rather than per action: the walk is a fifth of validate() at p = 64.
  std::vector<MemoryFractions> stage_fraction;
  stage_fraction.reserve(static_cast<std::size_t>(flat.stages));
  for (std::int32_t s = 0; s < flat.stages; ++s) stage_fraction.push_back(fractions(s));
  for (std::int32_t r = 0; r < flat.ranks; ++r) {
    double units = 0.0, peak_units = 0.0, b = 0.0, peak_b = 0.0, mb = 0.0, peak_mb = 0.0;
    std::int32_t in_flight = 0, peak_in_flight = 0;
    const Action* const prog = flat.rank_actions[static_cast<std::size_t>(r)];
    const std::int32_t count = flat.rank_begin[static_cast<std::size_t>(r) + 1] - flat.rank_begin[static_cast<std::size_t>(r)];
    // Adds share x (one activation) to the three counts.
    const auto add = [&](double share, std::size_t st, double size) {
      units += share;
      b += share * size;
      mb += share * weight[st];
    };
    for (std::int32_t k = 0; k < count; ++k) {
      std::int32_t at = k;
      if constexpr (Pairs) {
        if (prog[k].group != 0 && is_compute(prog[k].op)) {
          // In a pair written backward first, visit its forward first (and the backward next).
          const bool first_of_pair = k + 1 < count && prog[k + 1].group == prog[k].group && is_compute(prog[k + 1].op);
          const bool second_of_pair = k > 0 && prog[k - 1].group == prog[k].group && is_compute(prog[k - 1].op);
          if (first_of_pair && prog[k].op != Op::F && prog[k + 1].op == Op::F) at = k + 1;
          if (second_of_pair && prog[k].op == Op::F && prog[k - 1].op != Op::F) at = k - 1;
        }
      }
      const Action& a = prog[at];
      if (is_comm(a.op) || a.stage < 0 || a.stage >= flat.stages) continue;
      const auto st = static_cast<std::size_t>(a.stage);
      if (a.microbatch < 0 || a.microbatch >= flat.microbatches) continue;
      const double size = bytes_of(a.stage, a.microbatch);
      const MemoryFractions& f = stage_fraction[st];
      // Layer-wise recomputation depends on whether the backward is split (MemoryFractions).
      const bool split_here = !split.empty() && split[cell(a)];
      switch (a.op) {
        case Op::F:
          add(is_recomputed(a) ? 1.0 - f.recompute : 1.0, st, size);
          ++in_flight;
          report.stage_peak_in_flight[st] = std::max(report.stage_peak_in_flight[st], ++stage_now[st]);
          break;
        case Op::B:
          add(-f.held(is_recomputed(a), false), st, size);
          --in_flight;
          --stage_now[st];
          break;
        case Op::BI:
          add(-(f.held(is_recomputed(a), split_here) - f.weight), st, size);
          --in_flight;
          --stage_now[st];
          break;
        case Op::BW: add(-f.weight, st, size); break;
        case Op::R: add(f.restored(split_here), st, size); break;
        case Op::OFFLOAD: add(-f.moved(is_recomputed(a)), st, size); break;
        case Op::RELOAD: add(f.moved(is_recomputed(a)), st, size); break;
        case Op::SEND_F:
        case Op::RECV_F:
        case Op::SEND_B:
        case Op::RECV_B: break;
      }
      peak_units = std::max(peak_units, units);
      peak_b = std::max(peak_b, b);
      peak_mb = std::max(peak_mb, mb);
      peak_in_flight = std::max(peak_in_flight, in_flight);
    }
    report.memory[static_cast<std::size_t>(r)] = RankMemory{peak_units, peak_b, peak_in_flight, peak_mb};
  }
}

template <class BytesOf, class Fractions>
void measure_memory(const FlatSchedule& flat, const BytesOf& bytes_of, const Fractions& fractions, ValidationReport& report) {
  report.memory.assign(static_cast<std::size_t>(flat.ranks), RankMemory{});
  report.stage_peak_in_flight.assign(static_cast<std::size_t>(flat.stages), 0);
  if (!flat.has_backward) return;
  if (flat.has_pairs) {
    measure_memory_walk<true>(flat, bytes_of, fractions, report);
  } else {
    measure_memory_walk<false>(flat, bytes_of, fractions, report);
  }
}

// Each stage's MemoryFractions under `m` (which the caller keeps alive while the walk runs).
[[nodiscard]] inline auto stage_fractions(const MemoryModel& m) {
  return [&m](std::int32_t stage) {
    const auto st = static_cast<std::size_t>(stage);
    const double rf = m.recompute_fraction.empty() ? 1.0 : m.recompute_fraction[st];
    return MemoryFractions{rf, m.offload_fraction.empty() ? 1.0 : m.offload_fraction[st],
                           m.recompute_peak_fraction.empty() ? rf : m.recompute_peak_fraction[st],
                           m.stage_weight_fraction.empty() ? m.weight_fraction : m.stage_weight_fraction[st]};
  };
}

PPSCHED_OUTLINE void check_memory_options(const ValidateOptions& options, std::int32_t stages);

[[nodiscard]] inline auto stage_sizes(const ValidateOptions& options) {
  return [&sizes = options.memory.activation_bytes](std::int32_t stage, std::int32_t) {
    return sizes.empty() ? 0.0 : sizes[static_cast<std::size_t>(stage)];
  };
}

}  // namespace detail

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/validate/impl/detail_memory.ipp"
#endif
