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

// The size of one stored activation of (stage, micro-batch), read from a table the caller fills
// once: entry stage x stage_stride + micro-batch x microbatch_stride (per stage: strides 1 and 0;
// per (stage, micro-batch), stage-major: M and 1; none: every size 0). A table rather than a
// callable, so that the walks below are compiled once whatever prices the activations.
inline constexpr double no_activation_bytes = 0.0;
struct ActivationSizes {
  const double* table = &no_activation_bytes;
  std::size_t stage_stride = 0;
  std::size_t microbatch_stride = 0;

  [[nodiscard]] double operator()(std::int32_t stage, std::int32_t mb) const noexcept {
    return table[static_cast<std::size_t>(stage) * stage_stride + static_cast<std::size_t>(mb) * microbatch_stride];
  }
};

// Each stage's MemoryFractions under a memory model (which the caller keeps alive while the walk
// runs).
struct StageFractions {
  const MemoryModel* model;

  [[nodiscard]] MemoryFractions operator()(std::int32_t stage) const noexcept {
    const MemoryModel& m = *model;
    const auto st = static_cast<std::size_t>(stage);
    const double rf = m.recompute_fraction.empty() ? 1.0 : m.recompute_fraction[st];
    return MemoryFractions{rf, m.offload_fraction.empty() ? 1.0 : m.offload_fraction[st],
                           m.recompute_peak_fraction.empty() ? rf : m.recompute_peak_fraction[st],
                           m.stage_weight_fraction.empty() ? m.weight_fraction : m.stage_weight_fraction[st]};
  }
};

// Peak activation memory per rank. Memory on a rank changes only at its compute actions,
// which run in program order on one stream, so the peak is a property of the order alone.
// An overlapped pair holds its forward's new activation while its backward still holds the
// one it frees, so the pair's forward counts first whatever the order of the two (`pairs`;
// false: every action counts in its written order).
// A forward-only schedule stores nothing for a backward.
// `sizes(stage, mb)` is the size of one stored activation; `fractions(stage)` what share of
// it R restores and OFFLOAD moves (MemoryFractions). The memory actions count where they stand
// in the program, as if each copy ended where it is issued: simulate() times the copy lane.
PPSCHED_OUTLINE void measure_memory_walk(const FlatSchedule& flat, const ActivationSizes& sizes,
                                         const StageFractions& fractions, ValidationReport& report, bool pairs);

// The walk into `report` (memory and stage_peak_in_flight, sized here), pairs counted
// forward first.
PPSCHED_OUTLINE void measure_memory(const FlatSchedule& flat, const ActivationSizes& sizes,
                                    const StageFractions& fractions, ValidationReport& report);

// Each stage's MemoryFractions under `m` (which the caller keeps alive while the walk runs).
[[nodiscard]] inline StageFractions stage_fractions(const MemoryModel& m) noexcept { return StageFractions{&m}; }

PPSCHED_OUTLINE void check_memory_options(const ValidateOptions& options, std::int32_t stages);

// The per-stage sizes of `options` (which the caller keeps alive while the walk runs); none: 0.
[[nodiscard]] inline ActivationSizes stage_sizes(const ValidateOptions& options) noexcept {
  const std::vector<double>& sizes = options.memory.activation_bytes;
  return sizes.empty() ? ActivationSizes{} : ActivationSizes{sizes.data(), 1, 0};
}

}  // namespace detail

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/validate/impl/detail_memory.ipp"
#endif
