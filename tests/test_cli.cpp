// Tests for the command-line tools, run as a user runs them: each test starts the built
// ppsched-plan (or ppsched-bubbles) binary, captures its exit status, stdout and stderr,
// and checks what came out. Expected numbers are derived here from the schedules' textbook
// formulas and from the JSON's own fields (a bubble fraction must follow from the makespan
// and the busy times it is printed with), never copied from a previous run.
//
// The binaries are found through the environment (PPSCHED_PLAN, PPSCHED_BUBBLES,
// PPSCHED_SOURCE_ROOT, set by tests/meson.build), or else next to this test in the build
// tree, with the source tree read from the build's meson-info.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "ppsched/graph/profile_json.hpp"
#include "ppsched/plan/varlen.hpp"
#include "run_tool.hpp"
#include "skip.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// ------------------------------------------------------------------ running the tools

using ppsched::test_support::read_file;
using ppsched::test_support::Run;
using ppsched::test_support::run_tool;
using ppsched::test_support::ScratchDir;

fs::path build_root() {
  // tests/test_cli in the build tree.
  return fs::read_symlink("/proc/self/exe").parent_path().parent_path();
}

fs::path tool_path(const char* variable, const char* name) {
  if (const char* p = std::getenv(variable); p != nullptr && *p != '\0') return p;
  return build_root() / "examples" / name;
}

fs::path source_root() {
  if (const char* p = std::getenv("PPSCHED_SOURCE_ROOT"); p != nullptr && *p != '\0') return p;
  const json info = json::parse(read_file(build_root() / "meson-info" / "meson-info.json"));
  return info.at("directories").at("source").get<std::string>();
}


Run plan(const std::vector<std::string>& args) { return run_tool(tool_path("PPSCHED_PLAN", "ppsched-plan"), args); }
Run bubbles(const std::vector<std::string>& args) {
  return run_tool(tool_path("PPSCHED_BUBBLES", "ppsched-bubbles"), args);
}

// Run by hand outside Meson, the test may find no ppsched-bubbles next to it; its cases then
// skip (tests/skip.hpp), saying so. They are tagged [may_skip][needs_bubbles] and run as the
// test cli_bubbles (tests/meson.build). Under Meson PPSCHED_BUBBLES is set, and a missing
// binary fails them.
bool bubbles_available() {
  if (std::getenv("PPSCHED_BUBBLES") != nullptr) return true;
  return fs::exists(tool_path("PPSCHED_BUBBLES", "ppsched-bubbles"));
}
constexpr const char* no_bubbles = "ppsched-bubbles is not built next to this test and PPSCHED_BUBBLES is not set";

std::string profile(const std::string& name) { return (source_root() / "examples" / "profiles" / name).string(); }

// Runs with --json, requires success, and parses stdout.
json plan_json(std::vector<std::string> args) {
  args.push_back("--json");
  const Run r = plan(args);
  INFO("stderr: " << r.err);
  REQUIRE(r.status == 0);
  return json::parse(r.out);
}

const json& schedule_named(const json& j, std::string_view name) {
  for (const json& s : j.at("schedules"))
    if (s.at("name") == name) return s;
  FAIL("no schedule named " << name << " in the output");
  throw std::logic_error("unreachable");
}

double max_of(const json& array) {
  double m = -std::numeric_limits<double>::infinity();
  for (const json& v : array) m = std::max(m, v.get<double>());
  return m;
}

// ------------------------------------------------------------------ a strict little XML reader

// Throws unless `text` is one well-formed XML element (with an optional declaration and
// comments before it): tags nest and match, attributes are quoted and not repeated, and
// every '&' starts a known or numeric entity.
void check_well_formed_xml(std::string_view text) {
  std::vector<std::string> open;
  std::size_t i = 0;
  bool root_seen = false;
  const auto fail_at = [&](const std::string& why) {
    throw std::runtime_error(why + " at byte " + std::to_string(i));
  };
  const auto check_entities = [&](std::string_view chunk) {
    for (std::size_t k = chunk.find('&'); k != std::string_view::npos; k = chunk.find('&', k + 1)) {
      const std::size_t semi = chunk.find(';', k);
      if (semi == std::string_view::npos) fail_at("'&' without ';'");
      const std::string_view name = chunk.substr(k + 1, semi - k - 1);
      static const std::set<std::string_view> known{"amp", "lt", "gt", "quot", "apos"};
      if (!known.contains(name) && !(name.size() > 1 && name[0] == '#')) fail_at("unknown entity");
    }
  };
  const auto is_name_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ':' || c == '.';
  };
  while (i < text.size()) {
    const std::size_t lt = text.find('<', i);
    const std::string_view between = text.substr(i, lt == std::string_view::npos ? text.size() - i : lt - i);
    if (open.empty() && between.find_first_not_of(" \t\r\n") != std::string_view::npos) fail_at("text outside the root");
    if (between.find('>') != std::string_view::npos) fail_at("stray '>'");
    check_entities(between);
    if (lt == std::string_view::npos) break;
    i = lt;
    if (text.substr(i, 4) == "<!--") {
      const std::size_t end = text.find("-->", i);
      if (end == std::string_view::npos) fail_at("unclosed comment");
      i = end + 3;
      continue;
    }
    if (text.substr(i, 2) == "<?") {
      if (root_seen) fail_at("declaration after the root");
      const std::size_t end = text.find("?>", i);
      if (end == std::string_view::npos) fail_at("unclosed declaration");
      i = end + 2;
      continue;
    }
    const bool closing = text.substr(i, 2) == "</";
    std::size_t k = i + (closing ? 2 : 1);
    const std::size_t name_start = k;
    while (k < text.size() && is_name_char(text[k])) ++k;
    const std::string name(text.substr(name_start, k - name_start));
    if (name.empty()) fail_at("tag without a name");
    if (closing) {
      while (k < text.size() && std::isspace(static_cast<unsigned char>(text[k]))) ++k;
      if (k >= text.size() || text[k] != '>') fail_at("malformed end tag");
      if (open.empty() || open.back() != name) fail_at("end tag </" + name + "> does not match");
      open.pop_back();
      i = k + 1;
      continue;
    }
    if (open.empty() && root_seen) fail_at("a second root element");
    root_seen = true;
    std::set<std::string> attributes;
    while (true) {
      while (k < text.size() && std::isspace(static_cast<unsigned char>(text[k]))) ++k;
      if (k >= text.size()) fail_at("unclosed tag");
      if (text[k] == '>') {
        open.push_back(name);
        i = k + 1;
        break;
      }
      if (text.substr(k, 2) == "/>") {
        i = k + 2;
        break;
      }
      const std::size_t a = k;
      while (k < text.size() && is_name_char(text[k])) ++k;
      const std::string attribute(text.substr(a, k - a));
      if (attribute.empty() || k >= text.size() || text[k] != '=') fail_at("malformed attribute in <" + name + ">");
      if (!attributes.insert(attribute).second) fail_at("repeated attribute " + attribute);
      ++k;
      if (k >= text.size() || (text[k] != '"' && text[k] != '\'')) fail_at("unquoted attribute " + attribute);
      const char quote = text[k];
      const std::size_t close = text.find(quote, k + 1);
      if (close == std::string_view::npos) fail_at("unclosed attribute value");
      const std::string_view value = text.substr(k + 1, close - k - 1);
      if (value.find('<') != std::string_view::npos) fail_at("'<' in an attribute value");
      check_entities(value);
      k = close + 1;
    }
  }
  if (!open.empty()) throw std::runtime_error("unclosed element <" + open.back() + ">");
  if (!root_seen) throw std::runtime_error("no root element");
}

// ------------------------------------------------------------------ checks every plan must pass

// The JSON fields docs/cli.md promises, and the relations between them.
void check_plan_json(const json& j) {
  const int ranks = j.at("ranks").get<int>();
  const int microbatches = j.at("microbatches").get<int>();
  REQUIRE(ranks >= 1);
  REQUIRE(microbatches >= 1);

  const json& partition = j.at("partition");
  const json& stages = partition.at("stages");
  REQUIRE(stages.size() == static_cast<std::size_t>(ranks));
  double slowest = 0.0;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const json& st = stages[s];
    for (const char* key : {"first_layer", "last_layer", "compute_time", "comm_time", "memory_bytes"}) {
      INFO("partition.stages[" << s << "]." << key);
      REQUIRE(st.contains(key));
    }
    CHECK(st.at("first_layer").get<int>() <= st.at("last_layer").get<int>());
    if (s > 0) CHECK(st.at("first_layer").get<int>() == stages[s - 1].at("last_layer").get<int>() + 1);
    CHECK(st.at("compute_time").get<double>() > 0.0);
    CHECK(st.at("comm_time").get<double>() >= 0.0);
    CHECK(st.at("memory_bytes").get<double>() >= 0.0);
    const double incoming = s == 0 ? 0.0 : stages[s - 1].at("comm_time").get<double>();
    slowest = std::max(slowest, st.at("compute_time").get<double>() + incoming + st.at("comm_time").get<double>());
  }
  CHECK(stages.front().at("first_layer").get<int>() == 0);
  if (j.at("model").at("layers").get<int>() > 0) {
    CHECK(stages.back().at("last_layer").get<int>() == j.at("model").at("layers").get<int>() - 1);
  }
  CHECK(partition.at("bottleneck_time").get<double>() == Approx(slowest).epsilon(1e-12));

  REQUIRE(j.at("schedules").is_array());
  REQUIRE(!j.at("schedules").empty());
  for (const json& s : j.at("schedules")) {
    INFO("schedule " << s.at("name"));
    for (const char* key : {"name", "makespan", "max_rank_span", "bubble_fraction", "peak_activations", "valid"}) {
      INFO("field " << key);
      REQUIRE(s.contains(key));
    }
    REQUIRE(s.at("valid") == true);
    const double makespan = s.at("makespan").get<double>();
    REQUIRE(makespan > 0.0);
    const json& busy = s.at("busy");
    const json& span = s.at("span");
    REQUIRE(busy.size() == static_cast<std::size_t>(ranks));
    REQUIRE(span.size() == static_cast<std::size_t>(ranks));
    REQUIRE(s.at("peak_activations").size() == static_cast<std::size_t>(ranks));
    double idle = 0.0;
    for (const json& b : busy) {
      CHECK(b.get<double>() <= makespan * (1 + 1e-12));
      idle += makespan - b.get<double>();
    }
    CHECK(s.at("bubble_fraction").get<double>() == Approx(idle / (ranks * makespan)).margin(1e-12));
    CHECK(s.at("max_rank_span").get<double>() == Approx(max_of(span)).epsilon(1e-12));
    CHECK(s.at("max_rank_span").get<double>() <= makespan * (1 + 1e-12));
    CHECK(s.at("ideal_time").get<double>() == Approx(max_of(busy)).epsilon(1e-12));
    CHECK(s.at("throughput").at("microbatches_per_unit").get<double>() ==
          Approx(microbatches / makespan).epsilon(1e-12));
    for (const json& p : s.at("peak_activations")) CHECK(p.get<double>() >= 0.0);
  }

  // The recommendation: the fastest valid training schedule that fits.
  std::optional<std::string> best;
  double best_time = std::numeric_limits<double>::infinity();
  for (const json& s : j.at("schedules")) {
    if (!s.at("training").get<bool>() || !s.at("fits").get<bool>()) continue;
    if (s.at("makespan").get<double>() < best_time) {
      best_time = s.at("makespan").get<double>();
      best = s.at("name").get<std::string>();
    }
  }
  if (best) {
    REQUIRE(j.at("recommended").is_string());
    CHECK(schedule_named(j, j.at("recommended").get<std::string>()).at("makespan").get<double>() == best_time);
  } else {
    CHECK(j.at("recommended").is_null());
  }
  CHECK(!j.at("recommendation_reason").get<std::string>().empty());
}

}  // namespace

