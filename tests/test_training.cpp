// Real model code, real math: the plain C++ MLP of examples/mlp trained through ppsched with
// every schedule family on 2, 4 and 8 ranks, against the same model trained unpipelined.
// The loss of every micro-batch and the gradient of every step must be bit-identical when
// gradients are summed in micro-batch order (every schedule), and when summed in schedule
// order for the schedules that run weight gradients in micro-batch order; within 1e-6
// relative otherwise.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <ppsched/backend/cpu.hpp>
#include <ppsched/runtime/world.hpp>
#include <ppsched/schedule/generators.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../examples/mlp/mlp.hpp"
#include "../examples/mlp/mlp_stage.hpp"

namespace {

struct Family {
  const char* name;
  int chunks;
};
constexpr Family training_families[] = {
    {"gpipe", 1}, {"1f1b", 1},   {"interleaved-1f1b", 2}, {"looped-bfs", 2}, {"zb-h1", 1},
    {"zb-h2", 1}, {"zb-v", 2},   {"v-half", 2},           {"v-min", 2},      {"dualpipev", 2}};

// True when every stage's weight gradients (B or BW) come in micro-batch order on its rank.
bool weights_in_microbatch_order(const ppsched::Schedule& s) {
  std::vector<int> last(static_cast<std::size_t>(s.stages()), -1);
  for (const auto& prog : s.programs) {
    for (const auto& a : prog) {
      if (a.op != ppsched::Op::B && a.op != ppsched::Op::BW) continue;
      if (a.microbatch < last[static_cast<std::size_t>(a.stage)]) return false;
      last[static_cast<std::size_t>(a.stage)] = a.microbatch;
    }
  }
  return true;
}

double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0;
  double norm = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return norm == 0.0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

std::vector<float> data(std::size_t n, std::uint32_t seed, float scale) {
  mlp::Random random(seed);
  std::vector<float> out(n);
  for (float& x : out) x = scale * random.next();
  return out;
}

struct Outcome {
  int steps = 0;
  bool exact = true;
  double worst = 0.0;  // largest relative difference seen (losses, gradients, weights)
};

// Trains `steps` steps pipelined and unpipelined from the same initial weights and compares
// them after every step.
Outcome train_and_compare(const ppsched::Schedule& schedule, ppsched::CpuMode mode,
                          ppsched::GradAccumulation accumulation, int steps) {
  const int stages = schedule.stages();
  const int m = schedule.microbatches;
  const std::size_t rows = 2;
  // At least 4 linear + tanh layers, one more than the stages so the split is uneven.
  const std::size_t layers = static_cast<std::size_t>(std::max(4, stages) + 1);
  std::vector<std::size_t> widths{3};
  for (std::size_t l = 1; l < layers; ++l) widths.push_back(4 + l % 3);
  widths.push_back(2);
  const float loss_scale = 1.0f / static_cast<float>(rows * static_cast<std::size_t>(m));
  const float learning_rate = 0.5f;

  mlp::Mlp pipelined(widths, 7);
  mlp::Mlp reference(widths, 7);
  std::vector<std::unique_ptr<mlp::MlpStage>> adapters;
  std::vector<ppsched::StageFunctions> functions;
  std::vector<std::vector<float>> applied(static_cast<std::size_t>(stages));
  for (int s = 0; s < stages; ++s) {
    const std::size_t first = layers * static_cast<std::size_t>(s) / static_cast<std::size_t>(stages);
    const std::size_t last = layers * static_cast<std::size_t>(s + 1) / static_cast<std::size_t>(stages);
    adapters.push_back(std::make_unique<mlp::MlpStage>(pipelined, first, last, rows, m));
    ppsched::StageFunctions f = adapters.back()->functions(s + 1 == stages, loss_scale, learning_rate);
    f.optimizer_step = [apply = f.optimizer_step, &applied, s](std::span<const float> g) {
      applied[static_cast<std::size_t>(s)].assign(g.begin(), g.end());
      apply(g);
    };
    functions.push_back(std::move(f));
  }

  ppsched::CpuOptions co;
  co.mode = mode;
  ppsched::CpuCluster cluster(schedule.ranks, co);
  std::vector<ppsched::CpuBackend*> ranks;
  for (int r = 0; r < schedule.ranks; ++r) ranks.push_back(&cluster.rank(r));
  ppsched::ExecutorOptions eo;
  eo.accumulation = accumulation;
  ppsched::World<ppsched::CpuBackend> world(ranks, schedule, functions, eo);

  Outcome out;
  for (int step = 0; step < steps; ++step) {
    const auto inputs =
        data(static_cast<std::size_t>(m) * rows * widths.front(), 100u + static_cast<std::uint32_t>(step), 1.0f);
    const auto targets =
        data(static_cast<std::size_t>(m) * rows * widths.back(), 200u + static_cast<std::uint32_t>(step), 0.8f);
    const auto& result = world.run_step({inputs, targets});
    std::vector<float> reference_gradient;
    const auto reference_losses = mlp::train_step_unpipelined(reference, inputs, targets, rows, m, loss_scale,
                                                              learning_rate, &reference_gradient);
    std::vector<float> gradient;
    for (const auto& g : applied) gradient.insert(gradient.end(), g.begin(), g.end());
    REQUIRE(gradient.size() == reference_gradient.size());
    out.exact = out.exact && result.losses == reference_losses && gradient == reference_gradient;
    out.worst = std::max({out.worst, relative_difference(result.losses, reference_losses),
                          relative_difference(gradient, reference_gradient)});
    ++out.steps;
  }
  for (std::size_t l = 0; l < layers; ++l) {
    const auto a = pipelined.layers[l].parameters();
    const auto b = reference.layers[l].parameters();
    const std::vector<float> va(a.begin(), a.end());
    const std::vector<float> vb(b.begin(), b.end());
    out.exact = out.exact && va == vb;
    out.worst = std::max(out.worst, relative_difference(va, vb));
  }
  return out;
}

ppsched::Schedule make(const Family& f, int p, int m) {
  ppsched::ScheduleRequest req;
  req.ranks = p;
  req.microbatches = m;
  req.chunks = f.chunks;
  return ppsched::make_schedule(f.name, req);
}

}  // namespace

