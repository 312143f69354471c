// The bodies of <ppsched/graph/profile.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE Layer layer_at_rows(const Layer& layer, double rows, double reference_rows) {
  using detail::concat;
  if (!(rows > 0.0 && rows <= std::numeric_limits<double>::max())) {
    detail::fail({"layer_at_rows", detail::concat("rows = ", rows), "rows", "ask for a finite micro-batch of more than 0 rows"});
  }
  Layer out = layer;
  if (layer.points.empty()) {
    if (!(reference_rows > 0.0 && reference_rows <= std::numeric_limits<double>::max())) {
      detail::fail({"layer_at_rows", detail::concat("reference_rows = ", reference_rows, " for layer '", layer.name, "', which has no measured points"),
            "reference_rows", "give the micro-batch size the layer's costs were measured at (Profile::rows)"});
    }
    const double k = rows / reference_rows;
    out.forward *= k;
    out.backward_input *= k;
    out.backward_weight *= k;
    if (out.backward) *out.backward *= k;
    out.activation_bytes *= k;
    out.output_bytes *= k;
    if (out.weight_bytes) *out.weight_bytes *= k;
    if (out.boundary_bytes) *out.boundary_bytes *= k;
    if (out.boundary_weight_bytes) *out.boundary_weight_bytes *= k;
    return out;
  }
  std::vector<RowsValue> v(layer.points.size());
  const auto at = [&](auto field) {
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = {layer.points[i].rows, field(layer.points[i])};
    return value_at_rows(v, rows);
  };
  out.forward = at([](const CostPoint& p) { return p.forward; });
  out.backward_input = at([](const CostPoint& p) { return p.backward_input; });
  out.backward_weight = at([](const CostPoint& p) { return p.backward_weight; });
  out.backward = layer.points.front().backward
                     ? std::optional<double>(at([](const CostPoint& p) { return p.backward.value_or(0.0); }))
                     : std::nullopt;
  out.activation_bytes = at([](const CostPoint& p) { return p.activation_bytes; });
  out.output_bytes = at([](const CostPoint& p) { return p.output_bytes; });
  if (layer.points.front().weight_bytes) out.weight_bytes = at([](const CostPoint& p) { return p.weight_bytes.value_or(0.0); });
  // Extrapolated apart, the two lines may cross: a cut never lets go of more than the layer keeps.
  if (layer.points.front().boundary_bytes) {
    out.boundary_bytes = std::min(out.activation_bytes, at([](const CostPoint& p) { return p.boundary_bytes.value_or(0.0); }));
  }
  if (layer.points.front().boundary_weight_bytes && out.weight_bytes) {
    out.boundary_weight_bytes =
        std::min(*out.weight_bytes, at([](const CostPoint& p) { return p.boundary_weight_bytes.value_or(0.0); }));
  }
  return out;
}

[[nodiscard]] PPSCHED_OUTLINE Profile profile_at_rows(const Profile& profile, double rows, double reference_rows) {
  std::vector<Layer> layers;
  layers.reserve(profile.graph.size());
  const double reference = profile.rows > 0.0 ? profile.rows : reference_rows;
  for (const Layer& l : profile.graph.layers()) layers.push_back(layer_at_rows(l, rows, reference));
  Profile out = profile;
  out.graph = LayerGraph(std::move(layers), profile.graph.edges());
  out.rows = rows;
  return out;
}

}  // namespace ppsched
