// The bodies of <ppsched/validate/detail/memory.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

// (Pairs: count overlapped pairs forward first; a separate instance keeps the common walk lean.)
template <bool Pairs>
void measure_memory_walk_of(const FlatSchedule& flat, const ActivationSizes& sizes, const StageFractions& fractions,
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
  // Sizes that do not depend on the micro-batch, once per stage: the walk then reads them as it
  // reads the fractions.
  std::vector<double> stage_size;
  if (sizes.microbatch_stride == 0) {
    stage_size.reserve(static_cast<std::size_t>(flat.stages));
    for (std::int32_t s = 0; s < flat.stages; ++s) stage_size.push_back(sizes(s, 0));
  }
  const bool per_stage = sizes.microbatch_stride == 0;
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
      const double size = per_stage ? stage_size[st] : sizes(a.stage, a.microbatch);
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

PPSCHED_OUTLINE void measure_memory_walk(const FlatSchedule& flat, const ActivationSizes& sizes,
                                         const StageFractions& fractions, ValidationReport& report, bool pairs) {
  if (pairs) {
    measure_memory_walk_of<true>(flat, sizes, fractions, report);
  } else {
    measure_memory_walk_of<false>(flat, sizes, fractions, report);
  }
}

PPSCHED_OUTLINE void measure_memory(const FlatSchedule& flat, const ActivationSizes& sizes,
                                    const StageFractions& fractions, ValidationReport& report) {
  report.memory.assign(static_cast<std::size_t>(flat.ranks), RankMemory{});
  report.stage_peak_in_flight.assign(static_cast<std::size_t>(flat.stages), 0);
  if (!flat.has_backward) return;
  measure_memory_walk(flat, sizes, fractions, report, flat.has_pairs);
}

PPSCHED_OUTLINE void check_memory_options(const ValidateOptions& options, std::int32_t stages) {
  if (!options.memory.activation_bytes.empty() &&
      options.memory.activation_bytes.size() != static_cast<std::size_t>(stages)) {
    detail::fail({"validate options", detail::concat("MemoryModel::activation_bytes has ", options.memory.activation_bytes.size(),
                                     " entries for a schedule of ", stages, " stages"),
          "", "give one size per stage, or none"});
  }
  for (const auto& [name, v] : {std::pair<const char*, const std::vector<double>*>{"recompute_fraction", &options.memory.recompute_fraction},
                                {"offload_fraction", &options.memory.offload_fraction},
                                {"recompute_peak_fraction", &options.memory.recompute_peak_fraction}}) {
    if (!v->empty() && v->size() != static_cast<std::size_t>(stages)) {
      detail::fail({"validate options", detail::concat("MemoryModel::", name, " has ", v->size(), " entries for a schedule of ", stages, " stages"),
            "", "give one fraction per stage, or none (all of the activation)"});
    }
    for (std::size_t s = 0; s < v->size(); ++s) {
      if (!((*v)[s] >= 0.0 && (*v)[s] <= 1.0)) {
        detail::fail({"validate options", detail::concat("MemoryModel::", name, "[", s, "] = ", (*v)[s], " is outside [0, 1]"), "",
              "give the share of the stage's stored activation, from 0 to 1"});
      }
    }
  }
  const std::vector<double>& w = options.memory.stage_weight_fraction;
  if (!w.empty() && w.size() != static_cast<std::size_t>(stages)) {
    detail::fail({"validate options", detail::concat("MemoryModel::stage_weight_fraction has ", w.size(), " entries for a schedule of ", stages, " stages"),
          "", "give one fraction per stage, or none (weight_fraction for every stage)"});
  }
  for (std::size_t s = 0; s <= w.size(); ++s) {
    const double v = s < w.size() ? w[s] : options.memory.weight_fraction;
    if (!(v >= 0.0 && v <= std::numeric_limits<double>::max())) {
      detail::fail({"validate options",
            s < w.size() ? detail::concat("MemoryModel::stage_weight_fraction[", s, "] = ", v, " is negative or not finite")
                         : detail::concat("MemoryModel::weight_fraction = ", v, " is negative or not finite"),
            "", weight_memory_fraction_hint});
    }
  }
}

}  // namespace detail
}  // namespace ppsched
