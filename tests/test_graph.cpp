// The layer graph and its profile format: builders, the default chain, topological orders,
// every validation message, and the JSON loader's positions and paths.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "ppsched/graph/hardware.hpp"
#include "ppsched/graph/layer_graph.hpp"
#include "ppsched/graph/profile.hpp"
#include "ppsched/graph/profile_json.hpp"
#include "ppsched/graph/time_unit.hpp"

using namespace ppsched;

namespace {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const ppsched::error& e) {
    return e.what();
  }
  FAIL("expected a ppsched::error");
  return {};
}

Layer named(const std::string& name, double forward = 1.0) {
  Layer l;
  l.name = name;
  l.forward = forward;
  return l;
}

constexpr double inf = std::numeric_limits<double>::infinity();
const double nan_value = std::nan("");

}  // namespace

TEST_CASE("a layer's compute time is forward + backward-input + backward-weight, in that order", "[graph]") {
  Layer l;
  l.forward = 0.1;
  l.backward_input = 0.2;
  l.backward_weight = 0.3;
  CHECK(l.compute() == (0.1 + 0.2) + 0.3);
  CHECK(l.compute() != 0.1 + (0.2 + 0.3));  // the order matters in binary floating point
}

TEST_CASE("a graph built without edges is a chain", "[graph]") {
  const LayerGraph g = LayerGraph::chain({named("a"), named("b"), named("c")});
  REQUIRE(g.size() == 3);
  CHECK(g.edges() == std::vector<Edge>{{0, 1}, {1, 2}});
  CHECK(g.is_chain());
  CHECK(g.topological_order() == std::vector<std::size_t>{0, 1, 2});
  CHECK(LayerGraph(std::vector<Layer>{named("a"), named("b"), named("c")}) == g);
  CHECK(LayerGraph::chain({named("only")}).is_chain());
  CHECK(LayerGraph().empty());
}

TEST_CASE("an explicit empty edge list means independent layers, not a chain", "[graph]") {
  const LayerGraph g({named("a"), named("b")}, {});
  CHECK(g.edges().empty());
  CHECK_FALSE(g.is_chain());
  CHECK(g.topological_order() == std::vector<std::size_t>{0, 1});
}

TEST_CASE("GraphBuilder: then() chains, connect() adds skip connections", "[graph]") {
  GraphBuilder b;
  const auto embed = b.then(named("embed"));
  b.then(named("block0"));
  const auto block1 = b.then(named("block1"));
  b.then(named("head"));
  b.connect(embed, block1);  // a residual stream skipping block0
  const LayerGraph g = std::move(b).build();
  CHECK(g.edges() == std::vector<Edge>{{0, 1}, {1, 2}, {2, 3}, {0, 2}});
  CHECK_FALSE(g.is_chain());
  CHECK(g.topological_order() == std::vector<std::size_t>{0, 1, 2, 3});
}

TEST_CASE("the default order is Kahn's, lowest-numbered ready layer first", "[graph]") {
  // 1 -> 2 -> 0, 1 -> 3: layer 1 is the only source; then 2 and 3 are ready and 2 is lower;
  // then 0 (freed by 2) is lower than 3.
  const LayerGraph g({named("c"), named("a"), named("b"), named("d")}, {{1, 2}, {2, 0}, {1, 3}});
  CHECK(g.topological_order() == std::vector<std::size_t>{1, 2, 0, 3});
  CHECK_NOTHROW(detail::check_topological_order(g, g.topological_order()));
  CHECK_NOTHROW(detail::check_topological_order(g, std::vector<std::size_t>{1, 3, 2, 0}));
}

TEST_CASE("every cost field is checked for NaN, infinity and negative values, naming layer and field", "[graph]") {
  using Field = double Layer::*;
  const std::vector<std::pair<Field, std::string>> fields = {
      {&Layer::forward, "forward"},           {&Layer::backward_input, "backward_input"},
      {&Layer::backward_weight, "backward_weight"}, {&Layer::param_bytes, "param_bytes"},
      {&Layer::activation_bytes, "activation_bytes"}, {&Layer::output_bytes, "output_bytes"}};
  const std::vector<std::pair<double, std::string>> values = {
      {nan_value, "is NaN"}, {inf, "is infinite"}, {-inf, "is infinite"}, {-2.5, "is negative (-2.5)"}};
  for (const auto& [field, field_name] : fields) {
    for (const auto& [value, problem] : values) {
      std::vector<Layer> layers = {named("embed"), named("attn"), named("head")};
      layers[1].*field = value;
      const std::string message = error_of([&] { (void)LayerGraph::chain(layers); });
      INFO(message);
      CHECK_THAT(message, Catch::Contains("layer 1 'attn'"));
      CHECK_THAT(message, Catch::Contains("field '" + field_name + "'"));
      CHECK_THAT(message, Catch::Contains(problem));
    }
  }
  CHECK_NOTHROW(LayerGraph::chain({Layer{"zero", 0, 0, 0, 0, 0, 0}}));
}

