// Internals of <ppsched/graph/profile_json.hpp>, which includes this file: the reader that turns
// one JSON document into a Profile, naming the source and the place in every error. They are in
// ppsched::detail and not part of the API: no example or page uses them, and they may change in
// any release (docs/architecture.md).
#pragma once

#include <cmath>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/error.hpp"
#include "ppsched/graph/hardware.hpp"
#include "ppsched/graph/layer_graph.hpp"
#include "ppsched/graph/profile.hpp"
#include "ppsched/graph/text_input.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

// Reads one JSON document as a profile, naming `source` in every error.
class ProfileReader {
 public:
  explicit ProfileReader(std::string_view source) : subject_(detail::concat("profile '", source, "'")) {}

  [[nodiscard]] Profile read(std::string_view text) const {
    const nlohmann::json doc = parse(text);
    expect_type(doc, nlohmann::json::value_t::object, "the document", "an object with a \"layers\" array");
    check_keys(doc, "", {"unit", "rows", "action_overhead", "transfer_overhead", "step_overhead", "concurrent_slowdown", "first_stage_backward_in_bw", "layers", "edges", "devices", "link"});
    Profile p;
    if (const auto* unit = member(doc, "unit")) {
      expect_type(*unit, nlohmann::json::value_t::string, "unit", "a string such as \"ms\"");
      p.time_unit = unit->get<std::string>();
    }
    p.rows = number(doc, "rows", "", 0.0, [](double x) { return x > 0.0; }, "the samples per micro-batch measured, > 0");
    p.fixed_costs.action = non_negative(doc, "action_overhead", "", 0.0);
    p.fixed_costs.transfer = non_negative(doc, "transfer_overhead", "", 0.0);
    p.fixed_costs.step = non_negative(doc, "step_overhead", "", 0.0);
    if (const auto* slowdown = member(doc, "concurrent_slowdown")) {
      expect_type(*slowdown, nlohmann::json::value_t::array, "concurrent_slowdown",
                  "an array of factors >= 1, one per count of ranks computing at once (1, 2, ...)");
      for (std::size_t i = 0; i < slowdown->size(); ++i) {
        const nlohmann::json& x = (*slowdown)[i];
        const std::string where = detail::concat("concurrent_slowdown[", i, "]");
        if (!x.is_number() || !(x.get<double>() >= 1.0) || !std::isfinite(x.get<double>())) {
          detail::fail({subject_, detail::concat(where, " is ", x.dump()), where,
                "give how many times longer a compute takes while that many ranks compute at once: a finite number >= 1"});
        }
        p.fixed_costs.concurrent_slowdown.push_back(x.get<double>());
      }
    }
    if (const auto* whole = member(doc, "first_stage_backward_in_bw")) {
      expect_type(*whole, nlohmann::json::value_t::boolean, "first_stage_backward_in_bw", "true or false");
      p.first_stage_backward_in_bw = whole->get<bool>();
    }
    const nlohmann::json* layers = member(doc, "layers");
    if (layers == nullptr) {
      detail::fail({subject_, "there is no \"layers\" array", "the document", "add \"layers\": [{\"name\": ..., \"forward\": ...}, ...]"});
    }
    std::vector<Layer> list = read_layers(*layers);
    const nlohmann::json* edges = member(doc, "edges");
    std::vector<Edge> edge_list;
    if (edges != nullptr) edge_list = read_edges(*edges, list.size());
    try {
      p.graph = edges == nullptr ? LayerGraph(std::move(list)) : LayerGraph(std::move(list), std::move(edge_list));
    } catch (const error& e) {
      throw error(detail::concat(subject_, ": ", e.what()));
    }
    if (const auto* devices = member(doc, "devices")) p.devices = read_devices(*devices);
    if (const auto* link = member(doc, "link")) p.link = read_link(*link);
    return p;
  }

 private:
  [[nodiscard]] nlohmann::json parse(std::string_view text) const {
    try {
      return nlohmann::json::parse(text.begin(), text.end());
    } catch (const nlohmann::json::parse_error& e) {
      detail::fail({subject_, detail::concat("is not valid JSON: ", after_position(e.what())), position(text, e.byte),
            "fix the JSON syntax there (a missing comma, quote or bracket is the usual cause)"});
    } catch (const nlohmann::json::exception& e) {
      // Number overflow and the like carry no position; find the offending literal instead.
      const std::string what = e.what();
      std::string where;
      const auto open = what.find('\''), close = what.rfind('\'');
      if (open != std::string::npos && close > open) {
        const auto at = text.find(what.substr(open + 1, close - open - 1));
        if (at != std::string_view::npos) where = position(text, at + 1);
      }
      detail::fail({subject_, detail::concat("cannot be read: ", strip_exception_id(what)), where,
            "numbers must fit in a double (at most about 1.8e308)"});
    }
  }

