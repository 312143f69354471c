// The types of the memory policies (<ppsched/plan/memory_policy.hpp>, whose header comment
// describes what each does to a schedule): MemoryPolicy and its kinds, the MemoryPlan
// apply_memory_policies returns and its options. They sit in a header of their own so that the
// internals in plan/detail/memory_policy.hpp build on them without including the public header
// back.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/error.hpp"
#include "ppsched/schedule/schedule.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace plan {

enum class MemoryPolicyKind : std::uint8_t {
  none,                 // keep every activation until its backward
  full_recompute,       // F keeps only its input; R restores the whole activation
  selective_recompute,  // R restores a part: `fraction` of the activation, or `saved_bytes`
  offload,              // OFFLOAD `fraction` of the activation after F, RELOAD it before B
  // F keeps each layer's input; the backward recomputes one layer, runs its backward and frees
  // it, layer by layer, so R holds one layer's activation (`peak_bytes`) at a time
  layerwise_recompute,
  // layerwise_recompute whose kept layer inputs (the checkpoints) are themselves offloaded:
  // F, OFFLOAD (the checkpoints), RELOAD, R, backward
  layerwise_offload,
};

[[nodiscard]] constexpr std::string_view memory_policy_kind_name(MemoryPolicyKind k) noexcept {
  switch (k) {
    case MemoryPolicyKind::none: return "none";
    case MemoryPolicyKind::full_recompute: return "full recompute";
    case MemoryPolicyKind::selective_recompute: return "selective recompute";
    case MemoryPolicyKind::offload: return "offload";
    case MemoryPolicyKind::layerwise_recompute: return "layer-wise recompute";
    case MemoryPolicyKind::layerwise_offload: return "layer-wise recompute + offloaded checkpoints";
  }
  return "?";
}

struct MemoryPolicy {
  MemoryPolicyKind kind = MemoryPolicyKind::none;
  // selective_recompute and offload: the share of the stage's stored activation recomputed or
  // moved, in [0, 1]. Ignored where `saved_bytes` is given.
  double fraction = 1.0;
  // selective_recompute from a profile's option ("recompute this part: saves X bytes, costs Y"):
  // the bytes R restores (at most the stage's activation_bytes) and R's time. Empty: `fraction`
  // of the activation, and the forward's time in the same share.
  std::optional<double> saved_bytes{};
  std::optional<double> recompute_time{};
  // layerwise_recompute and layerwise_offload: the most held at once while the backward
  // recomputes (the stage's largest single layer's activation); saved_bytes is then the stage's
  // activation less the layers' inputs it keeps (the checkpoints), and recompute_time its
  // forward. layerwise_offload moves the checkpoints, activation_bytes - saved_bytes, to host.
  std::optional<double> peak_bytes{};

  [[nodiscard]] static constexpr MemoryPolicy none() noexcept { return {}; }
  [[nodiscard]] static constexpr MemoryPolicy full_recompute() noexcept {
    return {MemoryPolicyKind::full_recompute, 1.0, std::nullopt, std::nullopt};
  }
  [[nodiscard]] static constexpr MemoryPolicy selective(double fraction) noexcept {
    return {MemoryPolicyKind::selective_recompute, fraction, std::nullopt, std::nullopt};
  }
  [[nodiscard]] static constexpr MemoryPolicy selective_part(double saved_bytes, double recompute_time) noexcept {
    return {MemoryPolicyKind::selective_recompute, 1.0, saved_bytes, recompute_time};
  }
  [[nodiscard]] static constexpr MemoryPolicy offload(double fraction = 1.0) noexcept {
    return {MemoryPolicyKind::offload, fraction, std::nullopt, std::nullopt};
  }
  // From per-layer data (layerwise_recompute_policy derives it from a graph's layers).
  [[nodiscard]] static constexpr MemoryPolicy layerwise(double saved_bytes, double peak_bytes, double recompute_time) noexcept {
    return {MemoryPolicyKind::layerwise_recompute, 1.0, saved_bytes, recompute_time, peak_bytes};
  }
  // Layer-wise recomputation with its checkpoints offloaded between F and R (the same data).
  [[nodiscard]] static constexpr MemoryPolicy layerwise_offload(double saved_bytes, double peak_bytes,
                                                                double recompute_time) noexcept {
    return {MemoryPolicyKind::layerwise_offload, 1.0, saved_bytes, recompute_time, peak_bytes};
  }
  // The layer-wise policy's twin with its checkpoints offloaded (layerwise_recompute ->
  // layerwise_offload); any other policy as it is.
  [[nodiscard]] constexpr MemoryPolicy with_offloaded_checkpoints() const noexcept {
    MemoryPolicy p = *this;
    if (p.kind == MemoryPolicyKind::layerwise_recompute) p.kind = MemoryPolicyKind::layerwise_offload;
    return p;
  }
  [[nodiscard]] constexpr bool layerwise() const noexcept {
    return kind == MemoryPolicyKind::layerwise_recompute || kind == MemoryPolicyKind::layerwise_offload;
  }

  [[nodiscard]] constexpr bool recomputes() const noexcept {
    return kind == MemoryPolicyKind::full_recompute || kind == MemoryPolicyKind::selective_recompute ||
           layerwise();
  }
  [[nodiscard]] constexpr bool offloads() const noexcept {
    return kind == MemoryPolicyKind::offload || kind == MemoryPolicyKind::layerwise_offload;
  }

  friend bool operator==(const MemoryPolicy&, const MemoryPolicy&) = default;
};

// "none", "full recompute", "selective recompute 25%", "selective recompute 1.5e+08 B",
// "offload 50%": how reports name a stage's policy.
[[nodiscard]] inline std::string to_string(const MemoryPolicy& p) {
  std::string s{memory_policy_kind_name(p.kind)};
  if (p.layerwise()) return s;
  if (p.kind == MemoryPolicyKind::selective_recompute && p.saved_bytes) return s + detail::concat(" ", *p.saved_bytes, " B");
  if (p.kind == MemoryPolicyKind::selective_recompute || p.kind == MemoryPolicyKind::offload) {
    s += detail::concat(" ", std::round(p.fraction * 1000.0) / 10.0, "%");
  }
  return s;
}

// A schedule with its memory actions and the cost model that prices them.
struct MemoryPlan {
  Schedule schedule;
  CostModel costs;
  std::vector<MemoryPolicy> policies;  // one per stage
};

struct MemoryPolicyOptions {
  // Place R into idle gaps of the compute stream before its backward when one fits it
  // (false: always right before the backward).
  bool recompute_into_idle = true;
  // How many other backwards an R may move ahead of (see apply_memory_policies): each one the
  // restored activation is held beside one more stored activation.
  std::int32_t max_backwards_crossed = 1;
  // RELOAD is issued so that this many copies' time ends before the backward would start: 2
  // allows for one OFFLOAD queued ahead of it on the copy lane.
  double reload_lead_copies = 2.0;
  // Offload only the micro-batches whose forward ends at least reload_lead_copies + 1 copies'
  // time before their backward starts: the others (the last stage's, whose B follows its F)
  // are held briefly anyway, and their copies could not hide behind compute.
  bool offload_only_where_hidden = true;
};

}  // namespace plan
}  // namespace ppsched
