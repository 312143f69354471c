// Memory actions (issue 23): recompute R, OFFLOAD and RELOAD in the IR, the static checks, the
// abstract execution (the copy lane), lowering, the memory walk, the simulator, the traces and
// schedule CSV. Each misplaced memory action is rejected with its own kind and a message that
// names the action, the place and the fix.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "ppsched/backend/cpu.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/error.hpp"
#include "ppsched/lower/lower.hpp"
#include "ppsched/plan/memory_choice.hpp"
#include "ppsched/plan/memory_policy.hpp"
#include "ppsched/plan/compare.hpp"
#include "ppsched/plan/costs.hpp"
#include "ppsched/plan/model.hpp"
#include "ppsched/graph/profile.hpp"
#include "ppsched/graph/profile_json.hpp"
#include "ppsched/plan/search/dependency_run.hpp"
#include "ppsched/plan/search/memory.hpp"
#include "ppsched/runtime/synthetic.hpp"
#include "ppsched/runtime/world.hpp"
#include "ppsched/schedule/csv.hpp"
#include "ppsched/schedule/generators.hpp"
#include "ppsched/sim/simulate.hpp"
#include "ppsched/trace/ascii.hpp"
#include "ppsched/trace/chrome_trace.hpp"
#include "ppsched/trace/csv.hpp"
#include "ppsched/trace/stats.hpp"
#include "ppsched/validate/validate.hpp"

using namespace ppsched;
using namespace ppsched::plan;

namespace {

Action act(Op op, std::int32_t stage, std::int32_t mb, std::uint32_t group = 0) { return Action{op, stage, mb, group}; }

Schedule one_f_one_b(std::int32_t p, std::int32_t m) { return make_schedule("1f1b", {p, m, 1}); }

// Inserts `op` for the same (stage, micro-batch) right before the first action matching
// (before_op, stage, mb) on its rank.
void insert_before(Schedule& s, Op op, Op before_op, std::int32_t stage, std::int32_t mb) {
  auto& prog = s.programs[static_cast<std::size_t>(s.rank_of(stage))];
  const auto it = std::find_if(prog.begin(), prog.end(), [&](const Action& a) {
    return a.op == before_op && a.stage == stage && a.microbatch == mb;
  });
  REQUIRE(it != prog.end());
  prog.insert(it, act(op, stage, mb));
}
void insert_after(Schedule& s, Op op, Op after_op, std::int32_t stage, std::int32_t mb) {
  auto& prog = s.programs[static_cast<std::size_t>(s.rank_of(stage))];
  const auto it = std::find_if(prog.begin(), prog.end(), [&](const Action& a) {
    return a.op == after_op && a.stage == stage && a.microbatch == mb;
  });
  REQUIRE(it != prog.end());
  prog.insert(it + 1, act(op, stage, mb));
}

// Every micro-batch of every stage recomputed right before its backward.
Schedule with_recompute(Schedule s) {
  for (std::int32_t st = 0; st < s.stages(); ++st)
    for (std::int32_t mb = 0; mb < s.microbatches; ++mb) insert_before(s, Op::R, s.split_backward ? Op::BI : Op::B, st, mb);
  return s;
}
// Every micro-batch offloaded right after its forward and reloaded right before its backward.
Schedule with_offload(Schedule s) {
  for (std::int32_t st = 0; st < s.stages(); ++st) {
    for (std::int32_t mb = 0; mb < s.microbatches; ++mb) {
      insert_after(s, Op::OFFLOAD, Op::F, st, mb);
      insert_before(s, Op::RELOAD, s.split_backward ? Op::BI : Op::B, st, mb);
    }
  }
  return s;
}

std::string listing(const ValidationReport& r) {
  std::string out;
  for (const Problem& p : r.problems) out += std::string(problem_kind_name(p.kind)) + ": " + p.message + "\n";
  return out;
}

Problem only_problem(const ValidationReport& r, ProblemKind kind) {
  INFO(listing(r));
  REQUIRE(r.problems.size() == 1);
  REQUIRE(r.problems.front().kind == kind);
  return r.problems.front();
}

}  // namespace

TEST_CASE("the memory operations have names, codes after the first eight, and their own predicate", "[memory]") {
  STATIC_REQUIRE(op_count == 11);
  STATIC_REQUIRE(static_cast<int>(Op::R) == 8);
  STATIC_REQUIRE(static_cast<int>(Op::OFFLOAD) == 9);
  STATIC_REQUIRE(static_cast<int>(Op::RELOAD) == 10);
  CHECK(op_name(Op::R) == "R");
  CHECK(op_name(Op::OFFLOAD) == "OFFLOAD");
  CHECK(op_name(Op::RELOAD) == "RELOAD");
  int compute = 0, comm = 0, memory = 0;
  for (int k = 0; k < op_count; ++k) {
    const auto op = static_cast<Op>(k);
    CHECK(op_name(op) != "?");
    // Every operation is exactly one of the three kinds.
    CHECK(int{is_compute(op)} + int{is_comm(op)} + int{is_memory(op)} == 1);
    compute += is_compute(op) ? 1 : 0;
    comm += is_comm(op) ? 1 : 0;
    memory += is_memory(op) ? 1 : 0;
  }
  CHECK(compute == 4);
  CHECK(comm == 4);
  CHECK(memory == 3);
  CHECK(is_copy(Op::OFFLOAD));
  CHECK(is_copy(Op::RELOAD));
  CHECK_FALSE(is_copy(Op::R));
  CHECK(to_string(act(Op::RELOAD, 2, 5)) == "RELOAD5@s2");
}

TEST_CASE("recompute and offload, placed right, validate and lower to valid schedules", "[memory]") {
  for (const bool recompute : {true, false}) {
    const Schedule plain = one_f_one_b(4, 8);
    const Schedule s = recompute ? with_recompute(plain) : with_offload(plain);
    const ValidationReport report = validate(s);
    INFO(listing(report));
    CHECK(report.ok());
    CHECK(report.deadlock_checked);
    const LoweredSchedule lowered = lower(s);
    const ValidationReport lowered_report = validate(lowered.schedule());
    INFO(listing(lowered_report));
    CHECK(lowered_report.ok());
    // Lowering keeps each rank's compute and memory actions in their order.
    CHECK(strip_communication(lowered.schedule()).programs == s.programs);
    CHECK(strip_memory_actions(s).programs == plain.programs);
  }
}