// ------------------------------------------------------------------ ppsched-plan

TEST_CASE("uniform stages give the textbook makespans and memory", "[cli][plan]") {
  // p = 4, m = 8, F = BI = BW = 1 (B = 2), free communication.
  const int p = 4, m = 8;
  const double f = 1, bi = 1, bw = 1, b = bi + bw;
  const json j = plan_json({"--stage-cost", "1,1,1", "--stages", "4", "--microbatches", "8"});
  check_plan_json(j);
  // GPipe and 1F1B: (m + p - 1)(F + B).
  CHECK(schedule_named(j, "gpipe").at("makespan").get<double>() == Approx((m + p - 1) * (f + b)));
  CHECK(schedule_named(j, "1f1b").at("makespan").get<double>() == Approx((m + p - 1) * (f + b)));
  // Interleaved 1F1B with v = 2: m(F + B) + (p - 1)(F + B) / v.
  CHECK(schedule_named(j, "interleaved-1f1b").at("makespan").get<double>() == Approx(m * (f + b) + (p - 1) * (f + b) / 2));
  // ZB-H1: m(F + B) + (p - 1)(F + BI - BW).
  CHECK(schedule_named(j, "zb-h1").at("makespan").get<double>() == Approx(m * (f + b) + (p - 1) * (f + bi - bw)));
  // Memory: GPipe stores all m on every rank; 1F1B stores p - r on rank r.
  const json& gpipe_peaks = schedule_named(j, "gpipe").at("peak_activations");
  const json& one_f_one_b_peaks = schedule_named(j, "1f1b").at("peak_activations");
  for (int r = 0; r < p; ++r) {
    CHECK(gpipe_peaks[r].get<double>() == m);
    CHECK(one_f_one_b_peaks[r].get<double>() == p - r);
  }
  // Every training family appears; forward-only is there but never recommended.
  std::set<std::string> names;
  for (const json& s : j.at("schedules")) names.insert(s.at("name").get<std::string>());
  for (const char* name : {"gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "zb-h1", "zb-h2", "zb-v", "forward-only"}) {
    CHECK(names.contains(name));
  }
  CHECK(schedule_named(j, "forward-only").at("training") == false);
  CHECK(j.at("recommended") != "forward-only");
}

TEST_CASE("the default run plans the GPT-style model on 8 ranks with 32 micro-batches", "[cli][plan]") {
  const Run r = plan({});
  INFO(r.err);
  REQUIRE(r.status == 0);
  for (const char* text : {"GPT-style", "embedding", "lm head", "gpipe", "1f1b", "zb-v", "Recommended:"}) {
    CHECK(r.out.find(text) != std::string::npos);
  }
  const json j = plan_json({});
  check_plan_json(j);
  CHECK(j.at("ranks") == 8);
  CHECK(j.at("microbatches") == 32);
  CHECK(j.at("model").at("layers") == 34);  // embedding, 32 blocks, LM head
  CHECK(j.at("model").at("unit") == "ms");
  // The example profile holds the same model: the same plan comes out.
  json from_file = plan_json({"--profile", profile("gpt.json")});
  json embedded = j;
  from_file.erase("model");
  embedded.erase("model");
  CHECK(from_file == embedded);
}

TEST_CASE("a byte cap keeps only the schedules whose peak memory fits", "[cli][plan]") {
  const json free = plan_json({});
  // A cap just above 1F1B's peak: the schedules that store more must drop out.
  const double cap = max_of(schedule_named(free, "1f1b").at("peak_memory_bytes")) + 1;
  const json capped = plan_json({"--memory-cap-bytes", std::to_string(static_cast<long long>(cap))});
  check_plan_json(capped);
  for (const json& s : capped.at("schedules")) {
    INFO(s.at("name"));
    CHECK(s.at("fits").get<bool>() == (max_of(s.at("peak_memory_bytes")) <= cap));
  }
  CHECK(schedule_named(capped, "gpipe").at("fits") == false);  // it stores all 32 micro-batches
  // Peak memory is the stage's parameters (with optimizer state) plus its peak activations.
  const json& one_f_one_b = schedule_named(free, "1f1b");
  const json& stages = free.at("partition").at("stages");
  for (std::size_t r = 0; r < stages.size(); ++r) {
    const double expected = stages[r].at("memory_bytes").get<double>() +
                            (8.0 - static_cast<double>(r)) * stages[r].at("activation_bytes").get<double>();
    CHECK(one_f_one_b.at("peak_memory_bytes")[r].get<double>() == Approx(expected).epsilon(1e-12));
  }
}

TEST_CASE("skip connections: the bytes at each cut are every tensor crossing it", "[cli][plan]") {
  const json model = json::parse(read_file(profile("resnet.json")));
  const json& layers = model.at("layers");
  // The profile is numbered in topological order, so a stage's positions are layer indices.
  std::vector<std::size_t> last_reader(layers.size(), 0);
  for (const json& e : model.at("edges")) {
    const auto from = e[0].get<std::size_t>(), to = e[1].get<std::size_t>();
    last_reader[from] = std::max(last_reader[from], to);
  }
  const double latency = model.at("link").at("latency").get<double>();
  const double bandwidth = model.at("link").at("bandwidth").get<double>();
  // Uniform layer counts (17, 17, 16, 16) cut inside a residual block, where the block's
  // input crosses the cut beside the main path; the optimal split is checked the same way.
  for (const char* method : {"uniform", "optimal"}) {
    INFO("--partition " << method);
    const json j = plan_json({"--profile", profile("resnet.json"), "--stages", "4", "--microbatches", "8",
                              "--partition", method});
    check_plan_json(j);
    CHECK(j.at("model").at("layers").get<std::size_t>() == layers.size());
    int most_tensors = 0;
    const json& stages = j.at("partition").at("stages");
    for (std::size_t s = 0; s + 1 < stages.size(); ++s) {
      const auto cut = stages[s].at("last_layer").get<std::size_t>() + 1;
      double bytes = 0.0;
      int tensors = 0;
      for (std::size_t l = 0; l < cut; ++l) {
        if (last_reader[l] >= cut) {
          bytes += layers[l].at("output_bytes").get<double>();
          ++tensors;
        }
      }
      CHECK(stages[s].at("output_bytes").get<double>() == bytes);
      // Each crossing tensor pays the link's latency and its bytes over the bandwidth.
      CHECK(stages[s].at("comm_time").get<double>() == Approx(tensors * latency + bytes / bandwidth).epsilon(1e-12));
      most_tensors = std::max(most_tensors, tensors);
    }
    if (std::string_view(method) == "uniform") CHECK(most_tensors == 2);
  }
}

TEST_CASE("a heterogeneous machine: devices set the ranks, speeds scale the stage times", "[cli][plan]") {
  const json j = plan_json({"--profile", profile("heterogeneous.json")});
  check_plan_json(j);
  const json model = json::parse(read_file(profile("heterogeneous.json")));
  std::vector<double> speed, memory;
  for (const json& d : model.at("devices")) {
    for (int k = 0; k < d.value("count", 1); ++k) {
      speed.push_back(d.at("speed").get<double>());
      memory.push_back(d.at("memory_bytes").get<double>());
    }
  }
  REQUIRE(j.at("ranks").get<std::size_t>() == speed.size());
  CHECK(j.at("memory_cap").at("per_rank_bytes").get<std::vector<double>>() == memory);
  const json& layers = model.at("layers");
  const json& stages = j.at("partition").at("stages");
  std::size_t fewest_on_fast = layers.size(), most_on_slow = 0;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    double work = 0.0;
    const auto first = stages[s].at("first_layer").get<std::size_t>(), last = stages[s].at("last_layer").get<std::size_t>();
    for (std::size_t l = first; l <= last; ++l) {
      work += layers[l].at("forward").get<double>() + layers[l].value("backward_input", 0.0) +
              layers[l].value("backward_weight", 0.0);
    }
    CHECK(stages[s].at("compute_time").get<double>() == Approx(work / speed[s]).epsilon(1e-12));
    const std::size_t count = last - first + 1;
    if (speed[s] == 1.0) fewest_on_fast = std::min(fewest_on_fast, count);
    if (speed[s] < 1.0) most_on_slow = std::max(most_on_slow, count);
  }
  CHECK(fewest_on_fast > most_on_slow);  // the faster devices get more layers
  // --stages must agree with the devices listed.
  const Run r = plan({"--profile", profile("heterogeneous.json"), "--stages", "4"});
  CHECK(r.status == 2);
  CHECK(r.err.find("lists 8 devices") != std::string::npos);
}

TEST_CASE("--layers partitions identical layers; --partition uniform splits as DeepSpeed does", "[cli][plan]") {
  const json optimal = plan_json({"--layers", "10", "--stages", "4", "--microbatches", "8", "--schedule", "1f1b"});
  check_plan_json(optimal);
  const json uniform = plan_json({"--layers", "10", "--stages", "4", "--microbatches", "8", "--schedule", "1f1b",
                                  "--partition", "uniform"});
  check_plan_json(uniform);
  // 10 layers on 4 stages: the first 10 % 4 = 2 stages get one layer more.
  const std::vector<int> expected{3, 3, 2, 2};
  const json& stages = uniform.at("partition").at("stages");
  for (std::size_t s = 0; s < 4; ++s) {
    CHECK(stages[s].at("last_layer").get<int>() - stages[s].at("first_layer").get<int>() + 1 == expected[s]);
  }
  // Either split leaves some stage with 3 layers, so the bottlenecks agree.
  CHECK(optimal.at("partition").at("bottleneck_time").get<double>() == 9.0);
  CHECK(uniform.at("partition").at("bottleneck_time").get<double>() == 9.0);
}

