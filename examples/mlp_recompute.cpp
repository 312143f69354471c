// Recomputation and offload in a pipelined training step (issue 23). The MLP of
// examples/mlp_training.cpp, with memory actions written into the schedule: `recompute` puts
// R(s, m) before every backward, so each forward keeps nothing and R restores it from the
// stage's kept input; `offload` puts OFFLOAD(s, m) after every forward and RELOAD(s, m)
// before every backward, so each stage's saved activations wait in the executor's host pool
// (pinned memory on CUDA) on the rank's copy stream. The stage supports both through
// MlpStage::add_memory_actions (StageContext::keep_activation, StageFunctions::recompute,
// offload, reload). Every step is checked against the model trained without a pipeline:
// memory actions change where activations live, not a single bit of the result.
//
//   mlp_recompute [recompute|offload] [schedule] [ranks] [steps]    e.g.  mlp_recompute offload zb-h1 4 5
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <ppsched/backend/cpu.hpp>
#include <ppsched/runtime/world.hpp>
#include <ppsched/schedule/generators.hpp>
#include <string>
#include <utility>
#include <vector>

#include "mlp/mlp.hpp"
#include "mlp/mlp_stage.hpp"

namespace {

// The schedule with the policy's memory actions: by hand here; a planner policy writes the
// same actions (docs/runtime.md, "Recomputation and offload").
ppsched::Schedule with_memory_actions(ppsched::Schedule s, bool offload) {
  using ppsched::Op;
  for (auto& prog : s.programs) {
    std::vector<ppsched::Action> out;
    for (std::size_t i = 0; i < prog.size(); ++i) {
      const ppsched::Action& a = prog[i];
      // An overlapped pair (two adjacent compute actions of one group) stays together: the
      // reload or recompute goes before it, the offload after it.
      const bool pair_second = a.group != 0 && i > 0 && prog[i - 1].group == a.group;
      const bool pair_first = a.group != 0 && i + 1 < prog.size() && prog[i + 1].group == a.group;
      if ((a.op == Op::B || a.op == Op::BI) && pair_second) {
        out.insert(out.end() - 1, {offload ? Op::RELOAD : Op::R, a.stage, a.microbatch, 0});
      } else if (a.op == Op::B || a.op == Op::BI) {
        out.push_back({offload ? Op::RELOAD : Op::R, a.stage, a.microbatch, 0});
      }
      out.push_back(a);
      if (offload && a.op == Op::F && !pair_first) out.push_back({Op::OFFLOAD, a.stage, a.microbatch, 0});
      if (offload && pair_second && prog[i - 1].op == Op::F) {
        out.push_back({Op::OFFLOAD, prog[i - 1].stage, prog[i - 1].microbatch, 0});
      }
    }
    prog = std::move(out);
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string policy = argc > 1 ? argv[1] : "recompute";
  const std::string family = argc > 2 ? argv[2] : "1f1b";
  const int ranks = argc > 3 ? std::atoi(argv[3]) : 4;
  const int steps = argc > 4 ? std::atoi(argv[4]) : 5;
  if (policy != "recompute" && policy != "offload") {
    std::cerr << "mlp_recompute: the policy is 'recompute' or 'offload', not '" << policy << "'\n";
    return 2;
  }
  const bool offload = policy == "offload";

  ppsched::ScheduleRequest request;
  request.ranks = ranks;
  request.microbatches = 2 * ranks;
  request.chunks = ppsched::family_info(family).chunks_for(2);  // looped: two here; V-shaped: two
  const ppsched::Schedule schedule = with_memory_actions(ppsched::make_schedule(family, request), offload);
  const int stages = schedule.stages();
  const int microbatches = schedule.microbatches;

  const std::vector<std::size_t> widths{8, 16, 16, 16, 16, 16, 16, 16, 4};
  mlp::Mlp model(widths, 1);
  mlp::Mlp reference(widths, 1);
  const std::size_t rows = 4;
  const float loss_scale = 1.0f / static_cast<float>(rows * static_cast<std::size_t>(microbatches));
  const float learning_rate = 0.2f;

  std::vector<std::unique_ptr<mlp::MlpStage>> adapters;
  std::vector<ppsched::StageFunctions> functions;
  const std::size_t layers = model.layers.size();
  for (int s = 0; s < stages; ++s) {
    const std::size_t first = layers * static_cast<std::size_t>(s) / static_cast<std::size_t>(stages);
    const std::size_t last = layers * static_cast<std::size_t>(s + 1) / static_cast<std::size_t>(stages);
    adapters.push_back(std::make_unique<mlp::MlpStage>(model, first, last, rows, microbatches));
    ppsched::StageFunctions f = adapters.back()->functions(s + 1 == stages, loss_scale, learning_rate);
    // The stage's forward honours keep_activation, and it can move its saved state to host.
    adapters.back()->add_memory_actions(f, /*own_recompute=*/true);
    functions.push_back(std::move(f));
  }

  ppsched::CpuCluster cluster(ranks);
  std::vector<ppsched::CpuBackend*> backends;
  for (int r = 0; r < ranks; ++r) backends.push_back(&cluster.rank(r));
  ppsched::World<ppsched::CpuBackend> world(backends, schedule, functions);

  std::cout << "schedule " << family << " with " << policy << ": " << ranks << " ranks, " << stages << " stages, "
            << microbatches << " micro-batches\n";
  for (int r = 0; r < ranks; ++r) {
    std::cout << "  rank " << r << ": host pool " << world.executor(r).host_floats() << " floats\n";
  }
  mlp::Random random(5);
  bool all_equal = true;
  for (int step = 0; step < steps; ++step) {
    std::vector<float> inputs(static_cast<std::size_t>(microbatches) * rows * widths.front());
    for (float& x : inputs) x = random.next();
    std::vector<float> targets(static_cast<std::size_t>(microbatches) * rows * widths.back());
    for (float& x : targets) x = 0.5f * random.next();
    const ppsched::StepResult& result = world.run_step({inputs, targets});
    const std::vector<float> expected =
        mlp::train_step_unpipelined(reference, inputs, targets, rows, microbatches, loss_scale, learning_rate);
    const bool equal = result.losses == expected;
    all_equal = all_equal && equal;
    std::cout << "step " << step << ": losses " << (equal ? "equal" : "DIFFER") << '\n';
  }
  std::cout << (all_equal ? "training with " + policy + " matched unpipelined training bit for bit\n"
                          : "training with " + policy + " DIFFERED from unpipelined training\n");
  return all_equal ? EXIT_SUCCESS : EXIT_FAILURE;
} catch (const std::exception& e) {
  std::cerr << "mlp_recompute: " << e.what() << '\n';
  return 2;
}