TEST_CASE("edges out of range and self-loops are rejected", "[graph]") {
  const std::string out_of_range = error_of([] { (void)LayerGraph({named("a"), named("b")}, {{0, 1}, {1, 5}}); });
  CHECK_THAT(out_of_range, Catch::Contains("edge 1 (1 -> 5)"));
  CHECK_THAT(out_of_range, Catch::Contains("only 2 layers"));
  const std::string self = error_of([] { (void)LayerGraph({named("a"), named("b")}, {{1, 1}}); });
  CHECK_THAT(self, Catch::Contains("layer 1 'b' into itself"));
}

TEST_CASE("a cycle is reported with the layers on it, and only those", "[graph]") {
  // x (0) hangs below the cycle b -> c -> d -> b; the walk starts at x, the lowest unplaced layer.
  const std::string message = error_of([] {
    (void)LayerGraph({named("x"), named("b"), named("c"), named("d"), named("source")},
                     {{4, 1}, {1, 2}, {2, 3}, {3, 1}, {3, 0}});
  });
  INFO(message);
  CHECK_THAT(message, Catch::Contains("cycle"));
  // Whatever layer the printed cycle starts at, these three hops are on it.
  CHECK_THAT(message, Catch::Contains("'b' -> layer 2 'c'"));
  CHECK_THAT(message, Catch::Contains("'c' -> layer 3 'd'"));
  CHECK_THAT(message, Catch::Contains("'d' -> layer 1 'b'"));
  CHECK_THAT(message, !Catch::Contains("'x'"));
  CHECK_THAT(message, !Catch::Contains("'source'"));
}

TEST_CASE("a user's topological order must be a permutation that respects every edge", "[graph]") {
  const LayerGraph g = LayerGraph::chain({named("a"), named("b"), named("c")});
  CHECK_THAT(error_of([&] { detail::check_topological_order(g, std::vector<std::size_t>{0, 1}); }),
             Catch::Contains("lists 2 layers, but the graph has 3"));
  CHECK_THAT(error_of([&] { detail::check_topological_order(g, std::vector<std::size_t>{0, 1, 7}); }),
             Catch::Contains("names layer 7"));
  CHECK_THAT(error_of([&] { detail::check_topological_order(g, std::vector<std::size_t>{0, 1, 1}); }),
             Catch::Contains("twice (positions 1 and 2)"));
  const std::string backwards = error_of([&] { detail::check_topological_order(g, std::vector<std::size_t>{0, 2, 1}); });
  CHECK_THAT(backwards, Catch::Contains("puts layer 2 'c' (position 1) before its input layer 1 'b' (position 2)"));
  CHECK_THAT(backwards, Catch::Contains("edge 1"));
}

TEST_CASE("interconnect transfer time is latency + bytes / bandwidth", "[graph]") {
  const Interconnect link{0.5, 4.0};
  CHECK(link.transfer_time(10.0) == 0.5 + 2.5);
  CHECK(Interconnect{}.is_free());
  CHECK(Interconnect{}.transfer_time(1e12) == 0.0);
  CHECK_FALSE(link.is_free());
}

// ------------------------------------------------------------------ profiles

namespace {

const char* const example_profile = R"({
  "unit": "ms",
  "layers": [
    {"name": "embed", "forward": 1.0, "backward_input": 1.0, "backward_weight": 1.0,
     "param_bytes": 0, "activation_bytes": 0, "output_bytes": 0},
    {"name": "block", "forward": 2.5, "param_bytes": 1000000, "activation_bytes": 64, "output_bytes": 32},
    {"name": "head", "forward": 0.5, "backward_input": 0.25}
  ],
  "edges": [[0, 1], [1, 2], [0, 2]],
  "devices": [{"speed": 1.0, "memory_bytes": 80e9}, {"speed": 2, "count": 2}],
  "link": {"latency": 0.0, "bandwidth": 25e9}
})";

std::string profile_error(const std::string& text) {
  return error_of([&] { (void)parse_profile(text, "test.json"); });
}

}  // namespace

TEST_CASE("a profile with every field reads back into graph, devices and link", "[graph][profile]") {
  const Profile p = parse_profile(example_profile);
  CHECK(p.time_unit == "ms");
  REQUIRE(p.graph.size() == 3);
  CHECK(p.graph.layer(0) == Layer{"embed", 1.0, 1.0, 1.0, 0, 0, 0});
  CHECK(p.graph.layer(1) == Layer{"block", 2.5, 0.0, 0.0, 1000000, 64, 32});
  CHECK(p.graph.layer(2) == Layer{"head", 0.5, 0.25, 0.0, 0, 0, 0});
  CHECK(p.graph.edges() == std::vector<Edge>{{0, 1}, {1, 2}, {0, 2}});
  CHECK(p.devices == std::vector<Device>{{1.0, 80e9}, {2.0, inf}, {2.0, inf}});
  CHECK(p.link == Interconnect{0.0, 25e9});
}