TEST_CASE("all skips, with the reason, the families this request cannot build", "[cli][plan]") {
  // 8 layers on 8 ranks leave nothing to cut into 16 virtual stages.
  const json j = plan_json({"--layers", "8", "--stages", "8", "--microbatches", "8"});
  check_plan_json(j);
  std::set<std::string> skipped;
  for (const json& s : j.at("skipped")) {
    const std::string name = s.at("name").get<std::string>(), reason = s.at("reason").get<std::string>();
    skipped.insert(name);
    // The cut, or a rule of the family's own (dualpipev wants m >= 2p) that it names.
    INFO(name << ": " << reason);
    CHECK((reason.find("16 stages") != std::string::npos || reason.find("schedule '" + name + "'") == 0));
  }
  // Every two-chunk family is among them (the V-shaped ones included, whatever their number),
  // and every family that was built has one chunk per rank.
  for (const char* chunked : {"interleaved-1f1b", "looped-bfs", "zb-v"}) CHECK(skipped.contains(chunked));
  for (const json& s : j.at("schedules")) CHECK(s.at("chunks") == 1);
  // Interleaving needs m a multiple of p: all skips it, saying so.
  const json k = plan_json({"--stage-cost", "1,1,1", "--stages", "4", "--microbatches", "6"});
  bool interleaved_skipped = false;
  for (const json& s : k.at("skipped")) {
    if (s.at("name") != "interleaved-1f1b") continue;
    interleaved_skipped = true;
    CHECK(s.at("reason").get<std::string>().find("multiple of p") != std::string::npos);
  }
  CHECK(interleaved_skipped);
  for (const json& s : k.at("schedules")) CHECK(s.at("name") != "interleaved-1f1b");
  // Named, the same requests are errors.
  const Run r = plan({"--layers", "8", "--stages", "8", "--microbatches", "8", "--schedule", "zb-v"});
  CHECK(r.status == 2);
  CHECK(r.err.find("fewer --chunks or --stages") != std::string::npos);
}

TEST_CASE("--chunks sets the virtual stages of the looped schedules", "[cli][plan]") {
  const json j = plan_json({"--stage-cost", "1,1,1", "--stages", "4", "--microbatches", "8", "--chunks", "4",
                            "--schedule", "interleaved-1f1b,looped-bfs,zb-v"});
  check_plan_json(j);
  CHECK(schedule_named(j, "interleaved-1f1b").at("virtual_stages") == 16);
  CHECK(schedule_named(j, "looped-bfs").at("virtual_stages") == 16);
  CHECK(schedule_named(j, "zb-v").at("virtual_stages") == 8);  // the V always has two chunks
  // Interleaving with v = 4: m(F + B) + (p - 1)(F + B) / v, with F and B per rank.
  CHECK(schedule_named(j, "interleaved-1f1b").at("makespan").get<double>() == Approx(8 * 3 + 3 * 3 / 4.0));
}

TEST_CASE("the closed-form bubble shown for uniform stages is the simulated one", "[cli][plan]") {
  // T_BW <= T_F <= T_BI and m >= 2p - 1: every closed form in ppsched/sim/analytic.hpp holds.
  const json j = plan_json({"--stage-cost", "1,2,1", "--stages", "4", "--microbatches", "8"});
  int with_formula = 0;
  for (const json& s : j.at("schedules")) {
    INFO(s.at("name"));
    if (s.at("analytic").is_null()) continue;
    ++with_formula;
    const double idle = s.at("analytic").at("idle_per_rank").get<double>();
    if (s.at("analytic").at("formula").get<std::string>().find("rank 0's span") != std::string::npos) {
      // ZB-H2: the idle inside rank 0's span; no rank idles more inside its own.
      CHECK(s.at("span")[0].get<double>() - s.at("busy")[0].get<double>() == Approx(idle).margin(1e-9));
      for (std::size_t r = 0; r < 4; ++r) {
        CHECK(s.at("span")[r].get<double>() - s.at("busy")[r].get<double>() <= idle + 1e-9);
      }
    } else {
      for (std::size_t r = 0; r < 4; ++r) {  // every rank idles the formula's time in the step
        CHECK(s.at("makespan").get<double>() - s.at("busy")[r].get<double>() == Approx(idle).margin(1e-9));
      }
    }
  }
  // gpipe, 1f1b, interleaved-1f1b, looped-bfs, zb-h1, zb-h2, interleaved-zb, forward-only: every family
  // whose record has a closed form (looped-bfs's was left out of the JSON before the forms became family data).
  CHECK(with_formula == 8);
  CHECK_FALSE(schedule_named(j, "looped-bfs").at("analytic").is_null());
  // With communication the formulas do not apply, and none is shown.
  const json c = plan_json({"--stage-cost", "1,2,1", "--stages", "4", "--microbatches", "8", "--comm", "0.1"});
  for (const json& s : c.at("schedules")) CHECK(s.at("analytic").is_null());
}

TEST_CASE("a memory cap in micro-batches excludes the schedules that exceed it", "[cli][plan]") {
  const json free = plan_json({"--stage-cost", "1,1,1", "--stages", "4", "--microbatches", "8"});
  const double cap = 4;
  const json capped = plan_json({"--stage-cost", "1,1,1", "--stages", "4", "--microbatches", "8",
                                 "--memory-cap-microbatches", "4"});
  check_plan_json(capped);
  CHECK(capped.at("memory_cap").at("microbatches").get<double>() == cap);
  for (const json& s : capped.at("schedules")) {
    INFO(s.at("name"));
    CHECK(s.at("fits").get<bool>() == (max_of(s.at("peak_activations")) <= cap));
    if (!s.at("fits").get<bool>()) CHECK(s.at("fit_problem").get<std::string>().find("cap") != std::string::npos);
  }
  // A cap so tight that only 1F1B-like memory fits changes the choice when the fastest
  // schedule uncapped stores more; the reason then names the faster one.
  const json tight = plan_json({"--stage-cost", "1,1,1", "--stages", "4", "--microbatches", "8",
                                "--memory-cap-microbatches", "3.5"});
  check_plan_json(tight);
  const std::string fastest_uncapped = free.at("recommended").get<std::string>();
  if (max_of(schedule_named(free, fastest_uncapped).at("peak_activations")) > 3.5) {
    CHECK(tight.at("recommended") != fastest_uncapped);
    CHECK(tight.at("recommendation_reason").get<std::string>().find(fastest_uncapped) != std::string::npos);
  }
  // No schedule fits a cap below one micro-batch.
  const json none = plan_json({"--stage-cost", "1,1,1", "--stages", "4", "--microbatches", "8",
                               "--memory-cap-microbatches", "0.5"});
  CHECK(none.at("recommended").is_null());
}

TEST_CASE("--schedule auto: the search's pick is never slower than the best family that fits", "[cli][plan]") {
  for (const std::vector<std::string>& model :
       {std::vector<std::string>{"--stage-cost", "1,2,1", "--stages", "4", "--microbatches", "8"},
        std::vector<std::string>{},  // the GPT-style default
        std::vector<std::string>{"--memory-cap-microbatches", "8"}, std::vector<std::string>{"--memory-cap-bytes", "32GiB"}}) {
    std::string joined;
    for (const std::string& a : model) joined += a + ' ';
    INFO("ppsched-plan " << joined);
    std::vector<std::string> args = model;
    args.insert(args.end(), {"--schedule", "auto"});
    const json a = plan_json(args);
    check_plan_json(a);
    REQUIRE(a.at("schedules").size() == 1);
    const json& pick = a.at("schedules")[0];
    CHECK(a.at("recommended") == pick.at("name"));
    CHECK(pick.at("fits") == true);
    // Every fixed training family was a candidate.
    std::set<std::string> candidates;
    for (const json& c : a.at("search").at("candidates")) candidates.insert(c.at("name").get<std::string>());
    for (const char* family : {"gpipe", "1f1b", "zb-h1", "zb-h2", "zb-v"}) CHECK(candidates.contains(family));
    // The families' own comparison on the same model and caps.
    const json all = plan_json(model);
    for (const json& s : all.at("schedules")) {
      if (!s.at("training").get<bool>() || !s.at("fits").get<bool>()) continue;
      INFO("family " << s.at("name"));
      CHECK(pick.at("makespan").get<double>() <= s.at("makespan").get<double>() * (1 + 1e-9));
    }
  }
  // Nothing keeps to a cap below one micro-batch: nothing is recommended, and the line says why.
  const json none = plan_json({"--stage-cost", "1,1,1", "--stages", "4", "--microbatches", "8", "--schedule", "auto",
                               "--memory-cap-microbatches", "0.5"});
  CHECK(none.at("recommended").is_null());
  CHECK(none.at("schedules").empty());
  CHECK(none.at("recommendation_reason").get<std::string>().find("cap") != std::string::npos);
}

TEST_CASE("--objective: span and memory within a bound pick by their measure, and both figures are reported",
          "[cli][plan][objective]") {
  const std::vector<std::string> model{"--stage-cost", "1,1,1", "--stages", "4", "--microbatches", "8", "--comm", "0.1"};
  const auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = model;
    args.insert(args.end(), extra.begin(), extra.end());
    return plan_json(args);
  };
  const json by_makespan = with({});
  CHECK(by_makespan.at("objective") == "makespan");
  CHECK(with({"--objective", "makespan"}) == by_makespan);  // the default, spelled out
  const json& fastest = schedule_named(by_makespan, by_makespan.at("recommended").get<std::string>());
  std::vector<const json*> training;
  for (const json& s : by_makespan.at("schedules")) {
    if (s.at("training").get<bool>() && s.at("fits").get<bool>()) training.push_back(&s);
  }
  REQUIRE(training.size() > 2);

  // Span: no fitting training schedule has a shorter longest rank span than the pick's.
  const json by_span = with({"--objective", "span"});
  CHECK(by_span.at("objective") == "span");
  const json& shortest = schedule_named(by_span, by_span.at("recommended").get<std::string>());
  CHECK(shortest.at("max_rank_span").get<double>() <= fastest.at("max_rank_span").get<double>());
  for (const json* s : training) CHECK(shortest.at("max_rank_span").get<double>() <= s->at("max_rank_span").get<double>());
  CHECK(by_span.at("schedules") == by_makespan.at("schedules"));  // the objective only ranks

  // Memory within a bound halfway between the fastest and the slowest training schedule.
  double slowest = 0.0;
  for (const json* s : training) slowest = std::max(slowest, s->at("makespan").get<double>());
  const double bound = (fastest.at("makespan").get<double>() + slowest) / 2;
  const json by_memory = with({"--objective", "memory:" + std::to_string(bound)});
  CHECK(by_memory.at("objective").get<std::string>().rfind("memory:", 0) == 0);
  const json& least = schedule_named(by_memory, by_memory.at("recommended").get<std::string>());
  CHECK(least.at("makespan").get<double>() <= bound);
  for (const json* s : training) {
    if (s->at("makespan").get<double>() > bound) continue;
    INFO(s->at("name"));
    CHECK(max_of(least.at("peak_activations")) <= max_of(s->at("peak_activations")));
  }
  // Below the fastest makespan nothing is within the bound: nothing is recommended.
  const json none = with({"--objective", "memory:" + std::to_string(fastest.at("makespan").get<double>() / 2)});
  CHECK(none.at("recommended").is_null());
  CHECK(none.at("recommendation_reason").get<std::string>().find(by_makespan.at("recommended").get<std::string>()) !=
        std::string::npos);

  // The search takes the objective too, and reports each simulated candidate's span.
  const json auto_span = with({"--schedule", "auto", "--objective", "span"});
  const json auto_fast = with({"--schedule", "auto"});
  REQUIRE(auto_span.at("schedules").size() == 1);
  REQUIRE(auto_fast.at("schedules").size() == 1);
  CHECK(auto_span.at("schedules")[0].at("max_rank_span").get<double>() <=
        auto_fast.at("schedules")[0].at("max_rank_span").get<double>() * (1 + 1e-9));
  for (const json& c : auto_span.at("search").at("candidates")) {
    if (c.at("timing") == "simulated") CHECK(c.at("span").is_number());
  }
}