TEST_CASE("a misplaced memory action is rejected with its kind, place and fix", "[memory]") {
  const Schedule base = with_offload(one_f_one_b(2, 3));
  SECTION("RELOAD before OFFLOAD") {
    Schedule s = base;
    auto& prog = s.programs[0];
    auto off = std::find(prog.begin(), prog.end(), act(Op::OFFLOAD, 0, 1));
    auto rel = std::find(prog.begin(), prog.end(), act(Op::RELOAD, 0, 1));
    REQUIRE(off < rel);
    std::iter_swap(off, rel);
    const Problem p = only_problem(validate(s), ProblemKind::memory_order);
    CHECK(p.action == act(Op::RELOAD, 0, 1));
    CHECK(p.rank == 0);
    CHECK(p.message.find("RELOAD1@s0 (rank 0 position") != std::string::npos);
    CHECK(p.message.find("comes before OFFLOAD1@s0") != std::string::npos);
    CHECK(p.message.find("move RELOAD1@s0 after OFFLOAD1@s0") != std::string::npos);
  }
  SECTION("OFFLOAD without RELOAD") {
    Schedule s = base;
    auto& prog = s.programs[1];
    prog.erase(std::find(prog.begin(), prog.end(), act(Op::RELOAD, 1, 2)));
    const Problem p = only_problem(validate(s), ProblemKind::memory_unmatched);
    CHECK(p.message.find("nothing brings it back: add RELOAD2@s1 before B2@s1") != std::string::npos);
  }
  SECTION("RELOAD without OFFLOAD") {
    Schedule s = base;
    auto& prog = s.programs[1];
    prog.erase(std::find(prog.begin(), prog.end(), act(Op::OFFLOAD, 1, 0)));
    const Problem p = only_problem(validate(s), ProblemKind::memory_unmatched);
    CHECK(p.message.find("never offloaded: add OFFLOAD0@s1 after F0@s1") != std::string::npos);
  }
  SECTION("both recompute and offload of one micro-batch: F, OFFLOAD, RELOAD, R, B is valid") {
    // (layer-wise recomputation with offloaded checkpoints)
    Schedule s = base;
    insert_before(s, Op::R, Op::B, 0, 2);
    const ValidationReport report = validate(s);
    INFO(listing(report));
    CHECK(report.ok());
    CHECK(validate(lower(s).schedule()).ok());
  }
  SECTION("R before the RELOAD of its offloaded checkpoints") {
    Schedule s = base;
    insert_before(s, Op::R, Op::RELOAD, 0, 2);
    const Problem p = only_problem(validate(s), ProblemKind::memory_order);
    CHECK(p.action == act(Op::R, 0, 2));
    CHECK(p.message.find("R recomputes from the checkpoints RELOAD brings back; move R2@s0 after RELOAD2@s0") !=
          std::string::npos);
  }
  const Schedule rbase = with_recompute(one_f_one_b(2, 3));
  SECTION("R after its backward") {
    Schedule s = rbase;
    auto& prog = s.programs[1];
    auto r = std::find(prog.begin(), prog.end(), act(Op::R, 1, 1));
    prog.erase(r);
    insert_after(s, Op::R, Op::B, 1, 1);
    const Problem p = only_problem(validate(s), ProblemKind::memory_order);
    CHECK(p.action == act(Op::B, 1, 1));
    CHECK(p.message.find("the backward needs the activation R restores; move B1@s1 after R1@s1") != std::string::npos);
  }
  SECTION("R before its forward") {
    Schedule s = rbase;
    auto& prog = s.programs[0];
    prog.erase(std::find(prog.begin(), prog.end(), act(Op::R, 0, 2)));
    prog.insert(prog.begin(), act(Op::R, 0, 2));
    const Problem p = only_problem(validate(s), ProblemKind::memory_order);
    CHECK(p.message.find("R2@s0 (rank 0 position 0) comes before F2@s0") != std::string::npos);
    CHECK(p.message.find("move R2@s0 after F2@s0") != std::string::npos);
  }
  SECTION("R without its forward") {
    Schedule s = rbase;
    auto& prog = s.programs[0];
    prog.erase(std::find(prog.begin(), prog.end(), act(Op::F, 0, 1)));
    const ValidationReport r = validate(s);
    INFO(listing(r));
    CHECK(r.has(ProblemKind::missing_compute));
    CHECK_FALSE(r.ok());
  }
  SECTION("a second R") {
    Schedule s = rbase;
    insert_before(s, Op::R, Op::B, 1, 0);
    const Problem p = only_problem(validate(s), ProblemKind::duplicate);
    CHECK(p.message.find("R0@s1 appears twice") != std::string::npos);
  }
  SECTION("R in a forward-only step") {
    Schedule s = one_f_one_b(2, 3);
    for (auto& prog : s.programs)
      prog.erase(std::remove_if(prog.begin(), prog.end(), [](const Action& a) { return a.op != Op::F; }), prog.end());
    s.programs[0].push_back(act(Op::R, 0, 0));
    const Problem p = only_problem(validate(s), ProblemKind::memory_unmatched);
    CHECK(p.message.find("has no B or BI") != std::string::npos);
  }
  SECTION("a memory action with a group") {
    Schedule s = rbase;
    for (Action& a : s.programs[0])
      if (a.op == Op::R && a.microbatch == 0) a.group = 3;
    const Problem p = only_problem(validate(s), ProblemKind::memory_grouped);
    CHECK(p.message.find("set its group to 0") != std::string::npos);
  }
  SECTION("lower and simulate refuse it with the same problem") {
    Schedule s = rbase;
    auto& prog = s.programs[1];
    prog.erase(std::find(prog.begin(), prog.end(), act(Op::R, 1, 1)));
    insert_after(s, Op::R, Op::B, 1, 1);
    CHECK_THROWS_WITH(lower(s), Catch::Contains("move B1@s1 after R1@s1"));
    CHECK_THROWS_WITH(simulate(s, uniform_costs(1, 1, 1)), Catch::Contains("move B1@s1 after R1@s1"));
  }
}

TEST_CASE("recompute and offload lower the counted peak memory", "[memory]") {
  const Schedule plain = one_f_one_b(4, 8);
  const double plain_peak = validate(plain).memory[0].peak_activations;
  CHECK(plain_peak == 4.0);
  // Full recomputation: F keeps nothing, R restores all just before B.
  CHECK(validate(with_recompute(plain)).memory[0].peak_activations == 1.0);
  // Offload right after F, reload right before B: at most the one in use and one in flight.
  CHECK(validate(with_offload(plain)).memory[0].peak_activations <= 2.0);
  // Selective recomputation of a quarter: F keeps 3/4, R brings back 1/4.
  ValidateOptions options;
  options.memory.activation_bytes.assign(4, 100.0);
  options.memory.recompute_fraction.assign(4, 0.25);
  const ValidationReport r = validate(with_recompute(plain), options);
  CHECK(r.memory[0].peak_bytes == Approx(4 * 75.0 + 25.0));
  // The planner's own walk agrees.
  CostModel c = uniform_costs(1, 1, 1);
  c.stages[0].activation_bytes = 100.0;
  c.stages[0].recompute_saved_bytes = 25.0;
  CHECK(peak_memory(with_recompute(plain), c).bytes[0] == Approx(r.memory[0].peak_bytes));
  CHECK(memory_model_for(c, 4).recompute_fraction == std::vector<double>(4, 0.25));
  CHECK_THROWS_WITH(validate(plain, [] {
                      ValidateOptions o;
                      o.memory.offload_fraction = {0.5, 2.0, 0.5, 0.5};
                      return o;
                    }()),
                    Catch::Contains("offload_fraction[1] = 2 is outside [0, 1]"));
}

TEST_CASE("the cost model prices R on the compute lane and copies over the host link", "[memory][costs]") {
  CostModel c = uniform_costs(4, 3, 2);
  c.stages[0].activation_bytes = 1000.0;
  CHECK(compute_time(c, act(Op::R, 0, 0), 1) == 4.0);  // full recomputation: the forward
  c.stages[0].recompute_saved_bytes = 250.0;
  CHECK(compute_time(c, act(Op::R, 0, 0), 1) == 1.0);  // a quarter of it
  c.stages[0].recompute = 0.5;
  CHECK(compute_time(c, act(Op::R, 0, 0), 1) == 0.5);  // as given
  CHECK(compute_time(c, act(Op::OFFLOAD, 0, 0), 1) == 0.0);  // free host link by default
  c.host_link = Interconnect{0.5, 100.0};
  CHECK(compute_time(c, act(Op::OFFLOAD, 0, 0), 1) == Approx(10.5));
  c.stages[0].offload_bytes = 500.0;
  CHECK(compute_time(c, act(Op::RELOAD, 0, 0), 1) == Approx(5.5));
  c.stages[0].offload_bytes = 2000.0;
  CHECK_THROWS_WITH(check_cost_model(c, 2, 2), Catch::Contains("offload_bytes 2000 exceeds activation_bytes 1000"));
  c.stages[0].offload_bytes.reset();
  c.host_link.bandwidth = 0.0;
  CHECK_THROWS_WITH(check_cost_model(c, 2, 2), Catch::Contains("host_link.bandwidth"));
}

