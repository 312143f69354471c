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
#include "ppsched/graph/time_unit.hpp"

namespace ppsched::inline PPSCHED_MODE {

struct Profile {
  LayerGraph graph;
  std::vector<Device> devices;  // in pipeline order; empty when the profile names none
  Interconnect link{};
  // The unit every time is in ("ms", "us", ...). None by default, as a profile that names
  // none reads: the planner then prices in its model's own "unit".
  TimeUnit time_unit;
  // Samples per micro-batch the layers' plain costs were measured at; 0 when the profile does
  // not say (the planner then takes DevicePlanOptions::profile_microbatch_size).
  double rows = 0.0;
  // The runtime's fixed costs (per compute action, per transfer, per step, and the slowdown of
  // ranks computing at once), in the time unit, on top of the layers' times; measured by
  // measure_backend_overheads and measure_concurrent_slowdown (runtime/profile.hpp), zero and
  // empty when not measured.
  FixedCosts fixed_costs{};
  // The first stage's input takes no gradient. Where the stages' BI computes only what the input
  // gradient needs (the libtorch adapter's does), the first stage's BI does nothing and its BW
  // runs the whole backward: true prices that stage's BI at 0 and its BW at its layers' B
  // (BI + BW where a layer has no B), as the run does. false (the default): the first stage is
  // priced as every other, right for stage functions whose BW computes only the weight gradients.
  bool first_stage_backward_in_bw = false;

  friend bool operator==(const Profile&, const Profile&) = default;
};

// A layer's costs for a micro-batch of `rows` samples. A layer with measured points is priced
// from them by value_at_rows (each time and byte count on its own; parameters do not depend on
// rows); a layer without is scaled linearly from its costs at `reference_rows`, the rule
// profiles without points have always had.
[[nodiscard]] PPSCHED_OUTLINE Layer layer_at_rows(const Layer& layer, double rows, double reference_rows);

// The profile priced at `rows` samples per micro-batch: every layer through layer_at_rows,
// with the profile's own size (Profile::rows) as the reference when it has one.
[[nodiscard]] PPSCHED_OUTLINE Profile profile_at_rows(const Profile& profile, double rows, double reference_rows = 0.0);

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/graph/impl/profile.ipp"
#endif
