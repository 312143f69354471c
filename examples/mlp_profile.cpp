// Measuring a model instead of writing its profile by hand. The plain C++ MLP of
// examples/mlp (8 linear + tanh layers of width 64) is profiled layer by layer: each layer
// is one stage function, timed forward, input gradient and weight gradient at 2, 8 and 32
// rows per micro-batch on this thread, as the CPU backend's compute stream would run it;
// the CPU backend's fixed cost per action and per transfer is measured with empty stages.
// The result is a profile that `ppsched-plan --profile measured.json` reads as it is. Then the
// model runs for real (1F1B on 2 CPU ranks, layers 0-3 and 4-7, 8 micro-batches of 8 rows)
// and the last step's measured timeline is saved, for `ppsched-plan --calibrate`:
//
//   mlp_profile [measured.json] [repetitions] [measured_timeline.csv]
//   ppsched-plan --profile measured.json --devices 2 --global-batch 64
//   ppsched-plan --profile measured.json --devices 2 --global-batch 64
//                --calibrate measured_timeline.csv --calibrate-rows 8   (one line)
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <ppsched/backend/cpu.hpp>
#include <ppsched/graph/profile_json.hpp>
#include <ppsched/runtime/profile.hpp>
#include <ppsched/runtime/world.hpp>
#include <ppsched/schedule/one_f_one_b.hpp>
#include <ppsched/trace/csv.hpp>
#include <string>
#include <vector>

#include "mlp/mlp.hpp"
#include "mlp/mlp_stage.hpp"

int main(int argc, char** argv) try {
  const std::string path = argc > 1 ? argv[1] : "measured.json";
  const int repetitions = argc > 2 ? std::atoi(argv[2]) : 20;
  const std::string timeline_path = argc > 3 ? argv[3] : "measured_timeline.csv";

  const std::vector<std::size_t> widths{64, 64, 64, 64, 64, 64, 64, 64, 64};
  mlp::Mlp model(widths, 1);
  const std::size_t layers = model.layers.size();

  // example-begin profile-stages
  // The stage functions of every layer, built for micro-batches of `rows` rows; the adapters
  // live as long as the functions that point into them.
  auto adapters = std::make_shared<std::vector<std::unique_ptr<mlp::MlpStage>>>();
  const ppsched::profiling::StageFactory one_stage_per_layer = [&model, layers, adapters](std::int32_t rows) {
    std::vector<ppsched::StageFunctions> functions;
    for (std::size_t l = 0; l < layers; ++l) {
      adapters->push_back(std::make_unique<mlp::MlpStage>(model, l, l + 1, static_cast<std::size_t>(rows), 1));
      functions.push_back(adapters->back()->functions(l + 1 == layers, 1.0f, 0.0f));
    }
    return functions;
  };
  ppsched::profiling::ProfileOptions options;
  options.rows = {2, 8, 32};
  options.repetitions = repetitions;
  options.warmup = 3;
  for (std::size_t l = 0; l < layers; ++l) options.names.push_back("linear" + std::to_string(l));
  const std::vector<ppsched::profiling::StageProfile> stages = ppsched::profiling::profile_stages(one_stage_per_layer, options);

  // The backend's own cost per action and per transfer: empty stages through the executor.
  ppsched::CpuOptions cpu;
  cpu.checking = false;  // as a measured run uses it
  ppsched::CpuCluster single(1, cpu), pair(2, cpu);
  const ppsched::profiling::BackendOverheads overheads = ppsched::profiling::measure_backend_overheads<ppsched::CpuBackend>(
      {&single.rank(0)}, {&pair.rank(0), &pair.rank(1)});

  const ppsched::Profile profile = ppsched::profiling::measured_profile(stages, "ms", 32, overheads);
  std::ofstream(path) << ppsched::profile_to_json(profile) << '\n';
  // example-end profile-stages

  std::cout << std::fixed << std::setprecision(4) << "layer      rows  F (ms)   BI (ms)  BW (ms)  spread\n";
  for (const ppsched::profiling::StageProfile& s : stages) {
    for (const ppsched::profiling::StageTiming& t : s.sizes) {
      std::cout << std::left << std::setw(10) << s.name << std::right << std::setw(5) << t.rows << "  " << t.forward.median
                << "   " << t.backward_input.median << "   " << t.backward_weight.median << "   "
                << std::max({t.forward.relative_spread(), t.backward_input.relative_spread(),
                             t.backward_weight.relative_spread()})
                << '\n';
    }
  }
  std::cout << "fixed cost per step " << overheads.fixed_costs.step << " ms, per action " << overheads.fixed_costs.action
            << " ms, per transfer " << overheads.fixed_costs.transfer << " ms (steps of empty stages: one rank median "
            << overheads.few_step.median << " ms with few micro-batches, " << overheads.one_rank_step.median
            << " ms with many, two ranks " << overheads.two_rank_step.median << " ms)\n"
            << "wrote " << path << '\n';

  // example-begin measured-run
  // A real run whose timeline calibrates the profile: 1F1B, 2 ranks, 8 micro-batches of 8 rows.
  const std::int32_t m = 8;
  const std::size_t rows = 8;
  const ppsched::Schedule schedule = ppsched::make_1f1b(ppsched::ScheduleRequest{2, m, 1});
  std::vector<std::unique_ptr<mlp::MlpStage>> halves;
  std::vector<ppsched::StageFunctions> functions;
  for (std::size_t s = 0; s < 2; ++s) {
    halves.push_back(std::make_unique<mlp::MlpStage>(model, 4 * s, 4 * s + 4, rows, m));
    functions.push_back(halves.back()->functions(s == 1, 1.0f / static_cast<float>(rows * m), 0.0f));
  }
  ppsched::CpuCluster cluster(2, cpu);
  ppsched::World<ppsched::CpuBackend> world({&cluster.rank(0), &cluster.rank(1)}, schedule, functions);
  const std::vector<float> inputs(static_cast<std::size_t>(m) * rows * widths.front(), 0.25f);
  const std::vector<float> targets(static_cast<std::size_t>(m) * rows * widths.back(), 0.0f);
  for (int step = 0; step < 5; ++step) (void)world.run_step({inputs, targets});
  std::ofstream(timeline_path) << ppsched::to_timeline_csv(world.last_step().timeline);
  // example-end measured-run
  std::cout << "wrote " << timeline_path << " (the last of 5 steps of 1f1b on 2 ranks)\n";
  return 0;
} catch (const std::exception& e) {
  std::cerr << "mlp_profile: " << e.what() << '\n';
  return 1;
}