TEST_CASE("the simulator runs copies on a copy lane beside compute and R on the compute lane", "[memory][sim]") {
  CostModel c = uniform_costs(2, 2, 2);
  c.stages[0].activation_bytes = 100.0;
  const Schedule plain = one_f_one_b(2, 4);
  const SimResult base = simulate(plain, c);
  SECTION("recompute takes compute time") {
    const SimResult r = simulate(with_recompute(plain), c);
    // Every B waits for an R of the forward's time on its rank.
    CHECK(r.makespan > base.makespan);
    double busy = 0.0;
    for (const Span& sp : r.timeline.spans) {
      if (sp.action.op == Op::R) {
        CHECK(sp.lane == Lane::compute);
        CHECK(sp.end - sp.start == Approx(2.0));
      }
      if (sp.rank == 0 && sp.lane == Lane::compute && !is_comm(sp.action.op)) busy += sp.end - sp.start;
    }
    CHECK(busy == Approx(4 * 6.0 + 4 * 2.0));
    CHECK(r.memory[0].peak_activations == 1.0);
  }
  SECTION("free copies hide entirely") {
    const SimResult r = simulate(with_offload(plain), c);
    CHECK(r.makespan == Approx(base.makespan));
    std::size_t copies = 0;
    for (const Span& sp : r.timeline.spans) {
      if (!is_copy(sp.action.op)) continue;
      ++copies;
      CHECK(sp.lane == Lane::copy);
    }
    CHECK(copies == 2 * 2 * 4);
    // Busy time counts the compute lane only.
    CHECK(r.ranks[0].busy == Approx(base.ranks[0].busy));
  }
  SECTION("slow copies delay the backward that waits for its reload") {
    c.host_link = Interconnect{0.0, 10.0};  // 10 time units per copy
    const SimResult r = simulate(with_offload(plain), c);
    CHECK(r.makespan > base.makespan);
    // A backward starts only after its reload ended, and a reload only after its offload.
    std::map<std::tuple<int, int, int>, const Span*> by;
    for (const Span& sp : r.timeline.spans) by[{static_cast<int>(sp.action.op), sp.action.stage, sp.action.microbatch}] = &sp;
    for (std::int32_t st = 0; st < 2; ++st) {
      for (std::int32_t mb = 0; mb < 4; ++mb) {
        const Span* f = by.at({static_cast<int>(Op::F), st, mb});
        const Span* off = by.at({static_cast<int>(Op::OFFLOAD), st, mb});
        const Span* rel = by.at({static_cast<int>(Op::RELOAD), st, mb});
        const Span* b = by.at({static_cast<int>(Op::B), st, mb});
        CHECK(off->start >= f->end);
        CHECK(rel->start >= off->end);
        CHECK(b->start >= rel->end);
        CHECK(rel->end - rel->start == Approx(10.0));
      }
    }
    // One stream per rank: copies block compute, so the step is longer still.
    SimOptions one;
    one.comm_on_compute_stream = true;
    const SimResult serial = simulate(with_offload(plain), c, one);
    CHECK(serial.makespan > r.makespan);
    for (const Span& sp : serial.timeline.spans) CHECK(sp.lane != Lane::copy);
  }
}

TEST_CASE("traces and schedule CSV show the memory actions distinctly", "[memory][trace]") {
  CostModel c = uniform_costs(2, 2, 2);
  c.host_link = Interconnect{0.0, 1.0};
  c.stages[0].activation_bytes = 1.0;
  Schedule s = with_offload(one_f_one_b(2, 3));
  // Recompute on stage 1 instead of offload.
  for (auto& prog : s.programs)
    prog.erase(std::remove_if(prog.begin(), prog.end(), [](const Action& a) { return a.stage == 1 && is_copy(a.op); }),
               prog.end());
  for (std::int32_t mb = 0; mb < 3; ++mb) insert_before(s, Op::R, Op::B, 1, mb);
  REQUIRE(validate(s).ok());
  const SimResult r = simulate(s, c);

  std::ostringstream chrome;
  write_chrome_trace(chrome, r.timeline);
  CHECK(chrome.str().find(R"("name":"copy")") != std::string::npos);
  CHECK(chrome.str().find(R"("name":"OFFLOAD0","cat":"memory")") != std::string::npos);
  CHECK(chrome.str().find(R"("name":"R0","cat":"memory")") != std::string::npos);

  const std::string ascii = to_ascii(r.timeline);
  CHECK(ascii.find("copy |") != std::string::npos);
  CHECK(ascii.find('C') != std::string::npos);  // recompute
  CHECK(ascii.find('O') != std::string::npos);
  CHECK(ascii.find('L') != std::string::npos);

  std::ostringstream csv;
  write_timeline_csv(csv, r.timeline);
  CHECK(csv.str().find(",copy,OFFLOAD,") != std::string::npos);
  std::ostringstream again;
  write_timeline_csv(again, parse_timeline_csv(csv.str()));
  CHECK(again.str() == csv.str());

  const std::string text = to_pytorch_csv(s);
  CHECK(text.find("1R0") != std::string::npos);
  CHECK(text.find("0OFFLOAD0") != std::string::npos);
  CHECK(text.find("0RELOAD0") != std::string::npos);
  const Schedule back = from_pytorch_csv(text);
  CHECK(back.programs == s.programs);
  const Schedule lowered_back = from_pytorch_csv(to_pytorch_csv(lower(s).schedule()));
  CHECK(lowered_back.programs == lower(s).schedule().programs);
}

// The runtime half of issue 23 (tests/test_memory_runtime.cpp has the rest): the executor
// runs the memory actions, and its timeline holds them where the simulator puts them.
TEST_CASE("the executor runs memory actions, and measures them on their lanes", "[memory][runtime]") {
  using namespace std::chrono_literals;
  const Schedule s = with_recompute(one_f_one_b(2, 2));
  CpuCluster cluster(2);
  std::vector<CpuBackend*> backends{&cluster.rank(0), &cluster.rank(1)};
  const auto stages = synthetic_stages(uniform_costs(0, 0, 0), s.stages(), s.microbatches, 1ms, 4);
  const std::vector<float> inputs(8, 1.0f), targets(8, 0.0f);
  World<CpuBackend> world(backends, s, stages);
  const StepResult& result = world.run_step({inputs, targets});
  std::size_t recomputes = 0;
  for (const Span& span : result.timeline.spans) {
    if (span.action.op != Op::R) continue;
    ++recomputes;
    CHECK(span.lane == Lane::compute);
  }
  CHECK(recomputes == 4);
}