  // "line 3, column 14" for the 1-based byte offset nlohmann reports.
  [[nodiscard]] static std::string position(std::string_view text, std::size_t byte) {
    std::size_t line = 1, column = 1;
    for (std::size_t i = 0; i + 1 < byte && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    return detail::concat("line ", line, ", column ", column);
  }
  [[nodiscard]] static std::string strip_exception_id(const std::string& what) {
    const auto close = what.find("] ");
    return close == std::string::npos ? what : what.substr(close + 2);
  }
  // nlohmann's message after "parse error at line L, column C: ".
  [[nodiscard]] static std::string after_position(const std::string& what) {
    const std::string rest = strip_exception_id(what);
    const auto colon = rest.find(": ");
    return colon == std::string::npos ? rest : rest.substr(colon + 2);
  }

  [[nodiscard]] static const nlohmann::json* member(const nlohmann::json& object, const char* key) {
    const auto it = object.find(key);
    return it == object.end() ? nullptr : &*it;
  }

  [[nodiscard]] static std::string describe(const nlohmann::json& v) {
    if (v.is_number()) return detail::concat("the number ", v.dump());
    if (v.is_string()) return detail::concat("the string ", v.dump());
    const std::string type = v.type_name();
    return detail::concat(type.find_first_of("aeiou") == 0 ? "an " : "a ", type);
  }

  void expect_type(const nlohmann::json& v, nlohmann::json::value_t type, const std::string& path,
                   const std::string& expected) const {
    if (v.type() == type) return;
    detail::fail({subject_, detail::concat("expected ", expected, ", got ", describe(v)), path, detail::concat("write ", expected, " there")});
  }

  // Unknown keys are rejected, so a misspelt field is never silently left at its default.
  void check_keys(const nlohmann::json& object, const std::string& path, std::initializer_list<const char*> known) const {
    for (auto it = object.begin(); it != object.end(); ++it) {
      const std::string& key = it.key();
      bool ok = false;
      std::string closest;
      std::size_t closest_distance = std::numeric_limits<std::size_t>::max();
      std::string list;
      for (const char* k : known) {
        ok = ok || key == k;
        const std::size_t d = edit_distance(key, k);
        if (d < closest_distance) {
          closest_distance = d;
          closest = k;
        }
        list += detail::concat(list.empty() ? "" : ", ", '"', k, '"');
      }
      if (ok) continue;
      const std::string where = path.empty() ? key : detail::concat(path, '.', key);
      detail::fail({subject_, detail::concat("unknown field \"", key, "\""), where,
            closest_distance <= 2 ? detail::concat("did you mean \"", closest, "\"?") : detail::concat("the fields here are ", list)});
    }
  }

  // A number field: absent gives `fallback` (nullopt means required); present must be a
  // finite number passing `ok`.
  template <class Ok>
  [[nodiscard]] double number(const nlohmann::json& object, const char* key, const std::string& path,
                              std::optional<double> fallback, Ok ok, const char* expected) const {
    const nlohmann::json* v = member(object, key);
    const std::string where = path.empty() ? std::string(key) : detail::concat(path, '.', key);
    if (v == nullptr) {
      if (fallback) return *fallback;
      detail::fail({subject_, detail::concat("the required field \"", key, "\" is missing"), where, detail::concat("add \"", key, "\": ", expected)});
    }
    if (!v->is_number()) {
      detail::fail({subject_, detail::concat("expected ", expected, ", got ", describe(*v)), where, detail::concat("write ", expected, " there")});
    }
    const double x = v->get<double>();
    if (!std::isfinite(x) || !ok(x)) {
      detail::fail({subject_, detail::concat("expected ", expected, ", got ", v->dump()), where, detail::concat("write ", expected, " there")});
    }
    return x;
  }
  [[nodiscard]] double non_negative(const nlohmann::json& object, const char* key, const std::string& path,
                                    std::optional<double> fallback) const {
    return number(object, key, path, fallback, [](double x) { return x >= 0.0; }, "a finite number >= 0");
  }

  [[nodiscard]] std::vector<Layer> read_layers(const nlohmann::json& layers) const {
    expect_type(layers, nlohmann::json::value_t::array, "layers", "an array of layer objects");
    if (layers.empty()) detail::fail({subject_, "the \"layers\" array is empty", "layers", "list at least one layer"});
    std::vector<Layer> out;
    out.reserve(layers.size());
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const nlohmann::json& l = layers[i];
      const std::string path = detail::concat("layers[", i, "]");
      expect_type(l, nlohmann::json::value_t::object, path, "a layer object");
      check_keys(l, path,
                 {"name", "forward", "backward_input", "backward_weight", "backward", "param_bytes", "activation_bytes",
                  "output_bytes", "points", "recompute_saves_bytes", "recompute_time", "weight_bytes",
                  "boundary_bytes", "boundary_weight_bytes", "optimizer_step"});
      Layer layer;
      const nlohmann::json* name = member(l, "name");
      if (name == nullptr) {
        detail::fail({subject_, "the required field \"name\" is missing", path + ".name", "add \"name\": \"...\""});
      }
      expect_type(*name, nlohmann::json::value_t::string, path + ".name", "a string");
      layer.name = name->get<std::string>();
      layer.forward = non_negative(l, "forward", path, std::nullopt);
      layer.backward_input = non_negative(l, "backward_input", path, 0.0);
      layer.backward_weight = non_negative(l, "backward_weight", path, 0.0);
      if (member(l, "backward") != nullptr) layer.backward = non_negative(l, "backward", path, std::nullopt);
      layer.param_bytes = non_negative(l, "param_bytes", path, 0.0);
      layer.activation_bytes = non_negative(l, "activation_bytes", path, 0.0);
      layer.output_bytes = non_negative(l, "output_bytes", path, 0.0);
      layer.optimizer_step = non_negative(l, "optimizer_step", path, 0.0);
      if (member(l, "weight_bytes") != nullptr) layer.weight_bytes = non_negative(l, "weight_bytes", path, std::nullopt);
      if (member(l, "boundary_bytes") != nullptr) layer.boundary_bytes = non_negative(l, "boundary_bytes", path, std::nullopt);
      if (member(l, "boundary_weight_bytes") != nullptr) {
        layer.boundary_weight_bytes = non_negative(l, "boundary_weight_bytes", path, std::nullopt);
      }
      if (const auto* points = member(l, "points")) layer.points = read_points(*points, path + ".points");
      const bool saves = member(l, "recompute_saves_bytes") != nullptr, costs = member(l, "recompute_time") != nullptr;
      if (saves != costs) {
        detail::fail({subject_, detail::concat("has \"", saves ? "recompute_saves_bytes" : "recompute_time", "\" without \"",
                               saves ? "recompute_time" : "recompute_saves_bytes", "\""),
              path, "give both: the bytes recomputing the part saves, and the time it takes"});
      }
      if (saves) {
        layer.recompute_saves_bytes = non_negative(l, "recompute_saves_bytes", path, std::nullopt);
        layer.recompute_time = non_negative(l, "recompute_time", path, std::nullopt);
        if (*layer.recompute_saves_bytes > layer.activation_bytes) {
          detail::fail({subject_, detail::concat("recompute_saves_bytes ", *layer.recompute_saves_bytes, " exceeds activation_bytes ",
                                 layer.activation_bytes),
                path + ".recompute_saves_bytes", "a part saves at most what the layer keeps: give at most activation_bytes"});
        }
      }
      out.push_back(std::move(layer));
    }
    return out;
  }