TEST_CASE("the report names every schedule and the recommendation", "[cli][plan]") {
  const Run r = plan({"--stage-cost", "1,2,1", "--stages", "4", "--microbatches", "8"});
  INFO(r.err);
  REQUIRE(r.status == 0);
  for (const char* text : {"Partition", "gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zb-v", "Recommended:"}) {
    CHECK(r.out.find(text) != std::string::npos);
  }
  // The recommended name in the report is the JSON's.
  const json j = plan_json({"--stage-cost", "1,2,1", "--stages", "4", "--microbatches", "8"});
  CHECK(r.out.find("Recommended: " + j.at("recommended").get<std::string>()) != std::string::npos);
}

TEST_CASE("trace, SVG and CSV outputs are well-formed and the CSV validates", "[cli][plan]") {
  ScratchDir dir;
  const std::string trace = dir.file("trace.json"), svg = dir.file("gantt.svg"), csv = dir.file("1f1b.csv");
  const json j = plan_json({"--stage-cost", "1,1,1", "--stages", "4", "--microbatches", "6", "--schedule", "1f1b",
                            "--trace", trace, "--svg", svg, "--csv", csv});
  CHECK(dir.entries() == std::vector<std::string>{"1f1b.csv", "gantt.svg", "trace.json"});  // no temporaries left

  // A run that cannot write one of its files replaces none of them.
  {
    std::ofstream(csv) << "old";
  }
  const Run failed = plan({"--stage-cost", "1,1,1", "--stages", "4", "--microbatches", "6", "--schedule", "1f1b",
                           "--csv", csv, "--svg", dir.file("missing/gantt.svg")});
  CHECK(failed.status == 2);
  CHECK(failed.err.find("missing") != std::string::npos);
  CHECK(read_file(csv) == "old");
  CHECK(dir.entries() == std::vector<std::string>{"1f1b.csv", "gantt.svg", "trace.json"});
  const json again = plan_json({"--stage-cost", "1,1,1", "--stages", "4", "--microbatches", "6", "--schedule", "1f1b",
                                "--csv", csv});
  CHECK(again.at("outputs").at("csv") == csv);

  const json t = json::parse(read_file(trace));
  REQUIRE(t.contains("traceEvents"));
  std::size_t compute_events = 0;
  for (const json& e : t.at("traceEvents")) {
    if (e.at("ph") == "X" && (e.at("name").get<std::string>()[0] == 'F' || e.at("name").get<std::string>()[0] == 'B')) {
      ++compute_events;
    }
  }
  CHECK(compute_events == 4u * 6u * 2u);  // one F and one B per stage and micro-batch

  CHECK_NOTHROW(check_well_formed_xml(read_file(svg)));

  // The CSV round-trips: --validate reads it back, says OK, and simulates the same step.
  const Run v = plan({"--stage-cost", "1,1,1", "--validate", csv});
  INFO(v.err);
  CHECK(v.status == 0);
  CHECK(v.out.find("OK") != std::string::npos);
  const json vj = plan_json({"--stage-cost", "1,1,1", "--validate", csv});
  CHECK(vj.at("valid") == true);
  CHECK(vj.at("makespan").get<double>() == schedule_named(j, "1f1b").at("makespan").get<double>());
}

TEST_CASE("every family's CSV validates and simulates as the generated schedule did", "[cli][plan]") {
  ScratchDir dir;
  for (const char* family : {"gpipe", "interleaved-1f1b", "looped-bfs", "zb-h1", "zb-h2", "zb-v", "forward-only"}) {
    INFO(family);
    const std::string csv = dir.file(std::string(family) + ".csv");
    const std::vector<std::string> model{"--stage-cost", "2,1,1", "--comm", "0.25"};
    std::vector<std::string> args = model;
    args.insert(args.end(), {"--stages", "4", "--microbatches", "8", "--schedule", family, "--csv", csv});
    const json generated = plan_json(args);
    args = model;
    args.insert(args.end(), {"--validate", csv});
    const json checked = plan_json(args);
    CHECK(checked.at("valid") == true);
    const json& g = schedule_named(generated, family);
    CHECK(checked.at("makespan").get<double>() == g.at("makespan").get<double>());
    CHECK(checked.at("peak_activations") == g.at("peak_activations"));
  }
}

TEST_CASE("--validate lists each problem of a broken schedule and exits 1", "[cli][plan]") {
  ScratchDir dir;
  // Rank 1 runs the backward of micro-batch 0 before its forward.
  const std::string csv = dir.file("broken.csv");
  {
    std::ofstream out(csv);
    out << "0F0,0B0\n1B0,1F0\n";
  }
  const Run r = plan({"--stage-cost", "1,1,1", "--validate", csv});
  CHECK(r.status == 1);
  CHECK(r.out.find("OK") == std::string::npos);
  CHECK(r.out.find("problem") != std::string::npos);
}

TEST_CASE("--validate: a micro-batch beyond --microbatches names the flag, not the library's option", "[cli][plan]") {
  ScratchDir dir;
  const std::string csv = dir.file("zbv.csv");  // micro-batches 0 .. 7
  REQUIRE(plan({"--stage-cost", "1,2,1", "--stages", "4", "--microbatches", "8", "--schedule", "zb-v", "--csv", csv})
              .status == 0);
  const Run r = plan({"--stage-cost", "1,2,1", "--validate", csv, "--microbatches", "4"});
  INFO("stderr: " << r.err);
  CHECK(r.status == 2);
  CHECK(r.err.find("micro-batch 7 but --microbatches is 4") != std::string::npos);
  CHECK(r.err.find("--microbatches 8 or more") != std::string::npos);
  CHECK(r.err.find("CsvReadOptions") == std::string::npos);
  // More micro-batches than the file uses: the missing ones are the schedule's problems.
  const Run more = plan({"--stage-cost", "1,2,1", "--validate", csv, "--microbatches", "9"});
  CHECK(more.status == 1);
  CHECK(plan({"--stage-cost", "1,2,1", "--validate", csv, "--microbatches", "8"}).status == 0);
}

TEST_CASE("bad input exits 2 and says what would work", "[cli][plan]") {
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> expected;  // all in stderr
  };
  ScratchDir dir;
  const std::string not_json = dir.file("bad.json");
  {
    std::ofstream out(not_json);
    out << "{\n  \"layers\": [\n    {\"name\": \"a\",, }\n  ]\n}\n";
  }
  const std::string bad_csv = dir.file("bad.csv");
  {
    std::ofstream out(bad_csv);
    out << "0F0,0B0\n1F0,1X0\n";
  }
  const std::vector<Case> cases{
      {{"--stagse", "4"}, {"unknown flag '--stagse'", "did you mean --stages", "--microbatches"}},
      {{"4"}, {"unexpected argument '4'"}},
      {{"--schedule", "2f2b"}, {"unknown schedule '2f2b'", "gpipe", "zb-v", "all"}},
      {{"--stages", "0"}, {"--stages", "out of range", "1 to"}},
      {{"--stages", "four"}, {"--stages", "not a whole number"}},
      {{"--microbatches"}, {"--microbatches", "needs a value"}},
      {{"--stage-cost", "1,1"}, {"--stage-cost", "three comma-separated numbers"}},
      {{"--stage-cost", "1,nan,1"}, {"--stage-cost", "not a finite number"}},
      {{"--comm", "-1"}, {"--comm", "out of range"}},
      {{"--w-memory-ratio", "-0.5"}, {"--w-memory-ratio", "out of range", "at least 0"}},
      {{"--memory-cap-bytes", "12 parsecs"}, {"--memory-cap-bytes", "GiB"}},
      {{"--layers", "8", "--stage-cost", "1,1,1"}, {"both describe the model"}},
      {{"--stages", "4", "--stages", "5"}, {"more than once"}},
      {{"--stage-cost", "1,1,1", "--schedule", "1f1b,zb-v", "--chunks", "3"}, {"--chunks", "interleaved-1f1b"}},
      {{"--partition", "greedy"}, {"unknown method 'greedy'", "optimal, uniform, params"}},
      {{"--stage-cost", "1,1,1", "--bandwidth", "10"}, {"--bandwidth", "--stage-cost"}},
      {{"--stage-cost", "1,1,1", "--schedule", "interleaved-1f1b", "--stages", "4", "--microbatches", "6"},
       {"interleaved-1f1b", "m"}},
      {{"--profile", dir.file("missing.json")}, {dir.file("missing.json")}},
      {{"--profile", not_json}, {not_json, "line 3"}},
      {{"--stage-cost", "1,1,1", "--validate", bad_csv}, {bad_csv, "row 2", "1X0"}},
      {{"--stage-cost", "1,1,1", "--trace", dir.file("no/such/dir/t.json")}, {"no/such/dir"}},
      {{"--objective", "throughput"}, {"--objective", "unknown objective 'throughput'", "makespan, span, memory"}},
      {{"--objective", "memory:0"}, {"--objective", "out of range", "greater than 0"}},
      {{"--objective", "memory:soon"}, {"--objective", "not a finite number"}},
      {{"--objective", "span", "--validate", bad_csv}, {"--objective", "drop --objective"}},
  };
  for (const Case& c : cases) {
    std::string joined;
    for (const std::string& a : c.args) joined += a + ' ';
    INFO("ppsched-plan " << joined);
    const Run r = plan(c.args);
    INFO("stderr: " << r.err);
    CHECK(r.status == 2);
    CHECK(r.out.empty());
    for (const std::string& text : c.expected) CHECK(r.err.find(text) != std::string::npos);
  }
  CHECK(dir.entries() == std::vector<std::string>{"bad.csv", "bad.json"});  // nothing written
}

TEST_CASE("--help lists every flag and exits 0", "[cli][plan]") {
  const Run r = plan({"--help"});
  CHECK(r.status == 0);
  for (const char* flag : {"--profile", "--layers", "--stage-cost", "--stages", "--microbatches", "--chunks", "--comm",
                           "--bandwidth", "--memory-cap-microbatches", "--memory-cap-bytes", "--w-memory-ratio",
                           "--schedule", "--objective", "--json", "--trace", "--svg", "--csv", "--validate"}) {
    CHECK(r.out.find(flag) != std::string::npos);
  }
}

// ------------------------------------------------------------------ ppsched-bubbles

