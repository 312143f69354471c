// Internals of <ppsched/plan/calibrate.hpp>, which includes this file: each layer's measured-
// over-predicted ratios from a fitted cut, and the profile scaled by them. They are in
// ppsched::detail and not part of the API: no example or page uses them, and they may change in
// any release (docs/architecture.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/error.hpp"
#include "ppsched/graph/layer_graph.hpp"
#include "ppsched/graph/profile.hpp"
#include "ppsched/plan/costs.hpp"
#include "ppsched/plan/devices.hpp"
#include "ppsched/plan/model.hpp"
#include "ppsched/sim/calibrate.hpp"
#include "ppsched/trace/timeline.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace detail {

// Each layer's measured-over-predicted ratio per kind (F, B, BI, BW): that of the stage of
// `cut` it ran in (1 for a layer the cut does not hold), indexed as the profile's layers.
[[nodiscard]] inline std::vector<KindScales> layer_scales(const Profile& profile, const Partition& cut,
                                                          const Calibration& fit) {
  using detail::concat;
  if (cut.stages.size() != fit.scale.size()) {
    detail::fail({"calibrated_profile", detail::concat("the cut has ", cut.stages.size(), " stages, the calibration ", fit.scale.size()),
          "cut", "give the cut the calibrated model was made from"});
  }
  std::vector<KindScales> out(profile.graph.size(), KindScales{1.0, 1.0, 1.0, 1.0});
  const std::vector<std::size_t>& order = profile.graph.topological_order();
  for (std::size_t s = 0; s < cut.stages.size(); ++s) {
    for (std::size_t pos = cut.stages[s].begin; pos < cut.stages[s].end && pos < order.size(); ++pos) {
      out[order[pos]] = fit.scale[s];
    }
  }
  return out;
}

// The profile with every layer's times (plain and at each measured size) multiplied by its
// ratios per kind, and the fixed costs per action and per step replaced.
[[nodiscard]] inline Profile scaled_profile(const Profile& profile, const std::vector<KindScales>& scales,
                                            double action_overhead, double step_overhead) {
  std::vector<Layer> layers = profile.graph.layers();
  for (std::size_t i = 0; i < layers.size() && i < scales.size(); ++i) {
    const KindScales& k = scales[i];
    Layer& l = layers[i];
    l.forward *= k[0];
    l.backward_input *= k[2];
    l.backward_weight *= k[3];
    if (l.backward) *l.backward *= k[1];
    for (CostPoint& p : l.points) {
      p.forward *= k[0];
      p.backward_input *= k[2];
      p.backward_weight *= k[3];
      if (p.backward) *p.backward *= k[1];
    }
  }
  Profile out = profile;
  out.graph = LayerGraph(std::move(layers), profile.graph.edges());
  out.fixed_costs.action = action_overhead;
  out.fixed_costs.step = step_overhead;
  return out;
}

}  // namespace detail
}  // namespace ppsched