TEST_CASE("the example in docs/profile-format.md reads as described", "[graph][profile][docs]") {
  const Profile p = parse_profile(R"({
  "unit": "ms",
  "layers": [
    {"name": "embed", "forward": 1.0, "backward_input": 1.0, "backward_weight": 1.0,
     "param_bytes": 0, "activation_bytes": 0, "output_bytes": 0},
    {"name": "block0", "forward": 2.5, "backward_input": 2.5, "backward_weight": 2.0,
     "param_bytes": 5.0e7, "activation_bytes": 4.0e6, "output_bytes": 4.0e6},
    {"name": "head", "forward": 1.5, "backward_input": 1.5, "backward_weight": 1.0,
     "param_bytes": 2.0e8, "activation_bytes": 4.0e6}
  ],
  "edges": [[0, 1], [1, 2]],
  "devices": [{"speed": 1.0, "memory_bytes": 80e9, "count": 4}],
  "link": {"latency": 0.01, "bandwidth": 25e6}
})");
  CHECK(p.graph.is_chain());
  CHECK(p.graph.layer(2) == Layer{"head", 1.5, 1.5, 1.0, 2e8, 4e6, 0.0});
  CHECK(p.devices == std::vector<Device>(4, Device{1.0, 80e9}));
  CHECK(p.link.transfer_time(4e6) == 0.01 + 4e6 / 25e6);
}

TEST_CASE("a profile without edges is a chain; without devices or link, the defaults", "[graph][profile]") {
  const Profile p = parse_profile(R"({"layers": [{"name": "a", "forward": 1}, {"name": "b", "forward": 2}]})");
  CHECK(p.graph.is_chain());
  CHECK(p.devices.empty());
  CHECK(p.link.is_free());
  CHECK(p.time_unit.empty());
  const Profile independent = parse_profile(R"({"layers": [{"name": "a", "forward": 1}, {"name": "b", "forward": 2}],
                                                "edges": []})");
  CHECK(independent.graph.edges().empty());
}

TEST_CASE("profile_to_json writes what parse_profile reads back", "[graph][profile]") {
  const Profile p = parse_profile(example_profile);
  CHECK(parse_profile(profile_to_json(p)) == p);
  Profile chain;
  chain.graph = LayerGraph::chain({Layer{"x", 0.1, 0.2, 0.3, 1.5, 2.5, 3.5}, named("y")});
  chain.link = {1e-3, inf};
  const std::string json = profile_to_json(chain);
  CHECK_THAT(json, !Catch::Contains("edges"));
  CHECK_THAT(json, !Catch::Contains("bandwidth"));
  CHECK(parse_profile(json) == chain);
}

TEST_CASE("load_profile reads a file and names a missing one", "[graph][profile]") {
  const auto path = std::filesystem::temp_directory_path() / "ppsched_test_graph_profile.json";
  {
    std::ofstream out(path);
    out << example_profile;
  }
  CHECK(load_profile(path) == parse_profile(example_profile));
  std::filesystem::remove(path);
  const std::string missing = error_of([&] { (void)load_profile(path); });
  CHECK_THAT(missing, Catch::Contains(path.string()));
  CHECK_THAT(missing, Catch::Contains("cannot be opened"));
}

TEST_CASE("malformed JSON is reported with the file's line and column", "[graph][profile]") {
  // Line 3 is `    {"name": "b" "forward": 1}`: the comma is missing before "forward", and the
  // parser stops on that token's last character, column 26.
  const std::string text = "{\"layers\": [\n    {\"name\": \"a\", \"forward\": 1},\n    {\"name\": \"b\" \"forward\": 1}\n]}";
  const std::string message = profile_error(text);
  INFO(message);
  CHECK_THAT(message, Catch::StartsWith("profile 'test.json': is not valid JSON"));
  CHECK_THAT(message, Catch::Contains("(at line 3, column 26)"));
  CHECK_THAT(profile_error(""), Catch::Contains("line 1, column 1"));
  const std::string overflow = profile_error("{\"layers\": [{\"name\": \"a\",\n \"forward\": 1e999}]}");
  CHECK_THAT(overflow, Catch::Contains("1e999"));
  CHECK_THAT(overflow, Catch::Contains("line 2, column 13"));
}