TEST_CASE("a copy waits for the compute issued before it, and memory over time sees the copy lane", "[memory][sim]") {
  CostModel c = uniform_costs(2, 2, 2);
  c.stages[0].activation_bytes = 100.0;
  c.host_link = Interconnect{0.0, 100.0};  // one time unit per copy
  const Schedule plain = one_f_one_b(2, 4);
  // Rank 0 offloads micro-batch 0 right after its F and reloads it right before its B.
  Schedule s = plain;
  insert_after(s, Op::OFFLOAD, Op::F, 0, 0);
  insert_before(s, Op::RELOAD, Op::B, 0, 0);
  REQUIRE(validate(s).ok());
  const SimResult r = simulate(s, c);
  const auto span_of = [&r](Op op, std::int32_t stage, std::int32_t mb) {
    for (const Span& sp : r.timeline.spans)
      if (sp.action.op == op && sp.action.stage == stage && sp.action.microbatch == mb) return sp;
    FAIL("no span " << to_string(act(op, stage, mb)));
    return Span{};
  };
  // Rank 0's program: F0 OFFLOAD0 F1 RELOAD0 B0 ...: the reload waits for F1, not just for
  // the offload.
  const auto& prog = s.programs[0];
  const auto reload = std::find(prog.begin(), prog.end(), act(Op::RELOAD, 0, 0));
  REQUIRE(reload != prog.begin());
  const Action issued_after = *(reload - 1);
  REQUIRE(is_compute(issued_after.op));
  CHECK(span_of(Op::RELOAD, 0, 0).start >= span_of(issued_after.op, issued_after.stage, issued_after.microbatch).end);
  CHECK(span_of(Op::RELOAD, 0, 0).start > span_of(Op::OFFLOAD, 0, 0).end);
  // Over time: rank 0 holds less while micro-batch 0 is on the host.
  REQUIRE(r.memory_over_time.size() == 2);
  const auto& samples = r.memory_over_time[0];
  REQUIRE_FALSE(samples.empty());
  CHECK(samples.back().bytes == Approx(0.0).margin(1e-9));
  const double off_end = span_of(Op::OFFLOAD, 0, 0).end;
  const auto at = [&samples](double t) {
    MemorySample last;
    for (const MemorySample& m : samples)
      if (m.time <= t) last = m;
    return last;
  };
  const SimResult base = simulate(plain, c);
  CHECK(at(off_end).bytes < base.memory[0].peak_bytes);
  CHECK(r.timed_peak[0].bytes <= base.timed_peak[0].bytes);
  CHECK(base.timed_peak[0].bytes == Approx(base.memory[0].peak_bytes));
  for (std::size_t k = 1; k < samples.size(); ++k) CHECK(samples[k].time > samples[k - 1].time);
}

namespace {

std::size_t count_op(const Schedule& s, Op op) {
  std::size_t n = 0;
  for (const auto& prog : s.programs) n += static_cast<std::size_t>(std::count_if(prog.begin(), prog.end(), [op](const Action& a) { return a.op == op; }));
  return n;
}

CostModel gpt_like_costs(std::int32_t stages) {
  CostModel c;
  c.unit = "ms";
  c.stages.assign(static_cast<std::size_t>(stages), StageCost{10.0, 10.0, 10.0, 1e9, 1e7});
  c.link = Interconnect{0.01, 1e7};       // bytes per ms
  c.host_link = Interconnect{0.01, 1e8};  // 10 ms a copy: two per micro-batch fit in its 30 ms of compute
  return c;
}

}  // namespace

TEST_CASE("memory policies insert valid memory actions and price them", "[memory][policy]") {
  const Schedule plain = one_f_one_b(4, 8);
  const CostModel c = gpt_like_costs(4);
  const SimResult base = simulate(plain, c);
  SECTION("none changes nothing") {
    const MemoryPlan p = apply_memory_policies(plain, c, {MemoryPolicy::none()});
    CHECK(p.schedule.programs == plain.programs);
    CHECK(p.policies.size() == 4);
  }
  SECTION("full recomputation: one R per micro-batch before its backward, less memory, more time") {
    const MemoryPlan p = apply_memory_policies(plain, c, {MemoryPolicy::full_recompute()});
    CHECK(count_op(p.schedule, Op::R) == 4 * 8);
    CHECK(validate(p.schedule).ok());
    const SimResult r = simulate(p.schedule, p.costs);
    CHECK(r.makespan > base.makespan);
    CHECK(r.makespan <= base.makespan + 8 * 10.0 + 1e-9);  // at most one forward per micro-batch more on a rank
    CHECK(r.memory[0].peak_bytes < base.memory[0].peak_bytes);
    CHECK(r.timed_peak[0].bytes < base.timed_peak[0].bytes);
  }
  SECTION("recomputation fills idle time first") {
    MemoryPolicyOptions just_before;
    just_before.recompute_into_idle = false;
    const Schedule zb = make_schedule("zb-h1", {4, 8, 1});
    const MemoryPlan idle = apply_memory_policies(zb, c, {MemoryPolicy::full_recompute()});
    const MemoryPlan late = apply_memory_policies(zb, c, {MemoryPolicy::full_recompute()}, just_before);
    // At most one activation more than right before the backward, and never more than without
    // recomputation.
    const SimResult with_idle = simulate(idle.schedule, idle.costs), with_late = simulate(late.schedule, late.costs);
    const SimResult none = simulate(zb, c);
    for (std::size_t r = 0; r < 4; ++r) {
      CHECK(with_idle.timed_peak[r].bytes <= with_late.timed_peak[r].bytes + 1e9 + 1.0);
      CHECK(with_idle.timed_peak[r].bytes <= none.timed_peak[r].bytes + 1.0);
    }
    UNSCOPED_INFO("zb-h1 full recompute: " << with_idle.makespan << " ms with idle placement, " << with_late.makespan << " right before");
    CHECK(simulate(idle.schedule, idle.costs).makespan <= simulate(late.schedule, late.costs).makespan);
    // Any R moved ahead of its backward passed no forward and at most one other backward.
    std::size_t moved = 0;
    for (const auto& prog : idle.schedule.programs) {
      for (std::size_t k = 0; k < prog.size(); ++k) {
        if (prog[k].op != Op::R) continue;
        std::int32_t backwards = 0;
        std::size_t j = k + 1;
        for (; j < prog.size() && prog[j] != act(Op::BI, prog[k].stage, prog[k].microbatch); ++j) {
          CHECK(prog[j].op != Op::F);
          backwards += prog[j].op == Op::BI ? 1 : 0;
        }
        REQUIRE(j < prog.size());
        CHECK(backwards <= 1);
        moved += j > k + 1 ? 1 : 0;
      }
    }
    UNSCOPED_INFO(moved << " R moved ahead");
    // Right before the backward in the other: each R is followed by its own BI.
    for (const auto& prog : late.schedule.programs) {
      for (std::size_t k = 0; k + 1 < prog.size(); ++k) {
        if (prog[k].op != Op::R) continue;
        CHECK(prog[k + 1].op == Op::BI);
        CHECK(prog[k + 1].microbatch == prog[k].microbatch);
      }
    }
  }
  SECTION("selective recomputation of a part: the profile's bytes and time") {
    MemoryPolicyOptions just_before;
    just_before.recompute_into_idle = false;
    const MemoryPlan p = apply_memory_policies(plain, c, {MemoryPolicy::selective_part(2.5e8, 1.0)}, just_before);
    CHECK(p.costs.stages.size() == 4);
    CHECK(*p.costs.stages[2].recompute_saved_bytes == 2.5e8);
    CHECK(compute_time(p.costs, act(Op::R, 2, 0), 8) == 1.0);
    const SimResult r = simulate(p.schedule, p.costs);
    CHECK(r.memory[0].peak_bytes == Approx(base.memory[0].peak_bytes * 0.75 + 2.5e8));
    const MemoryPlan q = apply_memory_policies(plain, c, {MemoryPolicy::selective(0.5)});
    CHECK(compute_time(q.costs, act(Op::R, 1, 3), 8) == Approx(5.0));
  }
  SECTION("offload: hidden behind compute by a fast host link, and less memory over time") {
    const std::vector<MemoryPolicy> per_stage{MemoryPolicy::offload(), MemoryPolicy::offload(0.5),
                                              MemoryPolicy::none(), MemoryPolicy::full_recompute()};
    const MemoryPlan p = apply_memory_policies(plain, c, per_stage);
    // Stages 0 and 1 hold each activation for at least two micro-batches' compute: every one
    // of theirs is offloaded, and reloaded.
    CHECK(count_op(p.schedule, Op::OFFLOAD) == 2 * 8);
    CHECK(count_op(p.schedule, Op::RELOAD) == 2 * 8);
    // The last stage's backward follows its forward: nothing to hide a copy behind.
    const MemoryPlan last = apply_memory_policies(plain, c, {MemoryPolicy::offload()});
    for (const Action& a : last.schedule.programs[3]) CHECK_FALSE(is_copy(a.op));
    CHECK(count_op(p.schedule, Op::R) == 8);
    const SimResult r = simulate(p.schedule, p.costs);
    // Offload and reload of a micro-batch (20 ms) hide behind its compute (30 ms).
    INFO(to_ascii(r.timeline));
    CHECK(r.timed_peak[0].bytes < base.timed_peak[0].bytes);
    CHECK(r.timed_peak[1].bytes < base.timed_peak[1].bytes);
    CHECK(r.timed_peak[2].bytes == Approx(base.timed_peak[2].bytes));
    CHECK(p.costs.stages[1].offload_bytes == 0.5e9);
  }
  SECTION("bad input is named") {
    CHECK_THROWS_WITH(apply_memory_policies(plain, c, std::vector<MemoryPolicy>(3)),
                      Catch::Contains("3 policies for a schedule of 4 stages"));
    CHECK_THROWS_WITH(apply_memory_policies(plain, c, {MemoryPolicy::offload(1.5)}),
                      Catch::Contains("fraction 1.5 is outside [0, 1]") && Catch::Contains("policies[0]"));
    CHECK_THROWS_WITH(apply_memory_policies(lower(plain).schedule(), c, {MemoryPolicy::full_recompute()}),
                      Catch::Contains("give the compute-only schedule"));
    CHECK_THROWS_WITH(apply_memory_policies(plain, c, {MemoryPolicy::selective_part(2e9, 1.0)}),
                      Catch::Contains("saved_bytes 2e+09 is not within the stage's activation_bytes"));
  }
  SECTION("every training family takes every policy") {
    std::size_t families = 0;
    for (const std::string_view family : family_names()) {
      const FamilyInfo& info = family_info(family);
      const ScheduleRequest request{4, 8, info.chunks_for(2)};
      if (!info.training || !accepts(family, request)) continue;
      ++families;
      for (const MemoryPolicy& policy : {MemoryPolicy::full_recompute(), MemoryPolicy::offload(0.5)}) {
        INFO(family << " " << to_string(policy));
        const Schedule s = make_schedule(family, request);
        const MemoryPlan p = apply_memory_policies(s, uniform_costs(1, 1, 1), {policy});
        CHECK(validate(p.schedule).ok());
        CHECK(validate(lower(p.schedule).schedule()).ok());
      }
    }
    CHECK(families >= 8);
  }
}