TEST_CASE("ppsched-bubbles sets each rank's measured bubble beside the simulator's",
          "[cli][bubbles][may_skip][needs_bubbles]") {
  if (!bubbles_available()) PPSCHED_SKIP(no_bubbles);
  ScratchDir dir;
  const std::string trace = dir.file("measured.json");
  const Run r = bubbles({"--stage-cost", "1,2,1", "--stages", "2", "--microbatches", "4", "--ms-per-unit", "0.5",
                         "--schedule", "zb-h1", "--steps", "2", "--warmup", "0", "--json", "--trace", trace});
  INFO(r.err);
  REQUIRE(r.status == 0);
  const json j = json::parse(r.out);
  CHECK(j.at("backend") == "cpu");
  CHECK(j.at("unit") == "ms");
  REQUIRE(j.at("schedules").size() == 1);
  const json& s = j.at("schedules")[0];
  CHECK(s.at("name") == "zb-h1");
  CHECK(s.at("steps").size() == 2);

  // The prediction is ppsched-plan's simulation of the same model, in milliseconds.
  const json p = plan_json({"--stage-cost", "1,2,1", "--stages", "2", "--microbatches", "4", "--schedule", "zb-h1"});
  const json& planned = schedule_named(p, "zb-h1");
  const double ms = 0.5;
  CHECK(s.at("predicted").at("makespan").get<double>() == Approx(planned.at("makespan").get<double>() * ms));
  CHECK(s.at("predicted").at("bubble_fraction").get<double>() ==
        Approx(planned.at("bubble_fraction").get<double>()).margin(1e-12));
  const double makespan = planned.at("makespan").get<double>();
  REQUIRE(s.at("ranks").size() == 2);
  for (std::size_t rank = 0; rank < 2; ++rank) {
    const json& rr = s.at("ranks")[rank];
    CHECK(rr.at("rank").get<std::size_t>() == rank);
    const double busy = planned.at("busy")[rank].get<double>();
    CHECK(rr.at("predicted_bubble").get<double>() == Approx((makespan - busy) / makespan).margin(1e-12));
    const double measured = rr.at("measured_bubble").get<double>();
    CHECK(measured >= 0.0);
    CHECK(measured < 1.0);
    CHECK(rr.at("difference_pp").get<double>() ==
          Approx((measured - rr.at("predicted_bubble").get<double>()) * 100).margin(1e-9));
  }

  // The trace is the measured step: valid JSON with one event per compute action.
  const json t = json::parse(read_file(trace));
  std::size_t compute = 0;
  for (const json& e : t.at("traceEvents")) {
    const std::string name = e.value("name", "");
    if (e.value("ph", "") == "X" && !name.empty() && (name[0] == 'F' || name[0] == 'B')) ++compute;
  }
  CHECK(compute == 2u * 4u * 3u);  // F, BI and BW per stage and micro-batch
}

TEST_CASE("ppsched-bubbles rejects bad input with exit 2", "[cli][bubbles][may_skip][needs_bubbles]") {
  if (!bubbles_available()) PPSCHED_SKIP(no_bubbles);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"--backend", "tpu"}, "valid backends: cpu, cuda"},
      {{"--trace", "t.json"}, "one schedule"},
      {{"--schedule", "auto"}, "ppsched-plan --schedule auto"},
      {{"--steps", "0"}, "--steps"},
      {{"--ms-per-unit", "0"}, "--ms-per-unit"},
      {{"--stagse", "2"}, "did you mean --stages"},
      {{"--schedule", "zb-h3"}, "unknown schedule 'zb-h3'"},
      {{"--layers", "6", "--stages", "4", "--schedule", "1f1b,zb-v"}, "schedule 'zb-v': its 8 stages"},
      {{"--layers", "3", "--stages", "4"}, "were left out; gpipe: its 4 stages"},
  };
  for (const auto& [args, expected] : cases) {
    INFO(args.front() << ' ' << args.back());
    const Run r = bubbles(args);
    INFO(r.err);
    CHECK(r.status == 2);
    CHECK(r.err.find(expected) != std::string::npos);
  }
}

// ------------------------------------------------------------------ backends and versions

// The ppsched-bubbles built with the CUDA backend, when this build has one (Meson sets
// PPSCHED_BUBBLES_CUDA then; by hand, it is examples/cli/ppsched-bubbles). The case that runs
// it skips without it: tagged [may_skip][needs_bubbles_cuda], it runs as the test
// cli_bubbles_cuda (tests/meson.build), which a build without CUDA reports as skipped.
std::optional<fs::path> cuda_bubbles_tool() {
  const fs::path path = tool_path("PPSCHED_BUBBLES_CUDA", "cli/ppsched-bubbles");
  if (std::getenv("PPSCHED_BUBBLES_CUDA") != nullptr || fs::exists(path)) return path;
  return std::nullopt;
}

// project('ppsched', ..., version: 'X', ...) in the top-level meson.build.
std::string project_version() {
  const std::string text = read_file(source_root() / "meson.build");
  const std::size_t project = text.find("project(");
  REQUIRE(project != std::string::npos);
  const std::size_t key = text.find("version:", project);
  REQUIRE(key != std::string::npos);
  const std::size_t open = text.find('\'', key);
  const std::size_t close = text.find('\'', open + 1);
  REQUIRE(close != std::string::npos);
  return text.substr(open + 1, close - open - 1);
}

// A ppsched-bubbles (CPU or CUDA build) prints the project's version, with --version and in its JSON.
void check_bubbles_version(const fs::path& tool, const std::string& version) {
  INFO(tool);
  const Run r = run_tool(tool, {"--version"});
  CHECK(r.status == 0);
  CHECK(r.out == "ppsched-bubbles " + version + "\n");
  const Run j = run_tool(tool, {"--stages", "2", "--microbatches", "2", "--schedule", "1f1b", "--ms-per-unit", "0.1",
                                "--steps", "1", "--warmup", "0", "--json"});
  REQUIRE(j.status == 0);
  CHECK(json::parse(j.out).at("version") == version);
}

TEST_CASE("ppsched-plan prints meson.build's project version", "[cli][plan]") {
  const std::string version = project_version();
  CHECK(plan({"--version"}).out == "ppsched-plan " + version + "\n");
  CHECK(plan_json({"--stage-cost", "1,1,1", "--stages", "2", "--microbatches", "2"}).at("version") == version);
}

// The CUDA build's version is checked by the CUDA build's case below.
TEST_CASE("ppsched-bubbles prints meson.build's project version", "[cli][bubbles][may_skip][needs_bubbles]") {
  if (!bubbles_available()) PPSCHED_SKIP(no_bubbles);
  check_bubbles_version(tool_path("PPSCHED_BUBBLES", "ppsched-bubbles"), project_version());
}

TEST_CASE("the CPU-only ppsched-bubbles refuses --backend cuda as bad input, naming the build",
          "[cli][bubbles][may_skip][needs_bubbles]") {
  if (!bubbles_available()) PPSCHED_SKIP(no_bubbles);
  const Run r = bubbles({"--backend", "cuda", "--schedule", "1f1b", "--json"});
  CHECK(r.status == 2);
  CHECK(r.out.empty());
  CHECK(r.err.find("--backend: this ppsched-bubbles was built without CUDA") != std::string::npos);
  CHECK(r.err.find("use --backend cpu") != std::string::npos);
  const Run help = bubbles({"--help"});
  CHECK(help.out.find("backends in this build: cpu\n") != std::string::npos);
}

// No GPU here (the usual case on a build machine): the CUDA build says so with exit 3 and
// cudaGetDeviceCount's answer, and prints no partial output. With a GPU it runs. Its CPU
// backend is compared with the CPU-only build, which is built wherever the CUDA one is.
TEST_CASE("the CUDA build of ppsched-bubbles reports a missing GPU with exit 3, or runs on the GPU",
          "[cli][bubbles][cuda][may_skip][needs_bubbles_cuda]") {
  const auto tool = cuda_bubbles_tool();
  if (!tool) PPSCHED_SKIP("this build has no CUDA ppsched-bubbles (PPSCHED_BUBBLES_CUDA unset)");
  if (!bubbles_available()) PPSCHED_SKIP(no_bubbles << ": the CUDA build's CPU backend has nothing to match");
  check_bubbles_version(*tool, project_version());
  const Run help = run_tool(*tool, {"--help"});
  CHECK(help.out.find("backends in this build: cpu, cuda\n") != std::string::npos);

  const std::vector<std::string> args{"--backend", "cuda", "--schedule", "1f1b", "--stages", "2", "--microbatches", "4",
                                      "--ms-per-unit", "0.2", "--steps", "1", "--json"};
  const Run r = run_tool(*tool, args);
  INFO("status " << r.status << ", stderr: " << r.err);
  REQUIRE((r.status == 0 || r.status == 3));
  if (r.status == 3) {
    CHECK(r.out.empty());
    CHECK(r.err.find("ppsched-bubbles: backend unavailable: ") == 0);
    CHECK(r.err.find("cudaGetDeviceCount") != std::string::npos);
    CHECK(r.err.find("use --backend cpu") != std::string::npos);
  } else {
    const json j = json::parse(r.out);
    CHECK(j.at("backend") == "cuda");
    CHECK(j.at("schedules").at(0).at("ranks").size() == 2);
  }

  // Bad input is bad input whether or not a GPU is here: the request is checked first.
  const Run bad = run_tool(*tool, {"--backend", "cuda", "--schedule", "interleaved-1f1b", "--stages", "4",
                                   "--microbatches", "6"});
  CHECK(bad.status == 2);
  CHECK(bad.err.find("multiple of p") != std::string::npos);

  // The CPU backend of the CUDA build is the CPU build's: same prediction, same matching.
  const Run cpu = run_tool(*tool, {"--backend", "cpu", "--schedule", "zb-h1", "--stages", "2", "--microbatches", "4",
                                   "--ms-per-unit", "0.2", "--steps", "1", "--warmup", "0", "--json"});
  REQUIRE(cpu.status == 0);
  const json c = json::parse(cpu.out);
  CHECK(c.at("backend") == "cpu");
  const json& s = c.at("schedules").at(0);
  CHECK(s.at("actions").get<int>() > 0);
  const Run reference = bubbles({"--backend", "cpu", "--schedule", "zb-h1", "--stages", "2", "--microbatches", "4",
                                 "--ms-per-unit", "0.2", "--steps", "1", "--warmup", "0", "--json"});
  REQUIRE(reference.status == 0);
  const json parsed = json::parse(reference.out);
  const json& ref = parsed.at("schedules").at(0);
  CHECK(s.at("actions") == ref.at("actions"));
  CHECK(s.at("predicted") == ref.at("predicted"));
}

// ------------------------------------------------------------------ issue 24: the planner's edges

namespace {

// A profile of `layers` layers, F = BI = BW = `cost`, 1 MiB of parameters, 1 KiB activations,
// with `devices` (JSON) when not empty.
std::string write_profile(const ScratchDir& dir, const std::string& name, int layers, double cost,
                          const std::string& devices = "") {
  json p;
  p["unit"] = "ms";
  if (!devices.empty()) p["devices"] = json::parse(devices);
  for (int i = 0; i < layers; ++i) {
    p["layers"].push_back({{"name", "l" + std::to_string(i)},
                           {"forward", cost},
                           {"backward_input", cost},
                           {"backward_weight", cost},
                           {"param_bytes", 1048576},
                           {"activation_bytes", 1024},
                           {"output_bytes", 1024}});
  }
  const std::string path = dir.file(name);
  std::ofstream(path) << p.dump();
  return path;
}

}  // namespace