TEST_CASE("a bad field is reported with its path and what was expected", "[graph][profile]") {
  const auto layers = [](const std::string& second) {
    return R"({"layers": [{"name": "a", "forward": 1}, )" + second + "]}";
  };
  struct Case {
    std::string text, where, problem;
  };
  const std::vector<Case> cases = {
      {layers(R"({"name": "b", "forward": "1"})"), "layers[1].forward", "got the string \"1\""},
      {layers(R"({"name": "b", "forward": -1})"), "layers[1].forward", "expected a finite number >= 0, got -1"},
      {layers(R"({"name": "b", "forward": 1, "param_bytes": null})"), "layers[1].param_bytes", "got a null"},
      {layers(R"({"name": "b"})"), "layers[1].forward", "required field \"forward\" is missing"},
      {layers(R"({"forward": 1})"), "layers[1].name", "required field \"name\" is missing"},
      {layers(R"({"name": 3, "forward": 1})"), "layers[1].name", "expected a string"},
      {layers(R"({"name": "b", "forwrd": 1})"), "layers[1].forwrd", "did you mean \"forward\""},
      {layers("[1, 2]"), "layers[1]", "expected a layer object, got an array"},
      {R"({"layers": []})", "layers", "empty"},
      {R"({"layers": {}})", "layers", "expected an array of layer objects, got an object"},
      {R"({"layer": []})", "layer", "did you mean \"layers\""},
      {R"({"unit": "ms"})", "the document", "no \"layers\" array"},
      {"[1]", "the document", "expected an object"},
      {R"({"layers": [{"name": "a", "forward": 1}], "edges": [[0, 1]]})", "edges[0][1]",
       "layer index 1 is out of range: there are 1 layers"},
      {R"({"layers": [{"name": "a", "forward": 1}], "edges": [[0]]})", "edges[0]", "[from, to] pair"},
      {R"({"layers": [{"name": "a", "forward": 1}], "edges": [[-1, 0]]})", "edges[0][0]", "an integer >= 0"},
      {R"({"layers": [{"name": "a", "forward": 1}], "edges": [[0.5, 0]]})", "edges[0][0]", "an integer >= 0"},
      {R"({"layers": [{"name": "a", "forward": 1}], "devices": [{"speed": 0}]})", "devices[0].speed",
       "a finite number > 0"},
      {R"({"layers": [{"name": "a", "forward": 1}], "devices": [{"memory_bytes": -5}]})", "devices[0].memory_bytes",
       "got -5"},
      {R"({"layers": [{"name": "a", "forward": 1}], "devices": [{"count": 1.5}]})", "devices[0].count",
       "a whole number"},
      {R"({"layers": [{"name": "a", "forward": 1}], "devices": [{"sped": 1}]})", "devices[0].sped",
       "did you mean \"speed\""},
      {R"({"layers": [{"name": "a", "forward": 1}], "link": {"bandwidth": 0}})", "link.bandwidth", "> 0"},
      {R"({"layers": [{"name": "a", "forward": 1}], "link": {"latency": -1}})", "link.latency", "got -1"},
      {R"({"layers": [{"name": "a", "forward": 1}], "link": {"delay": 1}})", "link.delay", "the fields here are"},
      {R"({"layers": [{"name": "a", "forward": 1}], "unit": 5})", "unit", "expected a string"},
  };
  for (const Case& c : cases) {
    const std::string message = profile_error(c.text);
    INFO(c.text << "\n -> " << message);
    CHECK_THAT(message, Catch::StartsWith("profile 'test.json': "));
    CHECK_THAT(message, Catch::Contains("(at " + c.where + ")"));
    CHECK_THAT(message, Catch::Contains(c.problem));
  }
}

TEST_CASE("a cycle in a profile's edges names the profile and the layers", "[graph][profile]") {
  const std::string message = profile_error(
      R"({"layers": [{"name": "a", "forward": 1}, {"name": "b", "forward": 1}], "edges": [[0, 1], [1, 0]]})");
  CHECK_THAT(message, Catch::StartsWith("profile 'test.json': layer graph: the edges form a cycle"));
  CHECK_THAT(message, Catch::Contains("'a'"));
  CHECK_THAT(message, Catch::Contains("'b'"));
}

TEST_CASE("a layer may carry its measured full backward; absent, B costs BI + BW", "[graph][profile]") {
  const Profile p = parse_profile(R"({"layers": [
    {"name": "fused", "forward": 1, "backward_input": 1.5, "backward_weight": 1.5, "backward": 2},
    {"name": "split", "forward": 1, "backward_input": 1, "backward_weight": 0.5}]})");
  REQUIRE(p.graph.layer(0).backward.has_value());
  CHECK(*p.graph.layer(0).backward == 2.0);
  CHECK(p.graph.layer(0).full_backward() == 2.0);
  CHECK_FALSE(p.graph.layer(1).backward.has_value());
  CHECK(p.graph.layer(1).full_backward() == 1.5);
  CHECK(parse_profile(profile_to_json(p)) == p);
  // Written only when present, so a profile without it is written as before.
  CHECK_THAT(profile_to_json(parse_profile(R"({"layers": [{"name": "a", "forward": 1}]})")),
             !Catch::Contains("\"backward\""));
  CHECK_THAT(profile_error(R"({"layers": [{"name": "a", "forward": 1, "backward": -1}]})"),
             Catch::Contains("layers[0].backward"));
  Layer bad = named("x");
  bad.backward = std::numeric_limits<double>::quiet_NaN();
  CHECK_THAT(error_of([&] { (void)LayerGraph::chain({bad}); }), Catch::Contains("field 'backward' of layer 0 'x' is NaN"));
}

TEST_CASE("the shipped example profiles keep loading unchanged", "[graph][profile]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(__FILE__).parent_path() / ".." / "examples" / "profiles";
  REQUIRE(fs::exists(dir / "gpt.json"));
  for (const char* name : {"gpt.json", "heterogeneous.json", "resnet.json"}) {
    INFO(name);
    const Profile p = load_profile(dir / name);
    CHECK(p.graph.size() > 0);
    for (const Layer& l : p.graph.layers()) CHECK_FALSE(l.backward.has_value());
    CHECK(parse_profile(profile_to_json(p)) == p);
  }
}