TEST_CASE("the planner chooses per-stage policies that fit a memory cap", "[memory][policy]") {
  const Schedule plain = one_f_one_b(4, 8);
  const CostModel c = gpt_like_costs(4);
  const std::vector<double> static_bytes(4, 1e9);
  const SimResult base = simulate(plain, c);
  REQUIRE(base.timed_peak[0].bytes == Approx(4e9));
  SECTION("a cap everything fits: no policy") {
    const MemoryChoice choice = choose_memory_policies(plain, c, static_bytes, 10e9);
    CHECK(choice.fits);
    CHECK(choice.tries == 1);
    CHECK(choice.plan.schedule.programs == plain.programs);
    CHECK(choice.makespan == Approx(base.makespan));
  }
  SECTION("a tighter cap: policies on the fuller ranks, every rank within it") {
    const MemoryChoice choice = choose_memory_policies(plain, c, static_bytes, 3.5e9);
    INFO(choice.tries << " tries");
    REQUIRE(choice.fits);
    for (const double b : choice.peak_bytes) CHECK(b <= 3.5e9);
    // "Fits" is judged as compare_families checks a cap: the program order's walk, and with
    // copies the memory over the simulated time too, whichever is larger.
    const SimResult run = simulate(choice.plan.schedule, choice.plan.costs);
    const bool copies = has_copies(choice.plan.schedule);
    for (std::size_t k = 0; k < 4; ++k) {
      CHECK(choice.peak_bytes[k] == Approx(static_bytes[k] + capped_activation_bytes(run, k, copies)));
      CHECK(choice.peak_bytes[k] >= static_bytes[k] + run.memory[k].peak_bytes * (1.0 - 1e-12));
      if (copies) CHECK(choice.peak_bytes[k] >= static_bytes[k] + run.timed_peak[k].bytes * (1.0 - 1e-12));
    }
    CHECK(choice.plan.policies[3].kind == MemoryPolicyKind::none);  // the last rank holds 1 activation
    CHECK(choice.plan.policies[0].kind != MemoryPolicyKind::none);
    CHECK(choice.makespan >= base.makespan);
    CHECK(validate(choice.plan.schedule).ok());
  }
  SECTION("a cap below the static bytes cannot fit") {
    const MemoryChoice choice = choose_memory_policies(plain, c, static_bytes, 0.9e9);
    CHECK_FALSE(choice.fits);
  }
  CHECK_THROWS_WITH(choose_memory_policies(plain, c, std::vector<double>(3, 0.0), 1e9),
                    Catch::Contains("3 static sizes for 4 ranks"));
  SECTION("a stage's own options: a measured part to recompute") {
    MemoryChoiceOptions o;
    o.stage_ladders.assign(4, {});
    o.stage_ladders[0] = {MemoryPolicy::selective_part(2.5e8, 0.5), MemoryPolicy::full_recompute()};
    const MemoryChoice choice = choose_memory_policies(plain, c, static_bytes, 4.8e9, o);
    REQUIRE(choice.fits);
    CHECK(choice.plan.policies[0] == MemoryPolicy::selective_part(2.5e8, 0.5));
    o.stage_ladders.resize(2);
    CHECK_THROWS_WITH(choose_memory_policies(plain, c, static_bytes, 4.8e9, o), Catch::Contains("2 stage ladders for 4 stages"));
  }
}

TEST_CASE("a recomputation that its backward's gap cannot hold moves into an earlier idle gap", "[memory][policy]") {
  // Two ranks, one stage each, split backward. Stage 1's BI of micro-batch 0 is slow (5) and of
  // micro-batch 1 fast (1), so rank 0 idles long before BI0 and not at all before BI1.
  Schedule s;
  s.name = "hand";
  s.ranks = 2;
  s.microbatches = 2;
  s.placement = {0, 1};
  s.split_backward = true;
  s.programs = {{act(Op::F, 0, 0), act(Op::F, 0, 1), act(Op::BI, 0, 0), act(Op::BI, 0, 1), act(Op::BW, 0, 0), act(Op::BW, 0, 1)},
                {act(Op::F, 1, 0), act(Op::F, 1, 1), act(Op::BI, 1, 0), act(Op::BI, 1, 1), act(Op::BW, 1, 0), act(Op::BW, 1, 1)}};
  CostModel c;
  const StageCost unit{1.0, 1.0, 1.0, 100.0, 0.0};
  StageCost slow = unit, fast = unit;
  slow.backward_input = 5.0;
  c.per_microbatch = {unit, unit, slow, fast};  // stage-major: stage 0 mb 0, 1; stage 1 mb 0, 1
  const std::vector<MemoryPolicy> policies{MemoryPolicy::selective_part(100.0, 3.0), MemoryPolicy::none()};
  const MemoryPlan idle = apply_memory_policies(s, c, policies);
  MemoryPolicyOptions just_before;
  just_before.recompute_into_idle = false;
  const MemoryPlan late = apply_memory_policies(s, c, policies, just_before);
  CHECK(idle.schedule.programs[0] == std::vector<Action>{act(Op::F, 0, 0), act(Op::F, 0, 1), act(Op::R, 0, 0), act(Op::R, 0, 1),
                                                         act(Op::BI, 0, 0), act(Op::BI, 0, 1), act(Op::BW, 0, 0), act(Op::BW, 0, 1)});
  CHECK(late.schedule.programs[0] == std::vector<Action>{act(Op::F, 0, 0), act(Op::F, 0, 1), act(Op::R, 0, 0), act(Op::BI, 0, 0),
                                                         act(Op::R, 0, 1), act(Op::BI, 0, 1), act(Op::BW, 0, 0), act(Op::BW, 0, 1)});
  CHECK(simulate(idle.schedule, idle.costs).makespan == Approx(simulate(late.schedule, late.costs).makespan - 3.0));
  MemoryPolicyOptions beside_none;
  beside_none.max_backwards_crossed = 0;
  CHECK(apply_memory_policies(s, c, policies, beside_none).schedule.programs[0] == late.schedule.programs[0]);
}

