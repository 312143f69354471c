// Reading and writing profiles as JSON (the format is in docs/profile-format.md). This is the
// one graph header that needs nlohmann-json, which is why the umbrella header leaves it out:
// include it on purpose. A profile that cannot be read is rejected with a ppsched::error
// naming the file, the place (line and column for malformed JSON, a path such as
// "layers[3].forward" for a bad field) and what was expected there.
#pragma once

#include "ppsched/config.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/graph/hardware.hpp"
#include "ppsched/graph/layer_graph.hpp"
#include "ppsched/graph/profile.hpp"
#include "ppsched/graph/text_input.hpp"
#include "ppsched/graph/detail/profile_json.hpp"

namespace ppsched::inline PPSCHED_MODE {

// Parses a profile from JSON text; `source` names it in error messages (a path, "stdin", ...).
[[nodiscard]] inline Profile parse_profile(std::string_view text, std::string_view source = "<string>") {
  return detail::ProfileReader(source).read(text);
}

// Reads a profile from a JSON file (or a FIFO or device), at most `max_bytes` of it.
[[nodiscard]] inline Profile load_profile(const std::filesystem::path& path, std::size_t max_bytes = max_profile_bytes) {
  const std::string text = detail::read_text_file(path, max_bytes, detail::concat("profile '", path.string(), "'"));
  return parse_profile(text, path.string());
}

// The profile as JSON that parse_profile reads back to an equal Profile. Defaults (a chain's
// edges, an absent cap or bandwidth) are left out.
[[nodiscard]] inline std::string profile_to_json(const Profile& p, int indent = 2) {
  nlohmann::json doc = nlohmann::json::object();
  if (!p.time_unit.empty()) doc["unit"] = p.time_unit.text();
  if (p.rows != 0.0) doc["rows"] = p.rows;
  if (p.fixed_costs.action != 0.0) doc["action_overhead"] = p.fixed_costs.action;
  if (p.fixed_costs.transfer != 0.0) doc["transfer_overhead"] = p.fixed_costs.transfer;
  if (p.fixed_costs.step != 0.0) doc["step_overhead"] = p.fixed_costs.step;
  if (!p.fixed_costs.concurrent_slowdown.empty()) doc["concurrent_slowdown"] = p.fixed_costs.concurrent_slowdown;
  if (p.first_stage_backward_in_bw) doc["first_stage_backward_in_bw"] = true;
  nlohmann::json layers = nlohmann::json::array();
  for (const Layer& l : p.graph.layers()) {
    nlohmann::json layer = {{"name", l.name},
                            {"forward", l.forward},
                            {"backward_input", l.backward_input},
                            {"backward_weight", l.backward_weight},
                            {"param_bytes", l.param_bytes},
                            {"activation_bytes", l.activation_bytes},
                            {"output_bytes", l.output_bytes}};
    if (l.backward) layer["backward"] = *l.backward;
    if (l.recompute_saves_bytes) layer["recompute_saves_bytes"] = *l.recompute_saves_bytes;
    if (l.recompute_time) layer["recompute_time"] = *l.recompute_time;
    if (l.weight_bytes) layer["weight_bytes"] = *l.weight_bytes;
    if (l.boundary_bytes) layer["boundary_bytes"] = *l.boundary_bytes;
    if (l.boundary_weight_bytes) layer["boundary_weight_bytes"] = *l.boundary_weight_bytes;
    if (l.optimizer_step != 0.0) layer["optimizer_step"] = l.optimizer_step;
    if (!l.points.empty()) {
      nlohmann::json points = nlohmann::json::array();
      for (const CostPoint& q : l.points) {
        nlohmann::json point = {{"rows", q.rows},
                                {"forward", q.forward},
                                {"backward_input", q.backward_input},
                                {"backward_weight", q.backward_weight},
                                {"activation_bytes", q.activation_bytes},
                                {"output_bytes", q.output_bytes}};
        if (q.backward) point["backward"] = *q.backward;
        if (q.weight_bytes) point["weight_bytes"] = *q.weight_bytes;
        if (q.boundary_bytes) point["boundary_bytes"] = *q.boundary_bytes;
        if (q.boundary_weight_bytes) point["boundary_weight_bytes"] = *q.boundary_weight_bytes;
        if (q.spread != 0.0) point["spread"] = q.spread;
        points.push_back(std::move(point));
      }
      layer["points"] = std::move(points);
    }
    layers.push_back(std::move(layer));
  }
  doc["layers"] = std::move(layers);
  if (!p.graph.is_chain()) {
    nlohmann::json edges = nlohmann::json::array();
    for (const Edge& e : p.graph.edges()) edges.push_back({e.from, e.to});
    doc["edges"] = std::move(edges);
  }
  if (!p.devices.empty()) {
    nlohmann::json devices = nlohmann::json::array();
    for (const Device& d : p.devices) {
      nlohmann::json dev = {{"speed", d.speed}};
      if (d.memory_bytes != std::numeric_limits<double>::infinity()) dev["memory_bytes"] = d.memory_bytes;
      devices.push_back(std::move(dev));
    }
    doc["devices"] = std::move(devices);
  }
  if (!(p.link == Interconnect{})) {
    nlohmann::json link = {{"latency", p.link.latency}};
    if (p.link.bandwidth != std::numeric_limits<double>::infinity()) link["bandwidth"] = p.link.bandwidth;
    doc["link"] = std::move(link);
  }
  return doc.dump(indent);
}

}  // namespace ppsched
