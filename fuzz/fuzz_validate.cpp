// libFuzzer harness: the validator (validate/validate.hpp) fed arbitrary action lists —
// any ops, stages and micro-batches (some out of range), any groups (on compute actions too:
// overlapped pairs), any placement. It must answer with a report, never throw, crash or hang. A schedule it accepts is then held to
// its promise: the simulator runs it to the end and every rank can be planned for execution
// (runtime/plan.hpp), so "valid" really means "runs".
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <ppsched/error.hpp>
#include <ppsched/runtime/step_plan.hpp>
#include <ppsched/schedule/schedule.hpp>
#include <ppsched/costs/cost_model.hpp>
#include <ppsched/sim/simulate.hpp>
#include <ppsched/validate/validate.hpp>
#include <vector>

#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ppsched::fuzz::FuzzInput in(data, size);
  ppsched::Schedule s;
  s.name = "fuzz";
  const std::uint8_t shape = in.byte();
  const bool odd_shape = shape % 32u == 0;  // now and then, a shape the validator must reject
  s.ranks = odd_shape ? in.in_range(-1, 5) : in.in_range(1, 4);
  s.microbatches = odd_shape ? in.in_range(-1, 5) : in.in_range(1, 4);
  const std::int32_t stages = in.in_range(odd_shape ? 0 : 1, 8);
  s.split_backward = (shape & 1u) != 0;
  // Bit 6: compute actions carry group ids too (overlapped F&B pairs, and malformed ones),
  // and every id has 7 values, enough for a small lowered or DualPipeV schedule
  // (fuzz/make_validate_seeds.cpp writes such schedules as seeds).
  const bool grouped_compute = (shape & 0x40u) != 0;
  for (std::int32_t st = 0; st < stages; ++st) {
    s.placement.push_back(odd_shape ? in.in_range(-1, 5) : in.in_range(0, std::max(0, s.ranks - 1)));
  }
  const std::int32_t programs = odd_shape ? in.in_range(0, 5) : std::max(0, s.ranks);
  s.programs.resize(static_cast<std::size_t>(programs));
  for (auto& program : s.programs) {
    const std::int32_t length = in.in_range(0, 40);
    for (std::int32_t i = 0; i < length && !in.empty(); ++i) {
      ppsched::Action a;
      a.op = static_cast<ppsched::Op>(in.byte() % ppsched::op_count);
      a.stage = in.in_range(-1, stages);
      a.microbatch = in.in_range(-1, std::max(0, s.microbatches));
      if (grouped_compute)
        a.group = static_cast<std::uint32_t>(in.byte() % 8u);
      else
        a.group = ppsched::is_comm(a.op) ? static_cast<std::uint32_t>(in.byte() % 4u) : 0u;
      program.push_back(a);
    }
  }

  ppsched::ValidateOptions options;
  options.max_problems = 50;
  const ppsched::ValidationReport report = ppsched::validate(s, options);
  if (!report.ok()) return 0;

  // Accepted: it must simulate to the end and plan on every rank.
  (void)ppsched::simulate(s, ppsched::uniform_costs(1.0, 1.0, 1.0));
  if (ppsched::is_lowered(s)) {
    const std::vector<ppsched::StageShape> shapes(static_cast<std::size_t>(s.stages()), ppsched::StageShape{2, 2});
    // Memory actions included: the executor runs them (issue 23), so an accepted schedule
    // with R, OFFLOAD and RELOAD must plan as it is.
    for (std::int32_t r = 0; r < s.ranks; ++r) (void)ppsched::plan_rank(s, r, shapes);
  }
  return 0;
}