TEST_CASE("pipelined MLP training equals unpipelined training for every schedule", "[training]") {
  const auto accumulation =
      GENERATE(ppsched::GradAccumulation::microbatch_order, ppsched::GradAccumulation::schedule_order);
  for (const Family& fam : training_families) {
    for (int p : {2, 4, 8}) {
      const ppsched::Schedule s = make(fam, p, 2 * p);
      const bool in_order = weights_in_microbatch_order(s);
      const Outcome o = train_and_compare(s, ppsched::CpuMode::threaded, accumulation, 3);
      INFO(fam.name << " p=" << p << ", " << ppsched::to_string(accumulation) << ", weight gradients "
                    << (in_order ? "in" : "not in") << " micro-batch order; worst relative difference " << o.worst);
      REQUIRE(o.steps == 3);
      if (accumulation == ppsched::GradAccumulation::microbatch_order || in_order) {
        CHECK(o.exact);
      } else {
        CHECK(o.worst <= 1e-6);
      }
    }
  }
}

TEST_CASE("training is bit-identical in the deterministic mode too", "[training]") {
  for (const Family& fam : training_families) {
    const Outcome o = train_and_compare(make(fam, 4, 8), ppsched::CpuMode::deterministic,
                                        ppsched::GradAccumulation::microbatch_order, 2);
    INFO(fam.name);
    CHECK(o.exact);
  }
}

TEST_CASE("the loss goes down", "[training]") {
  // Not a proof of anything pipelined (the equality above is); a check that the example
  // model and data are a meaningful training problem rather than a constant.
  mlp::Mlp model({3, 5, 4, 6, 5, 2}, 7);
  const auto inputs = data(4 * 2 * 3, 100, 1.0f);
  const auto targets = data(4 * 2 * 2, 200, 0.8f);
  std::vector<float> first;
  std::vector<float> last;
  for (int step = 0; step < 100; ++step) {
    last = mlp::train_step_unpipelined(model, inputs, targets, 2, 4, 1.0f / 8.0f, 1.0f);
    if (step == 0) first = last;
  }
  float a = 0.0f;
  float b = 0.0f;
  for (float x : first) a += x;
  for (float x : last) b += x;
  CHECK(b < 0.5f * a);
}

namespace {

// The repository root: found from this file's path as the compiler saw it (absolute, or
// relative to the build directory), looked up from the working directory and its parents.
std::filesystem::path source_root() {
  namespace fs = std::filesystem;
  const fs::path here = fs::path(__FILE__).parent_path() / "..";
  for (fs::path dir = fs::current_path(); !dir.empty(); dir = dir.parent_path()) {
    for (const fs::path& candidate : {dir, dir / here}) {
      if (fs::exists(candidate / "docs" / "guide.md") && fs::exists(candidate / "examples" / "mlp_training.cpp")) {
        return candidate;
      }
    }
    if (dir == dir.parent_path()) break;
  }
  return {};
}

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// The lines between "// example-begin NAME" and "// example-end NAME", their common
// indentation removed.
std::string snippet(const std::string& text, const std::string& name) {
  const std::string begin = "// example-begin " + name + "\n";
  const std::string end = "// example-end " + name;
  const auto b = text.find(begin);
  const auto e = text.find(end);
  if (b == std::string::npos || e == std::string::npos) return {};
  std::string body = text.substr(b + begin.size(), e - b - begin.size());
  body = body.substr(0, body.rfind('\n') + 1);  // drop the end marker's indentation
  std::vector<std::string> lines;
  std::istringstream in(body);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::size_t indent = std::string::npos;
  for (const auto& line : lines) {
    if (line.find_first_not_of(' ') != std::string::npos) indent = std::min(indent, line.find_first_not_of(' '));
  }
  std::string out;
  for (const auto& line : lines) out += (line.size() >= indent ? line.substr(indent) : std::string()) + "\n";
  return out;
}

}  // namespace

TEST_CASE("the guide shows the example's code as it is", "[training]") {
  const auto root = source_root();
  REQUIRE_FALSE(root.empty());
  const std::string guide = read_text(root / "docs" / "guide.md");
  const std::string stage = read_text(root / "examples" / "mlp" / "mlp_stage.hpp");
  const std::string example = read_text(root / "examples" / "mlp_training.cpp");
  for (const auto& [text, name] : {std::pair{&stage, "mlp-stage-functions"}, std::pair{&stage, "mlp-stage-passes"},
                                   std::pair{&example, "mlp-training"}, std::pair{&example, "mlp-step"}}) {
    const std::string code = snippet(*text, name);
    INFO(name);
    REQUIRE_FALSE(code.empty());
    CHECK(guide.find("```cpp\n" + code + "```") != std::string::npos);
  }
}