TEST_CASE("--devices with a profile whose device memory p = 1 cannot meet plans the deeper pipelines",
          "[cli][plan][issue24]") {
  // 8 MiB of parameters x 8 bytes held per byte = 64 MiB on one device of 48 MiB: the
  // partitioner threw "no split ... fits" out of the whole plan (exit 2).
  ScratchDir dir;
  const std::string path = write_profile(dir, "small.json", 8, 1.0, R"([{"speed": 1, "memory_bytes": 50331648}])");
  const Run r = plan({"--devices", "4", "--profile", path, "--global-batch", "16"});
  INFO("stderr: " << r.err);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("p=1 x d=4: nothing fits the memory cap"));
  CHECK_THAT(r.out, Catch::Contains("chosen: p="));
  CHECK(r.err.empty());
}

TEST_CASE("a measured profile's runtime costs are named on the model's line; a hand-written one reads as before",
          "[cli][plan][calibrate]") {
  ScratchDir dir;
  const std::string plain = write_profile(dir, "plain.json", 4, 1.0);
  json measured = json::parse(std::ifstream(plain));
  measured["action_overhead"] = 0.25;
  measured["step_overhead"] = 0.5;
  measured["concurrent_slowdown"] = {1.0, 1.75};
  measured["first_stage_backward_in_bw"] = true;
  const std::string path = dir.file("measured.json");
  std::ofstream(path) << measured.dump();
  for (const std::vector<std::string>& flags : {std::vector<std::string>{"--stages", "2", "--microbatches", "4"},
                                                std::vector<std::string>{"--devices", "2", "--global-batch", "8"}}) {
    std::vector<std::string> args = flags;
    args.insert(args.end(), {"--profile", path});
    const Run r = plan(args);
    INFO("stderr: " << r.err);
    REQUIRE(r.status == 0);
    CHECK_THAT(r.out, Catch::Contains("; measured runtime: 0.25 ms per action, 0.5 ms per step, 2 ranks computing at once "
                                      "1.75x slower, the first stage's whole backward in BW"));
    args = flags;
    args.insert(args.end(), {"--profile", plain});
    const Run before = plan(args);
    REQUIRE(before.status == 0);
    CHECK_THAT(before.out, !Catch::Contains("measured runtime"));
  }
}

TEST_CASE("a step time beyond a double is refused; all-zero costs explain without nan", "[cli][plan][issue24]") {
  const Run slow = plan({"--devices", "8", "--all-reduce-bandwidth", "1e-300"});
  INFO("stderr: " << slow.err);
  CHECK(slow.status == 2);
  CHECK(slow.out.empty());
  CHECK_THAT(slow.err, Catch::Contains("all-reduc") && Catch::Contains("not finite"));
  ScratchDir dir;
  const std::string zero = write_profile(dir, "zero.json", 4, 0.0);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--profile", zero, "--stages", "2", "--microbatches", "4"},
        std::vector<std::string>{"--profile", zero, "--devices", "4", "--global-batch", "8"}}) {
    const Run r = plan(args);
    INFO("stderr: " << r.err);
    CHECK(r.status == 0);
    CHECK_THAT(r.out, !Catch::Contains("nan"));
  }
}

TEST_CASE("flag values whose plan needs more memory than the process may use are refused at once",
          "[cli][plan][issue24]") {
  // 1024 ranks x 21845 micro-batches are each in range; together every family's schedule
  // holds tens of GiB, which ended in "internal error: std::bad_alloc" with exit 1 (the
  // status of --validate's problems). The limit is set so the test means the same anywhere.
  ::setenv("PPSCHED_PLAN_MEMORY_BYTES", "8589934592", 1);  // 8 GiB
  const Run big = plan({"--stage-cost", "1,1,1", "--stages", "1024", "--microbatches", "21845"});
  const Run small = plan({"--stage-cost", "1,1,1", "--stages", "4", "--microbatches", "8"});
  ::setenv("PPSCHED_PLAN_MEMORY_BYTES", "1000000", 1);  // 1 MB: even --devices' largest plan is too big
  const Run devices = plan({"--devices", "8", "--layers", "8", "--global-batch", "64"});
  ::unsetenv("PPSCHED_PLAN_MEMORY_BYTES");
  INFO("stderr: " << big.err);
  CHECK(big.status == 2);
  CHECK(big.out.empty());
  CHECK_THAT(big.err, Catch::Contains("--stages 1024 --microbatches 21845") && Catch::Contains("GiB of memory") &&
                          Catch::Contains("8 GiB") && Catch::Contains("--schedule NAME"));
  CHECK(small.status == 0);
  CHECK(devices.status == 2);
  CHECK_THAT(devices.err, Catch::Contains("--devices 8") && Catch::Contains("of memory"));
}

TEST_CASE("--profile reads a bounded amount; --validate reads a FIFO", "[cli][plan][issue24]") {
  // /dev/zero never ends: the reader grew a string until the process ran out of memory.
  const Run zero = plan({"--profile", "/dev/zero"});
  CHECK(zero.status == 2);
  CHECK_THAT(zero.err, Catch::Contains("'/dev/zero'") && Catch::Contains("is larger than"));

  // A CSV through a FIFO (as `--validate <(generate)` gives): it said "no such file".
  ScratchDir dir;
  const std::string csv = dir.file("s.csv");
  REQUIRE(plan({"--stage-cost", "1,1,1", "--stages", "4", "--microbatches", "8", "--schedule", "1f1b", "--csv", csv}).status == 0);
  const std::string text = read_file(csv);
  const std::string fifo = dir.file("s.fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  bool written = false;
  std::thread writer([&] {
    std::ofstream out(fifo);  // blocks until the tool opens the FIFO for reading
    out << text;
    written = static_cast<bool>(out);
  });
  const Run r = plan({"--stage-cost", "1,1,1", "--validate", fifo});
  // A tool that never opened the FIFO leaves the writer blocked in its open: open the
  // reading end here (without waiting) so that it ends.
  const int unblock = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  writer.join();
  if (unblock >= 0) ::close(unblock);
  INFO("stderr: " << r.err);
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("OK"));
  CHECK(written);
  const Run directory = plan({"--stage-cost", "1,1,1", "--validate", dir.path().string()});
  CHECK(directory.status == 2);
  CHECK_THAT(directory.err, Catch::Contains("is a directory"));
}

TEST_CASE("--memory-cap-bytes takes decimal amounts with a unit, exactly", "[cli][plan][issue24]") {
  struct Case {
    std::string text;
    double bytes;  // 0: refused
  };
  for (const Case& c : std::vector<Case>{{"21.5GiB", 21.5 * 1073741824.0},
                                         {"1.5KiB", 1536.0},
                                         {"0.25MB", 250000.0},
                                         {".5GB", 5e8},
                                         {"21.50GiB", 21.5 * 1073741824.0},
                                         {"80GiB", 80.0 * 1073741824.0},
                                         {"1048576", 1048576.0},
                                         {"0.5B", 0.0},
                                         {"1.0000001KiB", 0.0},
                                         {"0.0GB", 0.0},
                                         {"1e9", 0.0},
                                         {"1.2.3GB", 0.0},
                                         {"17179869184TiB", 0.0}}) {
    INFO(c.text);
    const Run r = plan({"--layers", "8", "--stages", "2", "--microbatches", "2", "--memory-cap-bytes", c.text, "--json"});
    INFO("stderr: " << r.err);
    if (c.bytes == 0.0) {
      CHECK(r.status == 2);
      CHECK_THAT(r.err, Catch::Contains("--memory-cap-bytes") && Catch::Contains("21.5GiB"));
      continue;
    }
    REQUIRE(r.status == 0);
    CHECK(json::parse(r.out).at("memory_cap").at("bytes").get<double>() == c.bytes);
  }
}

TEST_CASE("--calibrate refits a profile from a measured step and shows the plan before and after", "[cli][plan][calibrate]") {
  ScratchDir dir;
  const std::string profile = dir.file("measured.json"), timeline = dir.file("step.csv");
  std::ofstream(profile) << R"({"unit": "ms", "rows": 4, "layers": [
    {"name": "a", "forward": 1, "backward_input": 1, "backward_weight": 1},
    {"name": "b", "forward": 1, "backward_input": 1, "backward_weight": 1}]})";
  // One micro-batch of 1F1B on 2 ranks that ran twice as slow as the profile says.
  std::ofstream(timeline) << "# ppsched timeline: ranks 2, unit ms\n"
                             "rank,lane,op,stage,microbatch,group,start,end\n"
                             "0,compute,F,0,0,0,0,2\n1,compute,F,1,0,0,2,4\n1,compute,B,1,0,0,4,8\n0,compute,B,0,0,0,8,12\n";
  const Run r = plan({"--profile", profile, "--devices", "2", "--global-batch", "8", "--calibrate", timeline});
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("measured step 12; predicted before 6 (-50%)") != std::string::npos);
  CHECK(r.out.find("measured / predicted F 2, B 2") != std::string::npos);
  CHECK(r.out.find("before calibration:") != std::string::npos);
  CHECK(r.out.find("after calibration:") != std::string::npos);
  const Run no_devices = plan({"--profile", profile, "--calibrate", timeline});
  CHECK(no_devices.status == 2);
  CHECK(no_devices.err.find("--calibrate") != std::string::npos);
  const Run rows_alone = plan({"--profile", profile, "--devices", "2", "--calibrate-rows", "4"});
  CHECK(rows_alone.status == 2);
  CHECK(rows_alone.err.find("applies to --calibrate only") != std::string::npos);
}

