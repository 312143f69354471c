// Memory actions (issue 23): recompute R, OFFLOAD and RELOAD in the IR, the static checks, the
// abstract execution (the copy lane), lowering, the memory walk, the simulator, the traces and
// schedule CSV. Each misplaced memory action is rejected with its own kind and a message that
// names the action, the place and the fix.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "ppsched/backend/cpu.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/error.hpp"
#include "ppsched/lower/lower.hpp"
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
  SECTION("both recompute and offload of one micro-batch") {
    Schedule s = base;
    insert_before(s, Op::R, Op::B, 0, 2);
    const Problem p = only_problem(validate(s), ProblemKind::memory_unmatched);
    CHECK(p.action == act(Op::R, 0, 2));
    CHECK(p.message.find("either recomputed or offloaded, not both") != std::string::npos);
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