  [[nodiscard]] std::vector<CostPoint> read_points(const nlohmann::json& points, const std::string& path) const {
    expect_type(points, nlohmann::json::value_t::array, path, "an array of measured points");
    std::vector<CostPoint> out;
    for (std::size_t k = 0; k < points.size(); ++k) {
      const nlohmann::json& v = points[k];
      const std::string at = detail::concat(path, '[', k, ']');
      expect_type(v, nlohmann::json::value_t::object, at, "a point object with \"rows\" and the times measured there");
      check_keys(v, at,
                 {"rows", "forward", "backward_input", "backward_weight", "backward", "activation_bytes", "output_bytes",
                  "weight_bytes", "boundary_bytes", "boundary_weight_bytes", "spread"});
      CostPoint p;
      p.rows = number(v, "rows", at, std::nullopt, [](double x) { return x > 0.0; }, "the samples per micro-batch, > 0");
      p.forward = non_negative(v, "forward", at, std::nullopt);
      p.backward_input = non_negative(v, "backward_input", at, 0.0);
      p.backward_weight = non_negative(v, "backward_weight", at, 0.0);
      if (member(v, "backward") != nullptr) p.backward = non_negative(v, "backward", at, std::nullopt);
      p.activation_bytes = non_negative(v, "activation_bytes", at, 0.0);
      p.output_bytes = non_negative(v, "output_bytes", at, 0.0);
      if (member(v, "weight_bytes") != nullptr) p.weight_bytes = non_negative(v, "weight_bytes", at, std::nullopt);
      if (member(v, "boundary_bytes") != nullptr) p.boundary_bytes = non_negative(v, "boundary_bytes", at, std::nullopt);
      if (member(v, "boundary_weight_bytes") != nullptr) {
        p.boundary_weight_bytes = non_negative(v, "boundary_weight_bytes", at, std::nullopt);
      }
      p.spread = non_negative(v, "spread", at, 0.0);
      out.push_back(p);
    }
    return out;
  }