TEST_CASE("--calibrate takes several runs at their own micro-batch sizes", "[cli][plan][calibrate]") {
  ScratchDir dir;
  const std::string profile = dir.file("measured.json"), small = dir.file("step4.csv"), large = dir.file("step8.csv");
  std::ofstream(profile) << R"({"unit": "ms", "rows": 4, "layers": [
    {"name": "a", "forward": 1, "backward_input": 1, "backward_weight": 1},
    {"name": "b", "forward": 1, "backward_input": 1, "backward_weight": 1}]})";
  // Both ran twice as slow as the profile says: at 4 rows, and at 8 rows (predicted twice the 4-row times).
  std::ofstream(small) << "# ppsched timeline: ranks 2, unit ms\n"
                          "rank,lane,op,stage,microbatch,group,start,end\n"
                          "0,compute,F,0,0,0,0,2\n1,compute,F,1,0,0,2,4\n1,compute,B,1,0,0,4,8\n0,compute,B,0,0,0,8,12\n";
  std::ofstream(large) << "# ppsched timeline: ranks 2, unit ms\n"
                          "rank,lane,op,stage,microbatch,group,start,end\n"
                          "0,compute,F,0,0,0,0,4\n1,compute,F,1,0,0,4,8\n1,compute,B,1,0,0,8,16\n0,compute,B,0,0,0,16,24\n";
  const Run r = plan({"--profile", profile, "--devices", "2", "--global-batch", "8", "--calibrate", small + "," + large,
                      "--calibrate-rows", "4,8"});
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("measured step 1 of 2") && Catch::Contains("measured step 2 of 2"));
  CHECK_THAT(r.out, Catch::Contains("measured step 12; predicted before 6 (-50%)"));
  CHECK_THAT(r.out, Catch::Contains("measured step 24; predicted before 12 (-50%)"));
  CHECK_THAT(r.out, Catch::Contains("combined (per layer and kind the median"));
  // Read at 4 rows only, the 8-row run looks four times as slow: the sizes matter.
  const Run one_size = plan({"--profile", profile, "--devices", "2", "--global-batch", "8", "--calibrate", small + "," + large});
  REQUIRE(one_size.status == 0);
  CHECK_THAT(one_size.out, Catch::Contains("measured step 24; predicted before 6 (-75%)"));
  const Run miscounted = plan({"--profile", profile, "--devices", "2", "--calibrate", small + "," + large,
                               "--calibrate-rows", "4,8,16"});
  CHECK(miscounted.status == 2);
  CHECK_THAT(miscounted.err, Catch::Contains("gives 3 sizes for 2 timelines"));
  const Run empty = plan({"--profile", profile, "--devices", "2", "--calibrate", small + ","});
  CHECK(empty.status == 2);
  CHECK_THAT(empty.err, Catch::Contains("a file name is empty"));
}

TEST_CASE("--memory-policy: auto fits a cap no plain family meets and names each stage's policy; none changes nothing",
          "[cli][plan][memory]") {
  // 21 GiB on the default model: below every family's plain peak, above the static memory.
  const std::vector<std::string> capped{"--memory-cap-bytes", "21GiB", "--schedule", "1f1b,zb-h1,gpipe"};
  const Run plain = plan(capped);
  REQUIRE(plain.status == 0);
  CHECK(plain.out.find("Recommended: none") != std::string::npos);
  // none is the default: the report and the JSON are byte for byte the same.
  std::vector<std::string> with_none = capped;
  with_none.insert(with_none.end(), {"--memory-policy", "none"});
  CHECK(plan(with_none).out == plain.out);
  std::vector<std::string> json_args = capped;
  json_args.push_back("--json");
  std::vector<std::string> json_none = with_none;
  json_none.push_back("--json");
  CHECK(plan(json_args).out == plan(json_none).out);
  CHECK(plain.out.find("Memory policies") == std::string::npos);

  std::vector<std::string> with_auto = capped;
  with_auto.insert(with_auto.end(), {"--memory-policy", "auto"});
  const Run r = plan(with_auto);
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("Recommended: none") == std::string::npos);
  CHECK(r.out.find(" with the memory policies above (") != std::string::npos);
  CHECK(r.out.find("Memory policies (chosen where a schedule does not fit plainly") != std::string::npos);
  CHECK(r.out.find("full recompute") != std::string::npos);
  CHECK(r.out.find("(plain ") != std::string::npos);
  with_auto.push_back("--json");
  const json j = plan_json(std::vector<std::string>(with_auto.begin(), with_auto.end() - 1));
  check_plan_json(j);
  REQUIRE_FALSE(j.at("recommended").is_null());
  for (const json& s : j.at("schedules")) {
    INFO(s.at("name"));
    CHECK(s.at("fits") == true);
    CHECK(max_of(s.at("peak_memory_bytes")) <= 21.0 * 1024 * 1024 * 1024);
    const json& m = s.at("memory_policy");
    CHECK(m.at("chosen") == true);
    CHECK(m.at("plain_makespan").get<double>() <= s.at("makespan").get<double>());
    CHECK(m.at("plain_fit_problem").get<std::string>().find("> cap 21 GiB") != std::string::npos);
    REQUIRE(m.at("stages").size() == 8);
    CHECK(m.at("stages")[0].at("policy") != "none");  // rank 0 stores the most
    for (const json& st : m.at("stages")) {
      if (st.at("policy") == "none") continue;
      CHECK(st.at("saved_bytes_per_microbatch").get<double>() > 0.0);
      CHECK(st.at("recompute_time").get<double>() + st.at("copy_time").get<double>() > 0.0);
    }
  }
  // Without the flag, no schedule carries the key.
  for (const json& s : plan_json(capped).at("schedules")) CHECK_FALSE(s.contains("memory_policy"));
}

TEST_CASE("--schedule auto --memory-policy auto: the search's candidates over the cap climb the ladders; none changes nothing",
          "[cli][plan][memory]") {
  const std::vector<std::string> capped{"--memory-cap-bytes", "21GiB", "--schedule", "auto"};
  const Run plain = plan(capped);
  REQUIRE(plain.status == 0);
  std::vector<std::string> with_none = capped;
  with_none.insert(with_none.end(), {"--memory-policy", "none"});
  CHECK(plan(with_none).out == plain.out);
  CHECK(plain.out.find("Memory policies") == std::string::npos);
  const json plain_json_out = plan_json(capped);
  REQUIRE(plain_json_out.at("schedules").size() == 1);
  CHECK_FALSE(plain_json_out.at("schedules")[0].contains("memory_policy"));

  std::vector<std::string> with_auto = capped;
  with_auto.insert(with_auto.end(), {"--memory-policy", "auto"});
  const Run r = plan(with_auto);
  INFO(r.err);
  REQUIRE(r.status == 0);
  // The columns compare_families' report uses, and the search's table after them.
  CHECK(r.out.find("Memory policies (chosen where a schedule does not fit plainly") != std::string::npos);
  CHECK(r.out.find("stage  policy") != std::string::npos);
  CHECK(r.out.find("\nSearch: ") != std::string::npos);
  CHECK(r.out.find(" with the memory policies above (") != std::string::npos);
  const json j = plan_json(with_auto);
  check_plan_json(j);
  REQUIRE(j.at("schedules").size() == 1);
  const json& s = j.at("schedules")[0];
  CHECK(s.at("fits") == true);
  CHECK(max_of(s.at("peak_memory_bytes")) <= 21.0 * 1024 * 1024 * 1024);
  const json& m = s.at("memory_policy");
  CHECK(m.at("chosen") == true);
  CHECK(m.at("plain_fit_problem").get<std::string>().find("> cap 21 GiB") != std::string::npos);
  // Faster than the plain search's pick at this cap (6,829 ms on the default model).
  CHECK(s.at("makespan").get<double>() < plain_json_out.at("schedules")[0].at("makespan").get<double>());
  CHECK(j.at("recommendation_reason").get<std::string>().find("with memory policies") != std::string::npos);
  bool noted = false;
  for (const json& c : j.at("search").at("candidates")) noted = noted || c.at("note").get<std::string>().find("with memory policies") != std::string::npos;
  CHECK(noted);
}

TEST_CASE("--memory-policy per stage runs the stages named; bad tokens are named with the valid forms",
          "[cli][plan][memory]") {
  const json j = plan_json({"--schedule", "1f1b", "--memory-policy", "0=recompute,1=offload:0.5,2=selective:0.3"});
  const json& m = schedule_named(j, "1f1b").at("memory_policy");
  CHECK(m.at("chosen") == false);
  CHECK(m.at("stages")[0].at("policy") == "full recompute");
  CHECK(m.at("stages")[0].at("microbatches") == 32);
  CHECK(m.at("stages")[1].at("policy") == "offload");
  CHECK(m.at("stages")[1].at("fraction") == 0.5);
  CHECK(m.at("stages")[1].at("copy_time").get<double>() > 0.0);
  CHECK(m.at("stages")[2].at("policy") == "selective recompute");
  CHECK(m.at("stages")[2].at("fraction") == 0.3);
  CHECK(m.at("stages")[3].at("policy") == "none");
  // A model in no time unit: recomputation needs no host link, offload takes the one given.
  CHECK(plan({"--layers", "16", "--stages", "4", "--schedule", "1f1b", "--memory-policy", "0=recompute"}).status == 0);
  CHECK(plan({"--layers", "16", "--stages", "4", "--schedule", "1f1b", "--memory-policy", "0=offload", "--host-link", "0.1,100"})
            .status == 0);
  // A slower host link: the same offload, its copies longer, given before or after the policy.
  const json slow = plan_json({"--host-link", "0.01,2.5e6", "--schedule", "1f1b", "--memory-policy", "1=offload:0.5"});
  const json& offload = schedule_named(slow, "1f1b").at("memory_policy").at("stages")[1];
  // (fewer micro-batches can hide copies ten times as long, so compare one micro-batch's)
  const auto per_microbatch = [](const json& st) { return st.at("copy_time").get<double>() / st.at("microbatches").get<double>(); };
  REQUIRE(offload.at("microbatches").get<int>() > 0);
  CHECK(offload.at("microbatches").get<int>() <= m.at("stages")[1].at("microbatches").get<int>());
  CHECK(per_microbatch(offload) > 5.0 * per_microbatch(m.at("stages")[1]));
  const json plain = plan_json({"--schedule", "1f1b"});
  CHECK(schedule_named(j, "1f1b").at("peak_memory_bytes")[0].get<double>() <
        schedule_named(plain, "1f1b").at("peak_memory_bytes")[0].get<double>());

  // Layer-wise by name, priced from the stage's layers; with its checkpoints offloaded it
  // copies them (copy time) and holds less on the device than layer-wise alone.
  const json lw = plan_json({"--schedule", "1f1b", "--memory-policy", "0=layerwise,1=layerwise-offload"});
  const json& lws = schedule_named(lw, "1f1b").at("memory_policy").at("stages");
  CHECK(lws[0].at("policy") == "layer-wise recompute");
  CHECK(lws[0].at("copy_time") == 0.0);
  CHECK(lws[1].at("policy") == "layer-wise recompute + offloaded checkpoints");
  CHECK(lws[1].at("recompute_time").get<double>() > 0.0);
  CHECK(lws[1].at("copy_time").get<double>() > 0.0);
  CHECK(lws[1].at("microbatches").get<int>() > 0);
  const json lw0 = plan_json({"--schedule", "1f1b", "--memory-policy", "0=layerwise"});
  const json lwo0 = plan_json({"--schedule", "1f1b", "--memory-policy", "0=layerwise-offload"});
  CHECK(schedule_named(lwo0, "1f1b").at("peak_memory_bytes")[0].get<double>() <
        schedule_named(lw0, "1f1b").at("peak_memory_bytes")[0].get<double>());
  const Run lwo_text = plan({"--schedule", "1f1b", "--memory-policy", "0=layerwise-offload"});
  CHECK(lwo_text.out.find("layer-wise recompute + offloaded checkpoints") != std::string::npos);

  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> expected;  // all in stderr
  };
  const std::string forms = "POLICY one of recompute, selective:F, offload, offload:F";
  for (const Case& c : std::vector<Case>{
           {{"--memory-policy", "0=recompute,1=bogus"}, {"flag --memory-policy", "'1=bogus' names no policy", forms}},
           {{"--memory-policy", "recompute"}, {"'recompute' is not STAGE=POLICY", forms}},
           {{"--memory-policy", "x=recompute"}, {"'x=recompute' does not start with a stage number"}},
           {{"--memory-policy", "0=selective"}, {"'0=selective' names no policy"}},
           {{"--memory-policy", "0=layerwise:0.5"}, {"'0=layerwise:0.5' names no policy", "layerwise-offload"}},
           {{"--memory-policy", "0=offload:1.5"}, {"'0=offload:1.5' has a share above 1"}},
           {{"--memory-policy", "0=recompute,0=offload"}, {"gives stage 0 a second policy"}},
           {{"--memory-policy", "0=recompute,auto"}, {"'auto' cannot be part of a list"}},
           {{"--memory-policy", "auto"}, {"a byte cap", "--memory-cap-bytes"}},
           {{"--memory-policy", "0=recompute", "--schedule", "auto"}, {"per-stage policies", "--schedule auto", "--memory-policy auto"}},
           {{"--memory-policy", "auto", "--memory-cap-bytes", "21GiB", "--schedule", "auto", "--objective", "span"},
            {"chooses memory policies for the makespan", "drop --objective"}},
           {{"--memory-policy", "0=recompute", "--stage-cost", "1,1,1"}, {"--stage-cost has no activation bytes"}},
           {{"--memory-policy", "9=recompute", "--schedule", "1f1b"}, {"stage 9", "has 8 stages"}},
           {{"--memory-policy", "0=recompute", "--devices", "8"}, {"does not apply to a --devices plan"}},
           {{"--host-link", "0.01,25e6"}, {"flag --host-link", "--memory-policy is none"}},
           {{"--layers", "16", "--stages", "4", "--schedule", "1f1b", "--memory-policy", "0=offload"},
            {"time unit 'unit'", "--host-link T,X"}},
           {{"--memory-policy", "0=offload", "--host-link", "0.01"}, {"'0.01' is not two comma-separated numbers"}},
           {{"--memory-policy", "0=offload", "--host-link", "0.01,0"}, {"flag --host-link (bandwidth)"}},
           {{"--memory-policy", "0=recompute", "--validate", "x.csv"}, {"does not apply to --validate"}},
       }) {
    const Run r = plan(c.args);
    INFO("args: " << c.args.back() << "\nstderr: " << r.err);
    CHECK(r.status == 2);
    for (const std::string& text : c.expected) CHECK(r.err.find(text) != std::string::npos);
  }
  CHECK(plan({"--help"}).out.find("--memory-policy") != std::string::npos);
}