TEST_CASE("layer-wise recomputation holds the layers' inputs and one layer at a time", "[memory][layerwise]") {
  // A stage of 100 bytes of activations whose layers' inputs are 20 bytes and whose largest
  // layer holds 30: F keeps 20, R holds 30 while the backward recomputes layer by layer.
  const Schedule plain = one_f_one_b(4, 8);
  CostModel c = uniform_costs(1, 1, 1);
  c.stages[0].activation_bytes = 100.0;
  c.stages[0].recompute_saved_bytes = 80.0;
  c.stages[0].recompute_peak_bytes = 30.0;
  const Schedule s = with_recompute(plain);
  // Rank 0 holds four forwards' inputs (4 x 20) and one recomputed layer (30).
  ValidateOptions options;
  options.memory.activation_bytes.assign(4, 100.0);
  options.memory.recompute_fraction.assign(4, 0.8);
  options.memory.recompute_peak_fraction.assign(4, 0.3);
  const ValidationReport r = validate(s, options);
  REQUIRE(r.ok());
  CHECK(r.memory[0].peak_bytes == Approx(4 * 20.0 + 30.0));
  CHECK(r.memory[3].peak_bytes == Approx(20.0 + 30.0));
  // The memory model of the costs says the same, and the three counts agree: validate's, the
  // planner's (peak_memory, the same walk) and the simulator's in time.
  const MemoryModel m = memory_model_for(c, 4);
  CHECK(m.recompute_fraction == std::vector<double>(4, 0.8));
  CHECK(m.recompute_peak_fraction == std::vector<double>(4, 0.3));
  const SimResult sim = simulate(s, c);
  CHECK(peak_memory(s, c).bytes[0] == Approx(r.memory[0].peak_bytes));
  CHECK(sim.memory[0].peak_bytes == Approx(r.memory[0].peak_bytes));
  CHECK(sim.timed_peak[0].bytes == Approx(r.memory[0].peak_bytes));
  // Whole-stage recomputation of the same stage holds all 100 while its backward runs.
  CostModel full = uniform_costs(1, 1, 1);
  full.stages[0].activation_bytes = 100.0;
  CHECK(simulate(s, full).timed_peak[0].bytes == Approx(100.0));
  // Every micro-batch's memory comes back to zero at the end of the step.
  for (const auto& samples : sim.memory_over_time) CHECK(samples.back().bytes == Approx(0.0).margin(1e-9));

  SECTION("with a split backward, BI keeps the weight gradient's share for BW") {
    const Schedule zb = with_recompute(make_schedule("zb-h1", {4, 8, 1}));
    const SimResult z = simulate(zb, c);
    const ValidationReport zr = validate(zb, options);
    REQUIRE(zr.ok());
    for (std::size_t k = 0; k < 4; ++k) {
      CHECK(peak_memory(zb, c).bytes[k] == Approx(zr.memory[k].peak_bytes));
      CHECK(z.memory[k].peak_bytes == Approx(zr.memory[k].peak_bytes));
    }
    // R counts the recomputed layer and w = 0.5 of the activation up front: 30 + 50 on top of
    // the inputs kept.
    CHECK(zr.memory[3].peak_bytes >= 20.0 + 30.0 + 50.0 - 1e-9);
    for (const auto& samples : z.memory_over_time) CHECK(samples.back().bytes == Approx(0.0).margin(1e-9));
  }
  SECTION("a peak above the activation is refused, naming the field") {
    c.stages[0].recompute_peak_bytes = 101.0;
    CHECK_THROWS_WITH(simulate(s, c), Catch::Contains("recompute_peak_bytes 101 exceeds activation_bytes 100"));
  }
}

TEST_CASE("the layer-wise policy is priced from the model's layers and placed right before its backward",
          "[memory][layerwise][policy]") {
  // Four layers of 100 activation bytes each, passing 10 bytes on: two stages of two layers.
  std::vector<Layer> layers(4);
  for (std::size_t i = 0; i < layers.size(); ++i) {
    layers[i].name = "layer " + std::to_string(i);
    layers[i].forward = 1.0;
    layers[i].backward_input = 1.0;
    layers[i].backward_weight = 1.0;
    layers[i].activation_bytes = 100.0;
    layers[i].output_bytes = 10.0;
    layers[i].param_bytes = 1.0;
  }
  layers[1].activation_bytes = 150.0;
  Profile profile;
  profile.graph = LayerGraph(layers);
  profile.time_unit = "ms";
  const PlanModel model = graph_model(profile, "four layers", {.ranks = 2, .microbatches = 4});
  REQUIRE(model.layer_memory.size() == 4);
  CHECK(model.layer_memory[0].input_bytes == 0.0);
  CHECK(model.layer_memory[1].input_bytes == 10.0);
  const Partition partition = model.partition(std::vector<std::int32_t>{0, 1});
  REQUIRE(partition.stages.size() == 2);
  REQUIRE(partition.stages[0].end == 2);
  const std::optional<MemoryPolicy> p = layerwise_recompute_policy(model, partition.stages[0]);
  REQUIRE(p);
  // Stage 0 keeps layer 1's input (10 of its 250 bytes) and holds layer 1's 150 at most.
  CHECK(*p == MemoryPolicy::layerwise(240.0, 150.0, partition.stages[0].forward));
  CHECK(to_string(*p) == "layer-wise recompute");
  CHECK(p->recomputes());
  const auto ladders = stage_ladders(model, partition);
  REQUIRE(ladders.size() == 2);
  // Layer-wise recomputation, then the same with its checkpoints offloaded: the last rungs.
  REQUIRE(ladders[1].size() == MemoryChoiceOptions{}.ladder.size() + 2);
  CHECK(ladders[1][ladders[1].size() - 2].kind == MemoryPolicyKind::layerwise_recompute);
  CHECK(ladders[1].back().kind == MemoryPolicyKind::layerwise_offload);
  CHECK(ladders[1].back() == ladders[1][ladders[1].size() - 2].with_offloaded_checkpoints());
  CHECK(ladders[0].back() == MemoryPolicy::layerwise_offload(240.0, 150.0, partition.stages[0].forward));

  // Placed: R right before each backward even where an earlier idle gap would hold it.
  const Schedule zb = make_schedule("zb-h1", {2, 4, 1});
  CostModel costs = cost_model_of(partition, {.unit = "ms"});
  const MemoryPlan plan = apply_memory_policies(zb, costs, {*p, MemoryPolicy::none()});
  REQUIRE(count_op(plan.schedule, Op::R) == 4);
  for (const auto& prog : plan.schedule.programs) {
    for (std::size_t k = 0; k < prog.size(); ++k) {
      if (prog[k].op != Op::R) continue;
      REQUIRE(k + 1 < prog.size());
      CHECK(prog[k + 1].op == Op::BI);
      CHECK(prog[k + 1].microbatch == prog[k].microbatch);
    }
  }
  const StageCost& sc = plan.costs.stages[0];
  CHECK(recompute_saved_bytes(sc) == 240.0);
  CHECK(recompute_peak_bytes(sc) == 150.0);
  CHECK(recompute_time(sc) == partition.stages[0].forward);
  CHECK(validate(plan.schedule).ok());

  SECTION("a layer-wise policy without its sizes, or sizes on another kind, is refused") {
    MemoryPolicy bad = *p;
    bad.peak_bytes.reset();
    CHECK_THROWS_WITH(apply_memory_policies(zb, costs, {bad, MemoryPolicy::none()}), Catch::Contains("lacks saved_bytes, peak_bytes"));
    MemoryPolicy other = MemoryPolicy::full_recompute();
    other.peak_bytes = 10.0;
    CHECK_THROWS_WITH(apply_memory_policies(zb, costs, {other, MemoryPolicy::none()}),
                      Catch::Contains("peak_bytes is set on a full recompute policy"));
    CHECK_THROWS_WITH(apply_memory_policies(zb, costs, {MemoryPolicy::layerwise(240.0, 300.0, 1.0), MemoryPolicy::none()}),
                      Catch::Contains("peak_bytes 300 is not within the stage's activation_bytes 250"));
  }
  SECTION("the planner climbs to it where whole-stage policies cannot fit the cap") {
    // 1F1B on 2 ranks, 4 micro-batches: rank 0 holds 2 x 250 plainly; whole-stage
    // recomputation still holds 250 at its backward; layer-wise 10 + 150 (plus one in flight).
    const Schedule f = make_schedule("1f1b", {2, 4, 1});
    MemoryChoiceOptions o;
    o.ladder = {MemoryPolicy::full_recompute()};
    const MemoryChoice whole = choose_memory_policies(f, costs, {}, 200.0, o);
    CHECK_FALSE(whole.fits);
    o.stage_ladders = stage_ladders(model, partition, o.ladder);
    const MemoryChoice lw = choose_memory_policies(f, costs, {}, 200.0, o);
    REQUIRE(lw.fits);
    CHECK(lw.plan.policies[0].kind == MemoryPolicyKind::layerwise_recompute);
    CHECK(lw.peak_bytes[0] == Approx(2 * 10.0 + 150.0));
  }
}

