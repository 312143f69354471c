// A profile: what a profiler measured about a model and the machine it will run on — the
// layer graph with its costs, the devices in pipeline order, and the link between them — as
// one value. Reading one from JSON is in profile_json.hpp (which needs nlohmann-json); this
// header is std-only, so code that builds a profile by hand does not pull in a JSON library.
#pragma once

#include "ppsched/config.hpp"

#include <string>
#include <vector>

#include "ppsched/graph/hardware.hpp"
#include "ppsched/graph/layer_graph.hpp"

namespace ppsched::inline PPSCHED_MODE {

struct Profile {
  LayerGraph graph;
  std::vector<Device> devices;  // in pipeline order; empty when the profile names none
  Interconnect link{};
  std::string time_unit;        // the unit every time is in ("ms", "us", ...); informational

  friend bool operator==(const Profile&, const Profile&) = default;
};

}  // namespace ppsched