// --lengths: profiles of a 4-layer model measured at 1, 2, 4 and 8 sequences, at 256 and at 1024
// tokens each; every time fixed + per token + per squared length, so the fit is exact.
namespace {
std::string varlen_profile(std::int64_t length) {
  json layers = json::array();
  for (int l = 0; l < 4; ++l) {
    json points = json::array();
    const double k = l == 3 ? 1.5 : 1.0;  // a heavier last stage
    for (const int rows : {1, 2, 4, 8}) {
      const double tokens = rows * static_cast<double>(length), squares = tokens * static_cast<double>(length);
      const double f = k * (0.05 + 2e-4 * tokens + 3e-8 * squares);
      points.push_back({{"rows", rows}, {"forward", f}, {"backward_input", 1.1 * f}, {"backward_weight", 0.9 * f},
                        {"activation_bytes", 1024.0 * tokens}, {"output_bytes", 64.0 * tokens}});
    }
    layers.push_back({{"name", "block" + std::to_string(l)}, {"forward", points[0]["forward"]}, {"points", points}});
  }
  return json{{"unit", "ms"}, {"layers", layers}}.dump();
}
std::vector<std::int64_t> varlen_lengths() {
  std::vector<std::int64_t> out;
  for (int i = 0; i < 60; ++i) out.push_back(16 + (i * 7919 % 97) * (i % 5 == 0 ? 40 : 4));
  return out;
}
}  // namespace

TEST_CASE("--lengths splits and plans one step; the table matches split_batch", "[cli][plan][lengths]") {
  ScratchDir dir;
  const std::string a = dir.file("at256.json"), b = dir.file("at1024.json"), lengths_file = dir.file("lengths.txt");
  std::ofstream(a) << varlen_profile(256);
  std::ofstream(b) << varlen_profile(1024);
  const std::vector<std::int64_t> lengths = varlen_lengths();
  {
    std::ofstream out(lengths_file);
    for (std::size_t i = 0; i < lengths.size(); ++i) out << lengths[i] << (i % 3 == 2 ? "\n" : i % 3 == 1 ? ", " : " ");
  }
  using namespace ppsched::plan;
  std::vector<LengthSample> samples = length_samples(ppsched::parse_profile(read_file(a)), 256);
  for (LengthSample& s : length_samples(ppsched::parse_profile(read_file(b)), 1024)) samples.push_back(s);
  const LengthCosts fit = fit_length_costs(samples);
  SplitOptions split;
  split.token_budget = 4096;
  const std::vector<std::string> args{"--lengths", lengths_file, "--profile", a + "," + b, "--profile-lengths", "256,1024",
                                      "--token-budget", "4096", "--split", "all"};
  const Run r = plan(args);
  INFO(r.out << r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("60 sequences") != std::string::npos);
  std::map<std::string, std::vector<std::string>> rows;
  std::istringstream table(r.out);
  for (std::string line; std::getline(table, line);) {
    std::istringstream words(line);
    std::vector<std::string> cells{std::istream_iterator<std::string>(words), std::istream_iterator<std::string>()};
    if (cells.size() == 8 && (cells[0] == "padded" || cells[0] == "packed" || cells[0] == "bucketed" || cells[0] == "balanced")) {
      rows[cells[0]] = cells;
    }
  }
  REQUIRE(rows.size() == 4);
  std::map<std::string, double> padding;
  for (const SplitMethod m : {SplitMethod::padded, SplitMethod::packed, SplitMethod::bucketed, SplitMethod::balanced}) {
    const std::string name(split_method_name(m));
    const Split expected = split_batch(lengths, fit, m, split);
    CHECK(rows[name][1] == std::to_string(expected.microbatches.size()));
    padding[name] = std::stod(rows[name][4]);
    CHECK(padding[name] == Approx(100.0 * expected.padding_fraction()).margin(0.1));
  }
  CHECK(padding["packed"] == 0.0);
  CHECK(padding["balanced"] == 0.0);
  CHECK(padding["bucketed"] < padding["padded"]);

  std::vector<std::string> json_args = args;
  json_args.push_back("--json");
  const Run jr = plan(json_args);
  REQUIRE(jr.status == 0);
  const json j = json::parse(jr.out);
  REQUIRE(j.at("splits").size() == 4);
  for (const json& s : j.at("splits")) {
    CHECK(s.at("step_time").get<double>() > 0.0);
    CHECK(s.at("step_time").get<double>() <= s.at("given_order_step_time").get<double>());
    CHECK(s.at("tokens_per_unit").get<double>() == Approx(s.at("tokens").get<double>() / s.at("step_time").get<double>()));
  }
  // One method: one row, balanced by default.
  const Run one = plan({"--lengths", lengths_file, "--profile", a + "," + b, "--profile-lengths", "256,1024"});
  REQUIRE(one.status == 0);
  CHECK(one.out.find("balanced") != std::string::npos);
  CHECK(one.out.find("padded") == std::string::npos);
}

TEST_CASE("--lengths: bad lengths, profiles and flags name the file, line, value or flag", "[cli][plan][lengths]") {
  ScratchDir dir;
  const std::string a = dir.file("at256.json"), b = dir.file("at1024.json"), one_point = dir.file("one.json");
  std::ofstream(a) << varlen_profile(256);
  std::ofstream(b) << varlen_profile(1024);
  std::ofstream(one_point) << R"({"layers": [{"name": "x", "forward": 1, "points": [{"rows": 1, "forward": 1}]}]})";
  const auto lengths = [&](const std::string& name, const std::string& text) {
    const std::string path = dir.file(name);
    std::ofstream(path) << text;
    return path;
  };
  const std::string good = lengths("good.txt", "100\n200\n300\n");
  const std::string profiles = a + "," + b;
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases{
      {{"--lengths", lengths("neg.txt", "10\n20, -5\n"), "--profile", profiles, "--profile-lengths", "256,1024"},
       {"neg.txt", "line 2", "length -5 is negative"}},
      {{"--lengths", lengths("zero.txt", "10 0\n"), "--profile", profiles, "--profile-lengths", "256,1024"},
       {"zero.txt", "line 1", "length 0"}},
      {{"--lengths", lengths("nan.txt", "10\n\n12x\n"), "--profile", profiles, "--profile-lengths", "256,1024"},
       {"nan.txt", "line 3", "'12x' is not a whole number"}},
      {{"--lengths", lengths("empty.txt", "\n \n"), "--profile", profiles, "--profile-lengths", "256,1024"},
       {"empty.txt", "holds no lengths"}},
      {{"--lengths", dir.file("missing.txt"), "--profile", profiles, "--profile-lengths", "256,1024"},
       {"missing.txt", "cannot be read"}},
      {{"--lengths", lengths("long.txt", "10\n9000\n"), "--profile", profiles, "--profile-lengths", "256,1024"},
       {"long.txt", "line 2", "9000 tokens", "--token-budget 8192"}},
      {{"--lengths", good, "--profile", a, "--profile-lengths", "256"}, {"one sequence length", "--profile-lengths 1024,4096"}},
      {{"--lengths", good, "--profile", one_point + "," + b, "--profile-lengths", "256,1024"},
       {"one.json", "1 measured point(s)", "two micro-batch sizes or more"}},
      {{"--lengths", good, "--profile", profiles, "--profile-lengths", "256"}, {"--profile-lengths", "2 profile file(s) and 1"}},
      {{"--lengths", good, "--profile", profiles}, {"--lengths", "--profile-lengths"}},
      {{"--lengths", good, "--layers", "4"}, {"--layers", "does not apply to --lengths"}},
      {{"--lengths", good, "--profile", profiles, "--profile-lengths", "256,1024", "--devices", "8"},
       {"--devices", "does not apply to --lengths"}},
      {{"--lengths", good, "--profile", profiles, "--profile-lengths", "256,1024", "--split", "sorted"},
       {"--split", "unknown method 'sorted'", "balanced, packed, bucketed, padded, all"}},
      {{"--token-budget", "100"}, {"--token-budget", "applies to --lengths only"}},
      {{"--split", "all"}, {"--split", "applies to --lengths only"}},
  };
  for (const Case& c : cases) {
    const Run r = plan(c.args);
    INFO(r.err);
    CHECK(r.status == 2);
    for (const std::string& e : c.expected) CHECK(r.err.find(e) != std::string::npos);
  }
}