TEST_CASE("value_at_rows: piecewise linear between sizes, the last slope above, the fixed part below", "[graph][rows]") {
  // 2 rows: 3, 8 rows: 6, 32 rows: 12 (a fixed part of 2 and 0.5 per row, then 0.25 per row).
  const std::vector<RowsValue> p{{2, 3}, {8, 6}, {32, 12}};
  CHECK(value_at_rows(p, 2) == 3.0);
  CHECK(value_at_rows(p, 8) == 6.0);
  CHECK(value_at_rows(p, 32) == 12.0);
  CHECK(value_at_rows(p, 5) == Approx(4.5));
  CHECK(value_at_rows(p, 20) == Approx(9.0));
  CHECK(value_at_rows(p, 64) == Approx(20.0));  // 12 + 0.25 x 32
  CHECK(value_at_rows(p, 1) == Approx(2.5));    // the first two points' line
  CHECK(value_at_rows(p, 0.01) >= 2.0);         // never below the fixed part
  // A line through the first two points that would cross 0 stops at 0, not below.
  CHECK(value_at_rows(std::vector<RowsValue>{{4, 1}, {8, 5}}, 1) == 0.0);
  // Noise that makes the larger size cheaper neither makes a larger one cheaper still nor a smaller one dearer.
  const std::vector<RowsValue> noisy{{8, 6}, {16, 5.5}};
  CHECK(value_at_rows(noisy, 64) == 5.5);
  CHECK(value_at_rows(noisy, 2) == 6.0);
  // One point: proportional, as profiles without points have always been scaled.
  CHECK(value_at_rows(std::vector<RowsValue>{{8, 4}}, 2) == 1.0);
  CHECK_THAT(error_of([] { (void)value_at_rows({}, 1); }), Catch::Contains("no measured points"));
  CHECK_THAT(error_of([] { (void)value_at_rows(std::vector<RowsValue>{{8, 1}, {8, 2}}, 1); }),
             Catch::Contains("points[1].rows"));
  CHECK_THAT(error_of([&] { (void)value_at_rows(p, 0); }), Catch::Contains("rows = 0"));
}

TEST_CASE("layer_at_rows prices a layer from its points, or linearly from the reference size without", "[graph][rows]") {
  Layer measured = named("mlp");
  measured.points = {CostPoint{2, 3, 4, 5, 8, 20, 10}, CostPoint{8, 6, 7, 8, 14, 80, 40}};
  const Layer at4 = layer_at_rows(measured, 4, 8);
  CHECK(at4.forward == Approx(4.0));
  CHECK(at4.backward_input == Approx(5.0));
  CHECK(at4.backward_weight == Approx(6.0));
  REQUIRE(at4.backward.has_value());
  CHECK(*at4.backward == Approx(10.0));
  CHECK(at4.activation_bytes == Approx(40.0));
  CHECK(at4.output_bytes == Approx(20.0));
  Layer plain{"plain", 2, 2, 2, 100, 64, 32};
  const Layer half = layer_at_rows(plain, 4, 8);
  CHECK(half == Layer{"plain", 1, 1, 1, 100, 32, 16});
  CHECK_THAT(error_of([&] { (void)layer_at_rows(plain, 4, 0); }), Catch::Contains("Profile::rows"));
  Profile p;
  p.rows = 8;
  p.graph = LayerGraph::chain({measured, plain});
  const Profile small = profile_at_rows(p, 4);
  CHECK(small.rows == 4);
  CHECK(small.graph.layer(0).forward == Approx(4.0));
  CHECK(small.graph.layer(1).forward == Approx(1.0));
}

TEST_CASE("measured points read and write with the profile, and bad ones are named", "[graph][profile][rows]") {
  const Profile p = parse_profile(R"({"unit": "ms", "rows": 8, "layers": [
    {"name": "a", "forward": 2, "backward_input": 2, "backward_weight": 1,
     "points": [{"rows": 2, "forward": 1, "backward_input": 1, "backward_weight": 0.5, "backward": 1.2, "spread": 0.1},
                {"rows": 8, "forward": 2, "backward_input": 2, "backward_weight": 1, "backward": 2.5}]}]})");
  CHECK(p.rows == 8.0);
  REQUIRE(p.graph.layer(0).points.size() == 2);
  CHECK(p.graph.layer(0).points[0] == CostPoint{2, 1, 1, 0.5, 1.2, 0, 0, 0.1});
  CHECK(parse_profile(profile_to_json(p)) == p);
  CHECK_THAT(profile_error(R"({"layers": [{"name": "a", "forward": 1, "points": [{"forward": 1}]}]})"),
             Catch::Contains("layers[0].points[0].rows"));
  CHECK_THAT(profile_error(R"({"layers": [{"name": "a", "forward": 1,
                                "points": [{"rows": 8, "forward": 1}, {"rows": 4, "forward": 1}]}]})"),
             Catch::Contains("has a measured point at 4 rows after one at 8"));
  CHECK_THAT(profile_error(R"({"layers": [{"name": "a", "forward": 1,
                                "points": [{"rows": 4, "forward": 1, "backward": 1}, {"rows": 8, "forward": 1}]}]})"),
             Catch::Contains("full backward at some measured sizes"));
  CHECK_THAT(profile_error(R"({"rows": 0, "layers": [{"name": "a", "forward": 1}]})"), Catch::Contains("rows"));
}

