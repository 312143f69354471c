// A profile: what a profiler measured about a model and the machine it will run on — the
// layer graph with its costs, the devices in pipeline order, and the link between them — as
// one value. Reading one from JSON is in profile_json.hpp (which needs nlohmann-json); this
// header is std-only, so code that builds a profile by hand does not pull in a JSON library.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/error.hpp"

#include "ppsched/graph/hardware.hpp"
#include "ppsched/graph/layer_graph.hpp"
#include "ppsched/graph/rows.hpp"

namespace ppsched::inline PPSCHED_MODE {

struct Profile {
  LayerGraph graph;
  std::vector<Device> devices;  // in pipeline order; empty when the profile names none
  Interconnect link{};
  std::string time_unit;        // the unit every time is in ("ms", "us", ...); informational
  // Samples per micro-batch the layers' plain costs were measured at; 0 when the profile does
  // not say (the planner then takes DevicePlanOptions::profile_microbatch_size).
  double rows = 0.0;
  // The runtime's fixed cost of every compute action and of every transfer, in the time unit,
  // on top of the layers' times (CostModel::action_overhead, transfer_overhead); measured by
  // measure_backend_overheads (runtime/profile.hpp), 0 when not measured.
  double action_overhead = 0.0;
  double transfer_overhead = 0.0;
  // ... and of every step, once (CostModel::step_overhead).
  double step_overhead = 0.0;
  // How much slower each compute runs while k ranks compute at once on the host, entry k-1
  // (CostModel::concurrent_slowdown; measure_concurrent_slowdown in runtime/profile.hpp); empty
  // when not measured or when ranks do not share cores.
  std::vector<double> concurrent_slowdown{};

  friend bool operator==(const Profile&, const Profile&) = default;
};

// A layer's costs for a micro-batch of `rows` samples. A layer with measured points is priced
// from them by value_at_rows (each time and byte count on its own; parameters do not depend on
// rows); a layer without is scaled linearly from its costs at `reference_rows`, the rule
// profiles without points have always had.
[[nodiscard]] inline Layer layer_at_rows(const Layer& layer, double rows, double reference_rows) {
  using detail::concat;
  if (!(rows > 0.0 && rows <= std::numeric_limits<double>::max())) {
    fail({"layer_at_rows", concat("rows = ", rows), "rows", "ask for a finite micro-batch of more than 0 rows"});
  }
  Layer out = layer;
  if (layer.points.empty()) {
    if (!(reference_rows > 0.0 && reference_rows <= std::numeric_limits<double>::max())) {
      fail({"layer_at_rows", concat("reference_rows = ", reference_rows, " for layer '", layer.name, "', which has no measured points"),
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

// The profile priced at `rows` samples per micro-batch: every layer through layer_at_rows,
// with the profile's own size (Profile::rows) as the reference when it has one.
[[nodiscard]] inline Profile profile_at_rows(const Profile& profile, double rows, double reference_rows = 0.0) {
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