  [[nodiscard]] std::vector<Edge> read_edges(const nlohmann::json& edges, std::size_t layers) const {
    expect_type(edges, nlohmann::json::value_t::array, "edges", "an array of [from, to] pairs");
    std::vector<Edge> out;
    out.reserve(edges.size());
    for (std::size_t e = 0; e < edges.size(); ++e) {
      const std::string path = detail::concat("edges[", e, "]");
      const nlohmann::json& pair = edges[e];
      if (!pair.is_array() || pair.size() != 2) {
        detail::fail({subject_, detail::concat("expected a [from, to] pair of layer indices, got ", pair.dump()), path,
              "write the two layer indices, e.g. [0, 1]"});
      }
      std::size_t ends[2] = {0, 0};
      for (std::size_t side = 0; side < 2; ++side) {
        const nlohmann::json& v = pair[side];
        const std::string where = detail::concat(path, '[', side, ']');
        if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<long long>() >= 0)) {
          detail::fail({subject_, detail::concat("expected a layer index (an integer >= 0), got ", describe(v)), where,
                detail::concat("layer indices run from 0 to ", layers, " - 1")});
        }
        const auto index = v.get<unsigned long long>();
        if (index >= layers) {
          detail::fail({subject_, detail::concat("layer index ", index, " is out of range: there are ", layers, " layers"), where,
                detail::concat("layer indices run from 0 to ", layers, " - 1")});
        }
        ends[side] = static_cast<std::size_t>(index);
      }
      out.push_back({ends[0], ends[1]});
    }
    return out;
  }

  [[nodiscard]] std::vector<Device> read_devices(const nlohmann::json& devices) const {
    expect_type(devices, nlohmann::json::value_t::array, "devices", "an array of device objects");
    std::vector<Device> out;
    for (std::size_t d = 0; d < devices.size(); ++d) {
      const std::string path = detail::concat("devices[", d, "]");
      const nlohmann::json& v = devices[d];
      expect_type(v, nlohmann::json::value_t::object, path, "a device object");
      check_keys(v, path, {"speed", "memory_bytes", "count"});
      Device dev;
      dev.speed = number(v, "speed", path, 1.0, [](double x) { return x > 0.0; }, "a finite number > 0");
      dev.memory_bytes = non_negative(v, "memory_bytes", path, std::numeric_limits<double>::infinity());
      const double count = number(
          v, "count", path, 1.0, [](double x) { return x >= 1.0 && x == std::floor(x) && x <= 1e6; },
          "a whole number of identical devices, 1 to 1000000");
      out.insert(out.end(), static_cast<std::size_t>(count), dev);
    }
    return out;
  }

  [[nodiscard]] Interconnect read_link(const nlohmann::json& link) const {
    expect_type(link, nlohmann::json::value_t::object, "link", "an object with \"latency\" and \"bandwidth\"");
    check_keys(link, "link", {"latency", "bandwidth"});
    Interconnect out;
    out.latency = non_negative(link, "latency", "link", 0.0);
    out.bandwidth = number(link, "bandwidth", "link", std::numeric_limits<double>::infinity(),
                           [](double x) { return x > 0.0; }, "a finite number of bytes per time unit > 0");
    return out;
  }

  std::string subject_;
};

}  // namespace detail

}  // namespace ppsched