TEST_CASE("what a BI leaves for BW reads and writes with the profile and is priced per size", "[graph][profile][rows]") {
  const Profile p = parse_profile(R"({"unit": "ms", "rows": 8, "layers": [
    {"name": "a", "forward": 2, "activation_bytes": 80, "weight_bytes": 160,
     "points": [{"rows": 2, "forward": 1, "activation_bytes": 20, "weight_bytes": 40},
                {"rows": 8, "forward": 2, "activation_bytes": 80, "weight_bytes": 160}]},
    {"name": "b", "forward": 2, "activation_bytes": 100, "weight_bytes": 50},
    {"name": "c", "forward": 2, "activation_bytes": 100, "weight_bytes": 150}]})");
  REQUIRE(p.graph.layer(0).weight_bytes.has_value());
  CHECK(*p.graph.layer(0).weight_bytes == 160.0);
  CHECK(p.graph.layer(0).points[0].weight_bytes == std::optional<double>(40.0));
  CHECK(parse_profile(profile_to_json(p)) == p);
  // Between measured sizes like every other byte count; scaled with the rows without points.
  CHECK(*layer_at_rows(p.graph.layer(0), 4, 8).weight_bytes == Approx(80.0));
  CHECK(*layer_at_rows(p.graph.layer(1), 4, 8).weight_bytes == Approx(25.0));
  CHECK_THAT(profile_error(R"({"layers": [{"name": "a", "forward": 1, "weight_bytes": -1}]})"),
             Catch::Contains("weight_bytes"));
  CHECK_THAT(profile_error(R"({"layers": [{"name": "a", "forward": 1,
                                "points": [{"rows": 4, "forward": 1, "weight_bytes": 1}, {"rows": 8, "forward": 1}]}]})"),
             Catch::Contains("weight_bytes at some measured sizes"));
}

TEST_CASE("what a cut right after a layer lets go reads and writes with the profile and is priced per size",
          "[graph][profile][rows]") {
  const Profile p = parse_profile(R"({"unit": "ms", "rows": 8, "layers": [
    {"name": "a", "forward": 2, "activation_bytes": 80, "boundary_bytes": 32, "weight_bytes": 160, "boundary_weight_bytes": 16,
     "points": [{"rows": 2, "forward": 1, "activation_bytes": 20, "boundary_bytes": 8, "weight_bytes": 40,
                 "boundary_weight_bytes": 4},
                {"rows": 8, "forward": 2, "activation_bytes": 80, "boundary_bytes": 32, "weight_bytes": 160,
                 "boundary_weight_bytes": 16}]},
    {"name": "b", "forward": 2, "activation_bytes": 100, "boundary_bytes": 40, "weight_bytes": 50, "boundary_weight_bytes": 10},
    {"name": "c", "forward": 2, "activation_bytes": 100}]})");
  CHECK(p.graph.layer(0).boundary_bytes == std::optional<double>(32.0));
  CHECK(p.graph.layer(0).points[0].boundary_bytes == std::optional<double>(8.0));
  CHECK(p.graph.layer(0).points[1].boundary_bytes == std::optional<double>(32.0));
  CHECK(p.graph.layer(0).boundary_weight_bytes == std::optional<double>(16.0));
  CHECK(p.graph.layer(0).points[1].boundary_weight_bytes == std::optional<double>(16.0));
  CHECK_FALSE(p.graph.layer(2).boundary_bytes.has_value());
  const std::string json = profile_to_json(p);
  CHECK(json.find("boundary_bytes") != std::string::npos);
  CHECK(parse_profile(json) == p);
  // Between measured sizes like every other byte count; scaled with the rows without points;
  // absent stays absent.
  CHECK(layer_at_rows(p.graph.layer(0), 4, 8).boundary_bytes.value_or(-1.0) == Approx(16.0));
  CHECK(layer_at_rows(p.graph.layer(1), 4, 8).boundary_bytes.value_or(-1.0) == Approx(20.0));
  CHECK_FALSE(layer_at_rows(p.graph.layer(2), 4, 8).boundary_bytes.has_value());
  CHECK(layer_at_rows(p.graph.layer(0), 4, 8).boundary_weight_bytes.value_or(-1.0) == Approx(8.0));
  CHECK(layer_at_rows(p.graph.layer(1), 4, 8).boundary_weight_bytes.value_or(-1.0) == Approx(5.0));
  CHECK_FALSE(layer_at_rows(p.graph.layer(2), 4, 8).boundary_weight_bytes.has_value());
  // Extrapolated, never more than the layer keeps at that size: above 8 rows the boundary's
  // steeper line would pass the activation's.
  const Profile steep = parse_profile(R"({"rows": 8, "layers": [{"name": "a", "forward": 2, "activation_bytes": 80,
    "boundary_bytes": 80, "points": [{"rows": 2, "forward": 1, "activation_bytes": 40, "boundary_bytes": 20},
                                     {"rows": 8, "forward": 2, "activation_bytes": 80, "boundary_bytes": 80}]}]})");
  for (const double rows : {1.0, 2.0, 5.0, 8.0, 64.0}) {
    const Layer at = layer_at_rows(steep.graph.layer(0), rows, 8);
    CHECK(at.boundary_bytes.value_or(-1.0) <= at.activation_bytes);
  }
  CHECK_THAT(profile_error(R"({"layers": [{"name": "a", "forward": 1, "boundary_bytes": -1}]})"),
             Catch::Contains("layers[0].boundary_bytes") && Catch::Contains(">= 0"));
  CHECK_THAT(profile_error(R"({"layers": [{"name": "a", "forward": 1, "activation_bytes": 4, "boundary_bytes": 8}]})"),
             Catch::Contains("layer 0 'a'") && Catch::Contains("boundary_bytes") && Catch::Contains("exceeds its activation_bytes"));
  CHECK_THAT(profile_error(R"({"layers": [{"name": "a", "forward": 1, "activation_bytes": 8, "boundary_bytes": 4,
                                "points": [{"rows": 4, "forward": 1, "activation_bytes": 8, "boundary_bytes": 16}]}]})"),
             Catch::Contains("points[0].boundary_bytes") && Catch::Contains("exceeds"));
  CHECK_THAT(profile_error(R"({"layers": [{"name": "a", "forward": 1,
                                "points": [{"rows": 4, "forward": 1}, {"rows": 8, "forward": 1, "boundary_bytes": 0}]}]})"),
             Catch::Contains("boundary_bytes at some measured sizes"));
  CHECK_THAT(profile_error(R"({"layers": [{"name": "a", "forward": 1, "activation_bytes": 8, "boundary_weight_bytes": 4}]})"),
             Catch::Contains("boundary_weight_bytes without weight_bytes"));
  CHECK_THAT(profile_error(R"({"layers": [{"name": "a", "forward": 1, "weight_bytes": 2, "boundary_weight_bytes": 4}]})"),
             Catch::Contains("boundary_weight_bytes") && Catch::Contains("exceeds its weight_bytes"));
  CHECK_THAT(profile_error(R"({"layers": [{"name": "a", "forward": 1, "weight_bytes": 8, "boundary_weight_bytes": 4,
                                "points": [{"rows": 4, "forward": 1, "weight_bytes": 8, "boundary_weight_bytes": 4},
                                           {"rows": 8, "forward": 1, "weight_bytes": 8}]}]})"),
             Catch::Contains("boundary_weight_bytes at some measured sizes"));
  Layer nan;
  nan.name = "n";
  nan.activation_bytes = 8.0;
  nan.boundary_bytes = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH(LayerGraph::chain({nan}), Catch::Contains("boundary_bytes") && Catch::Contains("NaN"));
}

