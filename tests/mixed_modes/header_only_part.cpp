// Header-only half of the mixed program (tests/check_mixed_modes.py): the same work as
// compiled_part.cpp, through the inline definitions in ppsched::header_only. Only plain
// values cross to the other file.
#include <ppsched/ppsched.hpp>
#include <ppsched/runtime.hpp>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

static_assert(PPSCHED_OUTLINE_BODY == 1, "this file is the header-only half");

// Defined in compiled_part.cpp, in compiled mode.
double compiled_makespan(const char* family);
std::string compiled_lowered_text(const char* family);
double compiled_step_loss();

namespace {

double header_only_makespan(const char* family) {
  const ppsched::Schedule s = ppsched::make_schedule(family, {.ranks = 4, .microbatches = 8});
  return ppsched::simulate(s, ppsched::uniform_costs(1.0, 2.0, 0.5)).makespan;
}

std::string header_only_lowered_text(const char* family) {
  const ppsched::LoweredSchedule l = ppsched::lower(ppsched::make_schedule(family, {.ranks = 4, .microbatches = 8}));
  std::ostringstream text;
  text << l.schedule();
  return text.str();
}

double header_only_step_loss() {
  constexpr int ranks = 2, microbatches = 4;
  std::vector<float> weight(ranks, 0.5f);
  std::vector<std::vector<float>> saved(ranks, std::vector<float>(microbatches));
  std::vector<ppsched::StageFunctions> stages(ranks);
  for (int s = 0; s < ranks; ++s) {
    ppsched::StageFunctions& f = stages[s];
    f.input_size = f.output_size = 1;
    f.weight_grad_size = 1;
    f.forward = [&, s](int mb, std::span<const float> x, std::span<float> y) {
      saved[s][mb] = x[0];
      y[0] = weight[s] * x[0];
    };
    f.backward = [&, s](int mb, auto, std::span<const float> dy, std::span<float> dx, std::span<float> dw) {
      if (!dx.empty()) dx[0] = weight[s] * dy[0];
      dw[0] = saved[s][mb] * dy[0];
    };
    f.optimizer_step = [&, s](std::span<const float> dw) { weight[s] -= 0.1f * dw[0]; };
  }
  stages.back().target_size = 1;
  stages.back().loss = [](int, std::span<const float> y, std::span<const float> t, std::span<float> dy) {
    const float d = y[0] - t[0];
    dy[0] = d / microbatches;
    return 0.5f * d * d;
  };
  ppsched::CpuCluster cluster(ranks);
  std::vector<ppsched::CpuBackend*> backends{&cluster.rank(0), &cluster.rank(1)};
  ppsched::World<ppsched::CpuBackend> world(backends, ppsched::make_schedule("1f1b", {.ranks = ranks, .microbatches = microbatches}),
                                            stages);
  const std::vector<float> inputs(microbatches, 1.0f), targets(microbatches, 2.0f);
  double loss = 0.0;
  for (int step = 0; step < 3; ++step) loss = world.run_step({inputs, targets}).mean_loss();
  return loss;
}

}  // namespace

int main() {
  int failures = 0;
  for (const char* family : {"1f1b", "zb-h1", "gpipe"}) {
    const double a = header_only_makespan(family), b = compiled_makespan(family);
    if (a != b) {
      std::printf("FAIL %s: makespan %g header-only, %g compiled\n", family, a, b);
      ++failures;
    }
    if (header_only_lowered_text(family) != compiled_lowered_text(family)) {
      std::printf("FAIL %s: the lowered schedules differ\n", family);
      ++failures;
    }
  }
  const double a = header_only_step_loss(), b = compiled_step_loss();
  if (a != b) {
    std::printf("FAIL World: loss %.9g header-only, %.9g compiled\n", a, b);
    ++failures;
  }
  std::printf("%s\n", failures == 0 ? "both modes in one program: same results" : "mixed program FAILED");
  return failures == 0 ? 0 : 1;
}