TEST_CASE("layer-wise recomputation with offloaded checkpoints holds one layer and the reloaded inputs",
          "[memory][layerwise][offload]") {
  // The stage of the layer-wise test above: 100 bytes, layers' inputs 20, largest layer 30.
  // OFFLOAD moves the 20 bytes of checkpoints F keeps (not the whole activation); RELOAD brings
  // them back before R, which then holds one layer beside them.
  CostModel c = uniform_costs(1, 1, 1);
  c.host_link = Interconnect{0.0, 100.0};
  c.stages[0].activation_bytes = 100.0;
  const std::vector<MemoryPolicy> policies(4, MemoryPolicy::layerwise_offload(80.0, 30.0, 1.0));
  const CostModel priced = detail::costs_with_policies(c, policies, 4, 8);
  for (const StageCost& sc : priced.stages) CHECK(offload_bytes(sc) == 20.0);
  Schedule s = with_offload(one_f_one_b(4, 8));
  for (std::int32_t st = 0; st < 4; ++st)
    for (std::int32_t mb = 0; mb < 8; ++mb) insert_before(s, Op::R, Op::B, st, mb);
  const ValidationReport r = validate(s, ValidateOptions{memory_model_for(priced, 4)});
  INFO(listing(r));
  REQUIRE(r.ok());
  // Without the offload, rank 0 holds four forwards' checkpoints (4 x 20) and one layer (30).
  for (std::size_t k = 0; k < 4; ++k) CHECK(r.memory[k].peak_bytes == Approx(20.0 + 30.0));
  const SimResult sim = simulate(s, priced);
  for (std::size_t k = 0; k < 4; ++k) {
    CHECK(peak_memory(s, priced).bytes[k] == Approx(r.memory[k].peak_bytes));
    CHECK(sim.memory[k].peak_bytes == Approx(r.memory[k].peak_bytes));
    // In time the copies overlap compute: at most one more micro-batch's checkpoints.
    CHECK(sim.timed_peak[k].bytes <= 20.0 + 20.0 + 30.0 + 1e-9);
    CHECK(sim.memory_over_time[k].back().bytes == Approx(0.0).margin(1e-9));
  }
  // Each copy moves the checkpoints: 20 bytes at 100 per unit.
  for (const Span& sp : sim.timeline.spans) {
    if (is_copy(sp.action.op)) CHECK(sp.end - sp.start == Approx(0.2));
  }
  // The simulator waits for the RELOAD before R.
  std::map<std::pair<std::int32_t, std::int32_t>, double> reloaded;
  for (const Span& sp : sim.timeline.spans)
    if (sp.action.op == Op::RELOAD) reloaded[{sp.action.stage, sp.action.microbatch}] = sp.end;
  for (const Span& sp : sim.timeline.spans)
    if (sp.action.op == Op::R) CHECK(sp.start >= reloaded.at({sp.action.stage, sp.action.microbatch}) - 1e-12);

  SECTION("the policy places F, OFFLOAD, RELOAD, R, backward; lowered, CSV and drawings keep them") {
    CostModel slow = c;  // copies that hide behind compute: forwards and backwards of 10
    for (StageCost& sc : slow.stages) {
      sc.forward = 10.0;
      sc.backward_input = 10.0;
      sc.backward_weight = 10.0;
    }
    const MemoryPlan plan = apply_memory_policies(one_f_one_b(4, 8), slow, policies);
    CHECK(count_op(plan.schedule, Op::OFFLOAD) > 0);
    CHECK(count_op(plan.schedule, Op::R) == 32);
    for (const auto& prog : plan.schedule.programs) {
      std::map<std::pair<std::int32_t, std::int32_t>, std::vector<Op>> order;
      for (const Action& a : prog) order[{a.stage, a.microbatch}].push_back(a.op);
      for (const auto& [key, ops] : order) {
        INFO("stage " << key.first << " micro-batch " << key.second);
        if (ops.size() == 5) {
          CHECK(ops == std::vector<Op>{Op::F, Op::OFFLOAD, Op::RELOAD, Op::R, Op::B});
        } else {
          CHECK(ops == std::vector<Op>{Op::F, Op::R, Op::B});  // copies that could not hide: kept
        }
      }
    }
    const LoweredSchedule lowered = lower(plan.schedule);
    CHECK(validate(lowered.schedule()).ok());
    CHECK(from_pytorch_csv(to_pytorch_csv(lowered.schedule())).programs == lowered.schedule().programs);
    const SimResult run = simulate(plan.schedule, plan.costs);
    CHECK(to_ascii(run.timeline).find("copy |") != std::string::npos);
    CHECK(to_string(policies[0]) == "layer-wise recompute + offloaded checkpoints");
    // Less memory than layer-wise alone, in program order and in time.
    const MemoryPlan kept = apply_memory_policies(one_f_one_b(4, 8), slow, {MemoryPolicy::layerwise(80.0, 30.0, 1.0)});
    const SimResult kept_run = simulate(kept.schedule, kept.costs);
    CHECK(run.memory[0].peak_bytes < kept_run.memory[0].peak_bytes);
    CHECK(run.timed_peak[0].bytes < kept_run.timed_peak[0].bytes);
  }
  SECTION("on a micro-batch with R, OFFLOAD moves at most what F kept") {
    // Full recomputation keeps nothing of the activation: its OFFLOAD moves nothing.
    Schedule full = with_offload(one_f_one_b(2, 4));
    for (std::int32_t st = 0; st < 2; ++st)
      for (std::int32_t mb = 0; mb < 4; ++mb) insert_before(full, Op::R, Op::B, st, mb);
    REQUIRE(validate(full).ok());
    CostModel fc = uniform_costs(1, 1, 1);
    fc.host_link = Interconnect{0.0, 100.0};
    fc.stages[0].activation_bytes = 100.0;
    const SimResult fr = simulate(full, fc);
    for (std::size_t k = 0; k < 2; ++k) {
      CHECK(fr.memory[k].peak_bytes == Approx(100.0));
      for (const MemorySample& m : fr.memory_over_time[k]) CHECK(m.bytes >= -1e-9);
    }
    // The copies are priced from what they move, as the walk counts it: nothing here, so each
    // takes the link's latency alone (not the whole activation's 1.0 besides).
    fc.host_link = Interconnect{0.5, 100.0};
    CHECK(compute_time(fc, act(Op::OFFLOAD, 0, 0), 4) == Approx(1.5));  // a micro-batch without R
    CHECK(compute_time(fc, act(Op::OFFLOAD, 0, 0), 4, true) == Approx(0.5));
    const auto copy_times = [](const SimResult& run) {
      std::vector<double> t;
      for (const Span& sp : run.timeline.spans)
        if (is_copy(sp.action.op)) t.push_back(sp.end - sp.start);
      return t;
    };
    const SimResult latency_only = simulate(full, fc);
    REQUIRE(copy_times(latency_only).size() == 16);
    for (const double t : copy_times(latency_only)) CHECK(t == Approx(0.5));
    // R restoring 60 of the 100 bytes: F keeps 40, and that is what each copy moves.
    fc.stages[0].recompute_saved_bytes = 60.0;
    const SimResult selective = simulate(full, fc);
    for (const double t : copy_times(selective)) CHECK(t == Approx(0.9));
    // The search's dependency-only bound prices them alike, so it stays a lower bound.
    CHECK(run_dependencies(full, fc).makespan <= selective.makespan * (1.0 + 1e-12));
  }
}