TEST_CASE("the runtime's fixed costs read and write with the profile", "[graph][profile][overhead]") {
  const Profile p = parse_profile(R"({"action_overhead": 0.006, "transfer_overhead": 0.01, "step_overhead": 0.2,
                                      "layers": [{"name": "a", "forward": 1}]})");
  CHECK(p.fixed_costs.action == 0.006);
  CHECK(p.fixed_costs.transfer == 0.01);
  CHECK(p.fixed_costs.step == 0.2);
  CHECK_THAT(profile_error(R"({"step_overhead": -1, "layers": [{"name": "a", "forward": 1}]})"),
             Catch::Contains("(at step_overhead)"));
  CHECK(parse_profile(profile_to_json(p)) == p);
  CHECK_THAT(profile_error(R"({"action_overhead": -1, "layers": [{"name": "a", "forward": 1}]})"),
             Catch::Contains("(at action_overhead)"));
}

TEST_CASE("a layer's optimizer step reads and writes with the profile; absent, it is 0", "[graph][profile][overhead]") {
  const Profile p = parse_profile(R"({"layers": [{"name": "a", "forward": 1, "optimizer_step": 0.25}, {"name": "b", "forward": 1}]})");
  CHECK(p.graph.layer(0).optimizer_step == 0.25);
  CHECK(p.graph.layer(1).optimizer_step == 0.0);  // an old profile without the field loads as before
  CHECK(parse_profile(profile_to_json(p)) == p);
  CHECK(profile_to_json(parse_profile(R"({"layers": [{"name": "a", "forward": 1}]})")).find("optimizer") == std::string::npos);
  CHECK_THAT(profile_error(R"({"layers": [{"name": "a", "forward": 1, "optimizer_step": -1}]})"),
             Catch::Contains("(at layers[0].optimizer_step)"));
}

