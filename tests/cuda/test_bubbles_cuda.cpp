// Runs the CUDA build of ppsched-bubbles as a user does and checks what it prints. This
// program asks the CUDA runtime itself whether a GPU is usable (host code only, so the host
// compiler builds it; it links cudart). Without one, the [nogpu] case checks that the tool
// refuses --backend cuda with exit 3 and the very reason the runtime gave here, then the
// program prints "SKIPPED: <reason>" and exits 77 (Meson's skip). With one, the [gpu] cases
// run schedules on the GPU and check the JSON against the tool's own CPU run of the same
// request: the prediction and the matched actions are the same lowered schedule's, and the
// measured numbers are consistent with each other. No timing is asserted.
//
// The tool is found through PPSCHED_BUBBLES_CUDA (set by tests/cuda/meson.build).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
// clang-format off
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include <ppsched/backend/cuda/device.hpp>

#include "../run_tool.hpp"
// clang-format on

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using ppsched::test_support::read_file;
using ppsched::test_support::Run;
using ppsched::test_support::run_tool;
using ppsched::test_support::ScratchDir;

fs::path tool() {
  const char* p = std::getenv("PPSCHED_BUBBLES_CUDA");
  if (p == nullptr || *p == '\0') {
    throw std::runtime_error("PPSCHED_BUBBLES_CUDA is not set: run this test through meson test");
  }
  return p;
}

Run bubbles(const std::vector<std::string>& args) { return run_tool(tool(), args); }

std::vector<std::string> request(const std::string& backend, const std::string& schedule, int p, int m) {
  return {"--backend",      backend, "--schedule", schedule, "--stages", std::to_string(p), "--microbatches",
          std::to_string(m), "--ms-per-unit", "0.5", "--steps", "3", "--warmup", "1", "--json"};
}

json run_json(const std::vector<std::string>& args) {
  const Run r = bubbles(args);
  INFO("status " << r.status << ", stderr: " << r.err);
  REQUIRE(r.status == 0);
  return json::parse(r.out);
}

}  // namespace

TEST_CASE("without a GPU, --backend cuda exits 3 with the runtime's reason and prints nothing", "[nogpu]") {
  const ppsched::cuda::DeviceProbe probe = ppsched::cuda::probe_devices();
  REQUIRE_FALSE(probe.usable());
  const Run r = bubbles(request("cuda", "1f1b", 2, 4));
  INFO("stderr: " << r.err);
  CHECK(r.status == 3);
  CHECK(r.out.empty());
  CHECK(r.err.find(probe.reason) != std::string::npos);
  // The CPU backend of the same binary still works here.
  CHECK(run_json(request("cpu", "1f1b", 2, 4)).at("backend") == "cpu");
}

TEST_CASE("on the GPU, each rank's measured bubble is set beside the CPU run's prediction", "[gpu]") {
  struct Case {
    const char* schedule;
    int p;
    int m;
  };
  for (const Case c : {Case{"1f1b", 2, 4}, Case{"zb-h1", 4, 8}, Case{"interleaved-1f1b", 2, 4}, Case{"zb-v", 3, 6}}) {
    INFO(c.schedule << " p=" << c.p << " m=" << c.m);
    const json gpu = run_json(request("cuda", c.schedule, c.p, c.m));
    const json cpu = run_json(request("cpu", c.schedule, c.p, c.m));
    CHECK(gpu.at("backend") == "cuda");
    CHECK(gpu.at("backend_detail").get<std::string>().find("CUDA backend (") == 0);
    CHECK(gpu.at("ranks") == c.p);
    REQUIRE(gpu.at("schedules").size() == 1);
    const json& s = gpu.at("schedules")[0];
    const json& reference = cpu.at("schedules")[0];
    CHECK(s.at("name") == c.schedule);
    // One lowered schedule for both backends: the same prediction, every action matched.
    CHECK(s.at("predicted") == reference.at("predicted"));
    CHECK(s.at("actions") == reference.at("actions"));
    CHECK(s.at("steps").size() == 3);
    REQUIRE(s.at("ranks").size() == static_cast<std::size_t>(c.p));
    for (const json& rank : s.at("ranks")) {
      const double measured = rank.at("measured_bubble").get<double>();
      CHECK(measured >= 0.0);
      CHECK(measured < 1.0);
      CHECK(rank.at("difference_pp").get<double>() ==
            Approx((measured - rank.at("predicted_bubble").get<double>()) * 100).margin(1e-9));
    }
    // The reported step is one of the measured ones.
    const auto step = s.at("measured").at("step").get<std::size_t>();
    REQUIRE(step < s.at("steps").size());
    CHECK(s.at("measured").at("makespan") == s.at("steps")[step].at("makespan"));
    CHECK(s.at("makespan_ratio").get<double>() ==
          Approx(s.at("measured").at("makespan").get<double>() / s.at("predicted").at("makespan").get<double>()));
  }
}

TEST_CASE("on the GPU, --trace writes the measured step with one event per compute action", "[gpu]") {
  ScratchDir dir;
  const std::string trace = dir.file("gpu.json");
  std::vector<std::string> args = request("cuda", "zb-h1", 2, 4);
  args.insert(args.end(), {"--trace", trace});
  const json j = run_json(args);
  CHECK(j.at("trace") == trace);
  const json t = json::parse(read_file(trace));
  std::size_t compute = 0;
  for (const json& e : t.at("traceEvents")) {
    const std::string name = e.value("name", "");
    if (e.value("ph", "") == "X" && !name.empty() && (name[0] == 'F' || name[0] == 'B')) ++compute;
  }
  CHECK(compute == 2u * 4u * 3u);  // F, BI and BW per stage and micro-batch
}

int main(int argc, char** argv) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  const ppsched::cuda::DeviceProbe probe = ppsched::cuda::probe_devices();
  if (probe.usable()) {
    session.configData().testsOrTags = {"[gpu]"};
    return session.run();
  }
  session.configData().testsOrTags = {"[nogpu]"};
  if (session.run() != 0) return 1;
  std::printf("SKIPPED: ppsched-bubbles --backend cuda needs a usable CUDA device: %s\n", probe.reason.c_str());
  return 77;
}