TEST_CASE("peak_memory is validate's walk: the families' peaks are what validate counts", "[memory][search]") {
  // peak_memory (the search's count) and validate() share one walk; outside overlapped pairs,
  // which the search counts in written order, they give the same M_B and bytes.
  const CostModel c = gpt_like_costs(4);
  for (const char* name : {"gpipe", "1f1b", "zb-h1", "zb-h2"}) {
    INFO(name);
    const Schedule s = make_schedule(name, {4, 8, 1});
    const PeakMemory peak = peak_memory(s, c);
    ValidateOptions o;
    o.memory.weight_fraction = c.weight_memory_fraction;
    const ValidationReport r = validate(s, o);
    const SimResult sim = simulate(s, c);
    for (std::size_t k = 0; k < 4; ++k) {
      CHECK(peak.microbatches[k] == r.memory[k].peak_microbatches);
      CHECK(peak.bytes[k] == sim.memory[k].peak_bytes);
    }
  }
  // The figures the search's tests state: p on 1F1B's first rank, 2p - 1 on ZB-H2's.
  CHECK(peak_memory(make_schedule("1f1b", {4, 8, 1}), c).microbatches[0] == 4.0);
  CHECK(peak_memory(make_schedule("zb-h2", {4, 8, 1}), c).microbatches[0] == 7.0);
}

TEST_CASE("a profile's per-layer recompute parts load, write back, and join the stage's ladder", "[memory][profile]") {
  const std::string text = R"({"unit": "ms", "layers": [
      {"name": "a", "forward": 1, "activation_bytes": 100, "output_bytes": 10, "recompute_saves_bytes": 60, "recompute_time": 0.25},
      {"name": "b", "forward": 1, "activation_bytes": 100, "output_bytes": 10},
      {"name": "c", "forward": 1, "activation_bytes": 100, "output_bytes": 10, "recompute_saves_bytes": 30, "recompute_time": 0.5},
      {"name": "d", "forward": 1, "activation_bytes": 100}]})";
  const Profile p = parse_profile(text);
  REQUIRE(p.graph.layer(0).recompute_saves_bytes == 60.0);
  REQUIRE(p.graph.layer(0).recompute_time == 0.25);
  CHECK_FALSE(p.graph.layer(1).recompute_saves_bytes);
  CHECK(parse_profile(profile_to_json(p)).graph == p.graph);  // written back as read
  CHECK_THROWS_WITH(parse_profile(R"({"layers": [{"name": "a", "forward": 1, "recompute_time": 1}]})"),
                    Catch::Contains("\"recompute_time\" without \"recompute_saves_bytes\""));
  CHECK_THROWS_WITH(parse_profile(R"({"layers": [{"name": "a", "forward": 1, "activation_bytes": 5,
                                      "recompute_saves_bytes": 6, "recompute_time": 1}]})"),
                    Catch::Contains("recompute_saves_bytes 6 exceeds activation_bytes 5"));
  // Two stages of two layers: each stage's parts summed, before full recomputation.
  const PlanModel model = graph_model(p, "parts", {.ranks = 2, .microbatches = 4});
  const Partition partition = model.partition(std::vector<std::int32_t>{0, 1});
  REQUIRE(partition.stages[0].end == 2);
  const auto ladders = stage_ladders(model, partition);
  const std::vector<MemoryPolicy>& l0 = ladders[0];
  const auto full = std::find(l0.begin(), l0.end(), MemoryPolicy::full_recompute());
  REQUIRE(full != l0.begin());
  CHECK(*(full - 1) == MemoryPolicy::selective_part(60.0, 0.25));
  CHECK(std::find(ladders[1].begin(), ladders[1].end(), MemoryPolicy::selective_part(30.0, 0.5)) != ladders[1].end());
}

TEST_CASE("the planner cuts the model again under the cap when no policy fits the family's cut", "[memory][policy][plan]") {
  // Eight layers, the first heavy in parameters: the time-balanced cut puts it with another
  // layer on rank 0, whose static bytes alone leave too little for any policy under the cap.
  std::vector<Layer> layers(8);
  for (std::size_t i = 0; i < layers.size(); ++i) {
    layers[i].name = "layer " + std::to_string(i);
    layers[i].forward = 1.0;
    layers[i].backward_input = 1.0;
    layers[i].backward_weight = 1.0;
    layers[i].activation_bytes = 100.0;
    layers[i].output_bytes = 10.0;
    layers[i].param_bytes = i == 0 ? 500.0 : 100.0;
  }
  Profile profile;
  profile.graph = LayerGraph(layers);
  profile.time_unit = "ms";
  const PlanModel model = graph_model(profile, "heavy first layer", {.ranks = 4, .microbatches = 8, .optimizer_state_factor = 1.0});
  PlanRequest request;
  request.ranks = 4;
  request.microbatches = 8;
  request.families = {"1f1b"};
  request.cap.total_bytes = 650.0;
  request.memory_policy.mode = MemoryPolicyMode::automatic;
  const PlanResult plan = compare_families(model, request);
  INFO(to_string(plan));
  REQUIRE(plan.recommended.index);
  const ScheduleResult& r = plan.schedules.front();
  REQUIRE(r.memory);
  REQUIRE(r.memory->partition);
  // The family's cut had layers 0-1 on rank 0; the new one leaves layer 0 alone there.
  CHECK(plan.partition.stages[0].end == 2);
  CHECK(r.memory->partition->stages[0].end == 1);
  CHECK(r.fits);
  for (const double b : r.peak_memory_bytes) CHECK(b <= 650.0 * (1.0 + 1e-9));
  CHECK(r.static_bytes[0] == 500.0);
  CHECK(r.memory->plain_fit_problem.find("> cap") != std::string::npos);
  CHECK(validate(r.schedule).ok());
  // Without the new cut nothing fits: a cap below what one micro-batch needs on any cut.
  request.cap.total_bytes = 550.0;
  const PlanResult none = compare_families(model, request);
  CHECK_FALSE(none.recommended.index);
  CHECK(none.schedules.front().fit_problem.find("with memory policies still") != std::string::npos);
}