TEST_CASE("the ranks' concurrent slowdown reads and writes with the profile", "[graph][profile][shared]") {
  const Profile p = parse_profile(R"({"concurrent_slowdown": [1, 1.9], "layers": [{"name": "a", "forward": 1}]})");
  CHECK(p.fixed_costs.concurrent_slowdown == std::vector<double>{1.0, 1.9});
  CHECK(parse_profile(profile_to_json(p)) == p);
  CHECK(profile_to_json(parse_profile(R"({"layers": [{"name": "a", "forward": 1}]})")).find("concurrent") == std::string::npos);
  CHECK_THAT(profile_error(R"({"concurrent_slowdown": [1, 0.5], "layers": [{"name": "a", "forward": 1}]})"),
             Catch::Contains("concurrent_slowdown[1]"));
  CHECK_THAT(profile_error(R"({"concurrent_slowdown": 2, "layers": [{"name": "a", "forward": 1}]})"),
             Catch::Contains("concurrent_slowdown"));
}

TEST_CASE("where the first stage runs its backward reads and writes with the profile", "[graph][profile]") {
  const Profile p = parse_profile(R"({"first_stage_backward_in_bw": true, "layers": [{"name": "a", "forward": 1}]})");
  CHECK(p.first_stage_backward_in_bw);
  CHECK(parse_profile(profile_to_json(p)) == p);
  CHECK_FALSE(parse_profile(R"({"layers": [{"name": "a", "forward": 1}]})").first_stage_backward_in_bw);
  CHECK(profile_to_json(parse_profile(R"({"layers": [{"name": "a", "forward": 1}]})")).find("first_stage") == std::string::npos);
  CHECK_THAT(profile_error(R"({"first_stage_backward_in_bw": 1, "layers": [{"name": "a", "forward": 1}]})"),
             Catch::Contains("first_stage_backward_in_bw") && Catch::Contains("true or false"));
}

TEST_CASE("TimeUnit: scales convert to each other by the power of ten between them, both ways", "[graph][units]") {
  const std::vector<std::pair<std::string, double>> scales = {
      {"s", 1.0}, {"ms", 1e-3}, {"us", 1e-6}, {"\xC2\xB5s", 1e-6}, {"ns", 1e-9}};
  for (const auto& [from, from_seconds] : scales) {
    const TimeUnit u = from;  // implicit from text, as `timeline.unit = "ms"` has always read
    CHECK(u.text() == from);  // kept as given: "µs" prints "µs"
    REQUIRE(u.seconds().has_value());
    CHECK(*u.seconds() == from_seconds);
    for (const auto& [to, to_seconds] : scales) {
      INFO(from << " to " << to);
      CHECK(u.factor_to(to) == Approx(from_seconds / to_seconds).epsilon(1e-15));
      CHECK(u.try_factor_to(to) == u.factor_to(to));
      CHECK((u == TimeUnit(to)) == (from_seconds == to_seconds));
    }
  }
  CHECK(TimeUnit("ms").factor_to("us") == 1000.0);  // exactly: not 1e-3 / 1e-6
  CHECK(TimeUnit("us").factor_to("ms") == 1e-3);
  CHECK(TimeUnit("\xC2\xB5s") == "us");
  std::ostringstream out;
  out << TimeUnit("\xC2\xB5s");
  CHECK(out.str() == "\xC2\xB5s");
}

TEST_CASE("TimeUnit: a unit of the model's own converts only to itself, with an error naming both units", "[graph][units]") {
  const TimeUnit cycles = "cycles";
  CHECK_FALSE(cycles.seconds().has_value());
  CHECK(cycles.factor_to("cycles") == 1.0);
  CHECK(cycles == "cycles");
  CHECK(cycles != "unit");
  for (const char* scale : {"s", "ms", "us", "\xC2\xB5s", "ns"}) {
    INFO(scale);
    CHECK_FALSE(cycles.try_factor_to(scale).has_value());
    CHECK_FALSE(TimeUnit(scale).try_factor_to(cycles).has_value());
    CHECK(cycles != scale);
    CHECK(error_of([&] { (void)cycles.factor_to(scale); }) ==
          std::string("time unit: cannot convert \"cycles\" to \"") + scale +
              "\": a unit of the model's own has no fixed relation to time. give both times in s, ms, us (\xC2\xB5s) or "
              "ns, or both in one unit of the model's own");
    CHECK(error_of([&] { (void)TimeUnit(scale).factor_to(cycles, "calibrate", "CostModel::unit", "give a factor"); }) ==
          std::string("calibrate: cannot convert \"") + scale +
              "\" to \"cycles\": a unit of the model's own has no fixed relation to time (at CostModel::unit). give a factor");
  }
  CHECK_THAT(error_of([&] { (void)cycles.factor_to("unit"); }),
             Catch::Contains("cannot convert \"cycles\" to \"unit\": two different units of the model's own"));
  // No unit named: equal to itself, convertible to nothing.
  CHECK(TimeUnit{} == TimeUnit(""));
  CHECK(TimeUnit{}.empty());
  CHECK_FALSE(TimeUnit{}.try_factor_to(TimeUnit{}).has_value());
  CHECK_THAT(error_of([&] { (void)TimeUnit{}.factor_to("ms"); }),
             Catch::Contains("cannot convert times without a unit to \"ms\""));
  // A name that looks like a scale but is not one of the spellings is a name.
  CHECK_FALSE(TimeUnit("MS").seconds().has_value());
  CHECK_FALSE(TimeUnit("ms ").seconds().has_value());
}
