// Measuring a schedule's real bubbles on a laptop. Synthetic stages take the cost model's
// time for every F, BI and BW as a timed wait (device time modelled without burning a core),
// the executor runs them on the CPU backend — p host threads, two streams per rank,
// rendezvous transfers — and the measured Timeline is set beside the simulator's prediction
// and the literature's formula.
//
//   bubble_bench_cpu [ranks] [microbatches] [ms per unit] [schedule ...]
//   bubble_bench_cpu 4 16 1 1f1b zb-h1 interleaved-1f1b
//
// Costs: F = 1 unit, BI = 1, BW = 1 (B = 2), the same for every (virtual) stage.
#include <chrono>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <ppsched/backend/cpu.hpp>
#include <ppsched/runtime/synthetic.hpp>
#include <ppsched/runtime/world.hpp>
#include <ppsched/schedule/generators.hpp>
#include <ppsched/lower/lower.hpp>
#include <ppsched/sim/analytic.hpp>
#include <ppsched/costs/cost_model.hpp>
#include <ppsched/sim/simulate.hpp>
#include <ppsched/trace/ascii.hpp>
#include <ppsched/trace/compare.hpp>
#include <string>
#include <vector>

int main(int argc, char** argv) try {
  const int p = argc > 1 ? std::atoi(argv[1]) : 4;
  const int m = argc > 2 ? std::atoi(argv[2]) : 16;
  const double ms_per_unit = argc > 3 ? std::atof(argv[3]) : 1.0;
  std::vector<std::string> families;
  for (int i = 4; i < argc; ++i) families.emplace_back(argv[i]);
  if (families.empty()) families = {"1f1b", "zb-h1", "interleaved-1f1b"};

  const ppsched::CostModel cost = ppsched::uniform_costs(1.0, 1.0, 1.0, "ms");
  const auto per_unit = std::chrono::nanoseconds(static_cast<long long>(ms_per_unit * 1e6));
  for (const std::string& family : families) {
    ppsched::ScheduleRequest request;
    request.ranks = p;
    request.microbatches = m;
    // The looped families take two chunks here; the V-shaped ones accept nothing else.
    const ppsched::FamilyInfo& info = ppsched::family_info(family);
    request.chunks = info.chunks_for(2);
    const ppsched::Schedule compute_only = ppsched::make_schedule(family, request);
    // Lower with the same costs the simulator uses, so both run the same programs.
    const ppsched::Schedule schedule =
        ppsched::lower(compute_only, ppsched::lower_options_for(cost, compute_only.stages(), m));
    ppsched::Timeline predicted = ppsched::simulate(schedule, cost).timeline;
    for (ppsched::Span& s : predicted.spans) {  // the prediction in ms, like the measurement
      s.start *= ms_per_unit;
      s.end *= ms_per_unit;
    }

    ppsched::CpuOptions options;
    options.checking = false;  // measuring: the race checker was proven on these programs in the tests
    ppsched::CpuCluster cluster(p, options);
    std::vector<ppsched::CpuBackend*> ranks;
    for (int r = 0; r < p; ++r) ranks.push_back(&cluster.rank(r));
    ppsched::World<ppsched::CpuBackend> world(ranks, schedule,
                                              ppsched::synthetic_stages(cost, schedule.stages(), m, per_unit));
    const std::vector<float> inputs(static_cast<std::size_t>(m), 1.0f);
    const std::vector<float> targets(static_cast<std::size_t>(m), 0.0f);
    (void)world.run_step({inputs, targets});  // warm-up
    const ppsched::Timeline measured = world.run_step({inputs, targets}).timeline;

    std::cout << "== " << family << ": p = " << p << ", m = " << m << ", v = " << request.chunks
              << ", 1 unit = " << ms_per_unit << " ms\n";
    std::cout << ppsched::compare(measured, predicted);
    if (info.bubble != nullptr) {  // the family has a closed form
      const double per_rank_chunks = static_cast<double>(request.chunks);
      const auto formula =
          ppsched::analytic_bubble(family, p, m, request.chunks, per_rank_chunks, per_rank_chunks, per_rank_chunks);
      std::cout << "formula " << formula.formula << " = " << formula.idle_per_rank * ms_per_unit
                << " ms idle per rank (against the " << formula.measured_against << ")\n";
    }
    ppsched::AsciiOptions ascii;
    ascii.max_columns = 100;
    std::cout << "measured:\n" << ppsched::to_ascii(measured, ascii) << '\n';
  }
  return EXIT_SUCCESS;
} catch (const std::exception& e) {
  std::cerr << "bubble_bench_cpu: " << e.what() << '\n';
  return 2;
}
