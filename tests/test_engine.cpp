// engine/: the flat index of a schedule and its links, the static checks and the kinds of
// problem they report, the abstract execution (times as the max-plus closure of the
// dependencies, deadlocks found and named under rendezvous, one stream per rank never
// earlier than a separate comm stream), and the Workspace that lends the passes their arrays.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "ppsched/engine/abstract_execution.hpp"
#include "ppsched/engine/detail/flat_schedule.hpp"
#include "ppsched/engine/problems.hpp"
#include "ppsched/engine/detail/static_checks.hpp"
#include "ppsched/engine/workspace.hpp"
#include "ppsched/lower/lower.hpp"
#include "ppsched/schedule/generators.hpp"
#include "ppsched/sim/simulate.hpp"
#include "ppsched/validate/validate.hpp"

using namespace ppsched;
using detail::concat;

namespace {

Action act(Op op, std::int32_t stage, std::int32_t mb, std::uint32_t group = 0) { return Action{op, stage, mb, group}; }

// Fill-drain by hand on two ranks, two micro-batches.
Schedule two_by_two() {
  Schedule s;
  s.name = "hand";
  s.ranks = 2;
  s.microbatches = 2;
  s.placement = {0, 1};
  s.programs = {{act(Op::F, 0, 0), act(Op::F, 0, 1), act(Op::B, 0, 0), act(Op::B, 0, 1)},
                {act(Op::F, 1, 0), act(Op::F, 1, 1), act(Op::B, 1, 0), act(Op::B, 1, 1)}};
  return s;
}

struct Checked {
  Schedule schedule;  // the index points into its programs
  detail::FlatSchedule flat;
  std::vector<Problem> problems;
  std::size_t unlisted = 0;
  bool shape_ok = false;
};

// The static checks of a copy of `s` into a fresh index. (Returned by pointer: the index
// points into the copy's programs.)
std::unique_ptr<Checked> check(const Schedule& s) {
  auto c = std::make_unique<Checked>();
  c->schedule = s;
  detail::ProblemSink sink(c->problems, c->unlisted, 100);
  c->shape_ok = detail::static_checks(c->schedule, c->flat, sink);
  return c;
}

bool has_kind(const std::vector<Problem>& problems, ProblemKind k) {
  for (const Problem& p : problems) {
    if (p.kind == k) return true;
  }
  return false;
}

// Everything a simulation returns, as one comparable text (times in hexfloat).
std::string describe(const SimResult& r) {
  std::string out = concat(std::hexfloat, r.makespan, ' ', r.bubble_fraction, ' ', r.ideal_time, ' ', r.bubble_vs_ideal,
                           ' ', r.lowered_internally, ' ', r.timeline.spans.size(), '\n');
  for (const SimRankStats& st : r.ranks) {
    out += concat(std::hexfloat, st.first_start, ' ', st.last_end, ' ', st.span, ' ', st.busy, ' ', st.input_wait, ' ',
                  st.idle, ' ', st.idle_in_span, '\n');
  }
  for (const RankMemory& m : r.memory) {
    out += concat(std::hexfloat, m.peak_activations, ' ', m.peak_bytes, ' ', m.peak_in_flight, ' ', m.peak_microbatches, '\n');
  }
  for (const std::int32_t k : r.stage_peak_in_flight) out += concat(k, ' ');
  return out;
}

// One family's lower, validate and simulate results, as text.
struct Outcome {
  Schedule lowered;
  std::string report;
  std::string sim;
  Timeline timeline;
  friend bool operator==(const Outcome&, const Outcome&) = default;
};

CostModel costs_for(const Schedule& s) {
  CostModel c;
  for (std::int32_t st = 0; st < s.stages(); ++st) {
    c.stages.push_back(StageCost{1.0 + 0.25 * (st % 3), 1.5, 0.75, 4.0 + st, 2.0});
  }
  c.link.latency = 0.125;
  c.link.bandwidth = 16.0;
  return c;
}

// With `ws`, the calls that take one; without, the plain calls (the scratch pool's).
Outcome run_all(const Schedule& s, Workspace* ws) {
  const CostModel c = costs_for(s);
  const LowerOptions o = lower_options_for(c, s.stages(), s.microbatches);
  const LoweredSchedule l = ws != nullptr ? lower(s, o, *ws) : lower(s, o);
  const Schedule& plain = l;
  const std::string report = to_string(ws != nullptr ? validate(l, {}, *ws) : validate(l)) +
                             to_string(ws != nullptr ? validate(plain, {}, *ws) : validate(plain));
  const SimResult lowered_run = ws != nullptr ? simulate(l, c, {}, *ws) : simulate(l, c);
  const SimResult compute_only_run = ws != nullptr ? simulate(s, c, {}, *ws) : simulate(s, c);
  return Outcome{l.schedule(), report, describe(lowered_run) + describe(compute_only_run), lowered_run.timeline};
}

std::string kinds(const std::vector<Problem>& problems) {
  std::string out;
  for (const Problem& p : problems) out += std::string(problem_kind_name(p.kind)) + ": " + p.message + '\n';
  return out;
}

}  // namespace

TEST_CASE("every problem kind has a name of its own", "[engine]") {
  std::set<std::string_view> names;
  for (auto k = static_cast<int>(ProblemKind::shape); k <= static_cast<int>(ProblemKind::memory_grouped); ++k) {
    const std::string_view name = problem_kind_name(static_cast<ProblemKind>(k));
    CHECK(name != "?");
    CHECK_FALSE(name.empty());
    names.insert(name);
  }
  CHECK(names.size() == static_cast<std::size_t>(ProblemKind::memory_grouped) + 1);
  CHECK(stream_mode_name(StreamMode::separate_comm_stream) != stream_mode_name(StreamMode::comm_on_compute_stream));
}

TEST_CASE("the flat index finds every action at its place, with its links", "[engine]") {
  for (const bool lowered : {false, true}) {
    const Schedule compute_only = make_schedule("1f1b", {3, 4, 1});
    const Schedule s = lowered ? lower(compute_only).schedule() : compute_only;
    const auto c = check(s);
    INFO(s);
    REQUIRE(c->shape_ok);
    REQUIRE(c->problems.empty());
    const detail::FlatSchedule& flat = c->flat;
    CHECK(flat.ranks == 3);
    CHECK(flat.stages == 3);
    CHECK(flat.microbatches == 4);
    CHECK(flat.lowered == lowered);
    CHECK(flat.has_backward);
    CHECK_FALSE(flat.has_pairs);
    CHECK(flat.compute_count == 3u * 4u * 2u);
    std::size_t total = 0;
    for (std::int32_t r = 0; r < s.ranks; ++r) {
      const auto& prog = s.programs[static_cast<std::size_t>(r)];
      for (std::size_t k = 0; k < prog.size(); ++k) {
        const Action& a = prog[k];
        const std::int32_t i = flat.find(a.op, a.stage, a.microbatch);
        REQUIRE(i != detail::no_action);
        CHECK(flat.at(i) == a);
        CHECK(flat.owner[static_cast<std::size_t>(i)] == r);
        CHECK(flat.position(i) == static_cast<std::int32_t>(k));
      }
      total += prog.size();
    }
    CHECK(flat.size() == total);
    // Absent actions are absent: no BI in a schedule without a split backward.
    CHECK(flat.find(Op::BI, 1, 1) == detail::no_action);
    for (std::int32_t mb = 0; mb < 4; ++mb) {
      const detail::Links f1 = flat.links(flat.find(Op::F, 1, mb));
      CHECK(f1.input == (lowered ? flat.find(Op::RECV_F, 1, mb) : flat.find(Op::F, 0, mb)));
      CHECK(f1.same_stage == detail::no_action);
      const detail::Links b1 = flat.links(flat.find(Op::B, 1, mb));
      CHECK(b1.same_stage == flat.find(Op::F, 1, mb));
      CHECK(b1.input == (lowered ? flat.find(Op::RECV_B, 1, mb) : flat.find(Op::B, 2, mb)));
      CHECK(flat.links(flat.find(Op::B, 2, mb)).input == detail::no_action);  // the last stage starts the backward
      CHECK(flat.backward_input(1, mb) == flat.find(Op::B, 1, mb));
      if (lowered) {
        const detail::Links send = flat.links(flat.find(Op::SEND_F, 0, mb));
        CHECK(send.same_stage == flat.find(Op::F, 0, mb));
        CHECK(send.peer == flat.find(Op::RECV_F, 1, mb));
        CHECK(flat.links(flat.find(Op::RECV_F, 1, mb)).peer == flat.find(Op::SEND_F, 0, mb));
        const detail::Links grad = flat.links(flat.find(Op::SEND_B, 2, mb));
        CHECK(grad.same_stage == flat.find(Op::B, 2, mb));
        CHECK(grad.peer == flat.find(Op::RECV_B, 1, mb));
      }
    }
  }
}

TEST_CASE("the static checks report each mistake under its own kind, with its place", "[engine]") {
  const auto clean = check(two_by_two());
  REQUIRE(clean->shape_ok);
  CHECK(clean->problems.empty());

  struct Case {
    const char* what;
    ProblemKind kind;
    void (*spoil)(Schedule&);
  };
  const std::vector<Case> cases = {
      {"an action twice", ProblemKind::duplicate, [](Schedule& s) { s.programs[0].push_back(act(Op::F, 0, 1)); }},
      {"a backward left out", ProblemKind::missing_compute, [](Schedule& s) { s.programs[1].pop_back(); }},
      {"a stage on the other rank", ProblemKind::wrong_rank,
       [](Schedule& s) {
         s.programs[1].erase(s.programs[1].begin());
         s.programs[0].insert(s.programs[0].begin() + 1, act(Op::F, 1, 0));
       }},
      {"B before its F", ProblemKind::backward_before_forward,
       [](Schedule& s) { std::swap(s.programs[0][0], s.programs[0][2]); }},
      {"a stage past the placement", ProblemKind::stage_out_of_range,
       [](Schedule& s) { s.programs[1].push_back(act(Op::F, 2, 0)); }},
      {"a micro-batch past the count", ProblemKind::microbatch_out_of_range,
       [](Schedule& s) { s.programs[1].push_back(act(Op::F, 1, 2)); }},
      {"BI without the split flag", ProblemKind::split_flag,
       [](Schedule& s) {
         s.programs[0][3] = act(Op::BI, 0, 1);
         s.programs[0].push_back(act(Op::BW, 0, 1));
       }},
      {"a send with no stage after it", ProblemKind::no_peer,
       [](Schedule& s) { s.programs[1].insert(s.programs[1].begin() + 1, act(Op::SEND_F, 1, 0)); }},
      {"an overlapped pair of one micro-batch", ProblemKind::pair_dependent,
       [](Schedule& s) {
         // rank 1: F0 F1 B0 B1 -> F0 {F1, B1} B0: a pair whose B needs its own F.
         s.programs[1] = {act(Op::F, 1, 0), act(Op::F, 1, 1, 7), act(Op::B, 1, 1, 7), act(Op::B, 1, 0)};
       }},
  };
  for (const Case& k : cases) {
    Schedule s = two_by_two();
    k.spoil(s);
    const auto c = check(s);
    INFO(k.what << '\n' << s << kinds(c->problems));
    CHECK(c->shape_ok);
    CHECK(has_kind(c->problems, k.kind));
    for (const Problem& p : c->problems) {
      CHECK_FALSE(p.message.empty());
      if (p.position >= 0) {
        REQUIRE(p.rank >= 0);
        REQUIRE(p.rank < s.ranks);
        CHECK(s.programs[static_cast<std::size_t>(p.rank)][static_cast<std::size_t>(p.position)] == p.action);
      }
    }
    // validate() reports the same kinds from the same checks.
    const ValidationReport report = validate(s);
    CHECK_FALSE(report.ok());
    CHECK(has_kind(report.problems, k.kind));
  }

  // A shape that cannot be indexed stops the checks there.
  Schedule no_ranks = two_by_two();
  no_ranks.ranks = 0;
  const auto c = check(no_ranks);
  CHECK_FALSE(c->shape_ok);
  REQUIRE(has_kind(c->problems, ProblemKind::shape));
  CHECK(c->problems.front().message.find("Schedule::ranks") != std::string::npos);
}

TEST_CASE("the problem sink lists up to its cap and counts the rest", "[engine]") {
  Schedule s = two_by_two();
  for (int k = 0; k < 5; ++k) s.programs[0].push_back(act(Op::F, 0, 0));
  std::vector<Problem> problems;
  std::size_t unlisted = 0;
  detail::FlatSchedule flat;
  detail::ProblemSink sink(problems, unlisted, 2);
  (void)detail::static_checks(s, flat, sink);
  CHECK(sink.any());
  CHECK(problems.size() == 2);
  CHECK(unlisted >= 3);
}

TEST_CASE("a run's times are the max-plus closure of the dependencies", "[engine]") {
  const auto c = check(two_by_two());
  REQUIRE(c->problems.empty());
  const detail::FlatSchedule& flat = c->flat;
  // F takes 1, B takes 2; no communication: stage 1 waits for stage 0 directly.
  detail::AbstractExecution run(flat, StreamMode::separate_comm_stream,
                                [](const Action& a) { return a.op == Op::F ? 1.0 : 2.0; });
  REQUIRE(run.run());
  const auto span = [&](Op op, std::int32_t st, std::int32_t mb) {
    const auto i = static_cast<std::size_t>(flat.find(op, st, mb));
    return std::pair{run.start(i), run.end(i)};
  };
  using P = std::pair<double, double>;
  CHECK(span(Op::F, 0, 0) == P{0.0, 1.0});
  CHECK(span(Op::F, 0, 1) == P{1.0, 2.0});
  CHECK(span(Op::F, 1, 0) == P{1.0, 2.0});  // waits for F0 on stage 0
  CHECK(span(Op::F, 1, 1) == P{2.0, 3.0});
  CHECK(span(Op::B, 1, 0) == P{3.0, 5.0});
  CHECK(span(Op::B, 1, 1) == P{5.0, 7.0});
  CHECK(span(Op::B, 0, 0) == P{5.0, 7.0});  // waits for B0 on stage 1, not for its own rank
  CHECK(span(Op::B, 0, 1) == P{7.0, 9.0});
  CHECK(run.earliest_start() == 0.0);
  CHECK(run.latest_end() == 9.0);

  // With unit times (what validation runs) it completes too: F0 F1 on stage 0, F1 B0 B1 on
  // stage 1, then stage 0's last B.
  detail::AbstractExecution unit(flat, StreamMode::comm_on_compute_stream);
  REQUIRE(unit.run());
  CHECK(unit.latest_end() == 6.0);
}

TEST_CASE("a deadlock under rendezvous is found and each stuck action named", "[engine]") {
  // Rank 0 posts its gradient receive before the send its peer needs first.
  Schedule s;
  s.name = "stuck";
  s.ranks = 2;
  s.microbatches = 1;
  s.placement = {0, 1};
  s.programs = {{act(Op::F, 0, 0), act(Op::RECV_B, 0, 0), act(Op::SEND_F, 0, 0), act(Op::B, 0, 0)},
                {act(Op::RECV_F, 1, 0), act(Op::F, 1, 0), act(Op::B, 1, 0), act(Op::SEND_B, 1, 0)}};
  const auto c = check(s);
  INFO(kinds(c->problems));
  REQUIRE(c->problems.empty());  // statically fine: only running it shows the cycle
  for (const StreamMode mode : {StreamMode::separate_comm_stream, StreamMode::comm_on_compute_stream}) {
    detail::AbstractExecution run(c->flat, mode);
    INFO(stream_mode_name(mode));
    REQUIRE_FALSE(run.run());
    const std::string stuck = run.describe_stuck();
    INFO(stuck);
    CHECK(stuck.find("no action can start while") != std::string::npos);
    CHECK(stuck.find("rank 0: RECV_B0@s0 (posted) waits for SEND_B0@s1 on rank 1") != std::string::npos);
    CHECK(stuck.find("rank 1: RECV_F0@s1 (posted) waits for SEND_F0@s0 on rank 0") != std::string::npos);
    // What completed did complete; what is stuck has no end.
    CHECK(run.end(static_cast<std::size_t>(c->flat.find(Op::F, 0, 0))) == 1.0);
    CHECK(run.end(static_cast<std::size_t>(c->flat.find(Op::B, 1, 0))) < 0.0);
  }
  const ValidationReport report = validate(s);
  CHECK(has_kind(report.problems, ProblemKind::deadlock));
  // Swapped into the order lower() writes, it runs.
  std::swap(s.programs[0][1], s.programs[0][2]);
  const auto fixed = check(s);
  REQUIRE(fixed->problems.empty());
  CHECK(detail::AbstractExecution(fixed->flat, StreamMode::comm_on_compute_stream).run());
}

TEST_CASE("one stream per rank only adds waits: no action ends earlier than with a comm stream", "[engine]") {
  std::mt19937 rng(26);
  std::uniform_int_distribution<int> quarters(0, 12);
  std::size_t families = 0;
  for (const FamilyInfo& info : schedule_families) {
    const ScheduleRequest r{3, 6, info.chunks_for(2)};
    INFO(info.name << ' ' << to_string(r));
    REQUIRE(accepts(info.name, r));
    const LoweredSchedule l = lower(make_schedule(info.name, r));
    const auto c = check(l);
    REQUIRE(c->problems.empty());
    for (int trial = 0; trial < 3; ++trial) {
      // Compute times per kind and stage; a transfer's time is the same on its two sides.
      std::vector<double> op_time(op_count);
      for (double& t : op_time) t = 0.25 * quarters(rng);
      const double forward_transfer = 0.25 * quarters(rng), backward_transfer = 0.25 * quarters(rng);
      const auto duration = [&](const Action& a) {
        if (is_comm(a.op)) return a.op == Op::SEND_F || a.op == Op::RECV_F ? forward_transfer : backward_transfer;
        return op_time[static_cast<std::size_t>(a.op)] + 0.125 * a.stage;
      };
      detail::AbstractExecution separate(c->flat, StreamMode::separate_comm_stream, duration);
      detail::AbstractExecution single(c->flat, StreamMode::comm_on_compute_stream, duration);
      REQUIRE(separate.run());
      REQUIRE(single.run());
      for (std::size_t i = 0; i < c->flat.size(); ++i) {
        if (single.end(i) < separate.end(i)) {
          FAIL_CHECK(to_string(c->flat.at(static_cast<std::int32_t>(i))) << " ends at " << single.end(i)
                                                                          << " on one stream, before "
                                                                          << separate.end(i));
        }
      }
      CHECK(single.latest_end() >= separate.latest_end());
    }
    ++families;
  }
  CHECK(families == schedule_families.size());
}

TEST_CASE("durations given per action, by (stage, op) or by a callable give the same run", "[engine]") {
  // The engine is compiled once whatever prices the actions: a caller fills an array, gives a
  // table by (stage, op), or has a callable asked once per action. Every time must agree, bit
  // for bit, and unit times must be validation's own.
  for (const FamilyInfo& info : schedule_families) {
    const ScheduleRequest r{3, 6, info.chunks_for(2)};
    INFO(info.name << ' ' << to_string(r));
    const Schedule compute_only = make_schedule(info.name, r);
    const LoweredSchedule lowered = lower(compute_only);
    for (const Schedule* s : {&compute_only, &lowered.schedule()}) {
      const auto c = check(*s);
      REQUIRE(c->problems.empty());
      const detail::FlatSchedule& flat = c->flat;
      const std::size_t n = flat.size();
      std::vector<double> table(static_cast<std::size_t>(flat.stages) * op_count);
      for (std::size_t k = 0; k < table.size(); ++k) table[k] = 0.25 + 0.375 * static_cast<double>(k % 7) + 0.0625 * static_cast<double>(k / op_count);
      const auto by_table = [&](const Action& a) { return table[static_cast<std::size_t>(a.stage) * op_count + static_cast<std::size_t>(a.op)]; };
      std::vector<double> per_action(n);
      for (std::size_t i = 0; i < n; ++i) per_action[i] = by_table(flat.at(static_cast<std::int32_t>(i)));
      std::vector<double> delay(n, 0.0);
      for (std::size_t i = 0; i < n; ++i) delay[i] = 0.5 * static_cast<double>(i % 3);
      const std::vector<double>* input_delay = flat.lowered ? nullptr : &delay;
      for (const StreamMode mode : {StreamMode::separate_comm_stream, StreamMode::comm_on_compute_stream}) {
        detail::AbstractExecution callable(flat, mode, by_table, input_delay, 0.5);
        detail::AbstractExecution array(flat, mode, std::span<const double>(per_action), input_delay, 0.5);
        detail::AbstractExecution keyed(flat, mode, detail::DurationTable{table.data(), op_count}, input_delay, 0.5);
        REQUIRE(callable.run());
        REQUIRE(array.run());
        REQUIRE(keyed.run());
        const auto unit_of = [](const Action& a) { return is_compute(a.op) || a.op == Op::R ? 1.0 : 0.0; };
        detail::AbstractExecution unit(flat, mode);
        detail::AbstractExecution unit_callable(flat, mode, unit_of);
        REQUIRE(unit.run());
        REQUIRE(unit_callable.run());
        for (std::size_t i = 0; i < n; ++i) {
          INFO(to_string(flat.at(static_cast<std::int32_t>(i))));
          CHECK(array.start(i) == callable.start(i));
          CHECK(array.end(i) == callable.end(i));
          CHECK(keyed.start(i) == callable.start(i));
          CHECK(keyed.end(i) == callable.end(i));
          CHECK(unit.start(i) == unit_callable.start(i));
          CHECK(unit.end(i) == unit_callable.end(i));
        }
        CHECK(keyed.latest_end() == callable.latest_end());
        CHECK(unit.latest_end() == unit_callable.latest_end());
      }
    }
  }
}

TEST_CASE("a Workspace's arrays give the same runs as fresh ones", "[engine]") {
  Workspace ws;
  const Schedule big = make_schedule("zb-v", {4, 16, 2});
  const Schedule small = make_schedule("1f1b", {2, 3, 1});
  // The large call first, so the small one meets arrays longer than it needs.
  for (const Schedule* s : {&big, &small, &big}) {
    const LoweredSchedule with_ws = lower(*s, {}, ws);
    Workspace fresh;
    const LoweredSchedule alone = lower(*s, {}, fresh);
    CHECK(with_ws.schedule() == alone.schedule());
    const Schedule& plain = with_ws;
    CHECK(to_string(validate(plain, {}, ws)) == to_string(validate(plain, {}, fresh)));
  }
  CHECK(ws.capacity_bytes() > 0);
}

TEST_CASE("plain calls borrow the scratch pool: the same results as a fresh Workspace", "[engine][workspace]") {
  release_scratch_pool();
  CHECK(scratch_pool_bytes() == 0);
  // The largest schedule first, so each later call borrows arrays longer than it needs and
  // filled by another schedule.
  std::vector<Schedule> schedules = {make_schedule("zb-v", {6, 24, 2})};
  for (const FamilyInfo& info : schedule_families) schedules.push_back(make_schedule(info.name, {3, 6, info.chunks_for(2)}));
  schedules.push_back(make_schedule("1f1b", {1, 1, 1}));
  std::size_t kept = 0;
  for (const Schedule& s : schedules) {
    INFO(s.name << " p=" << s.ranks << " m=" << s.microbatches);
    Workspace fresh;
    const Outcome expected = run_all(s, &fresh);
    const Outcome pooled = run_all(s, nullptr);
    CHECK(pooled == expected);
    // The pool keeps what the largest call so far needed.
    CHECK(scratch_pool_bytes() >= kept);
    kept = scratch_pool_bytes();
    CHECK(kept > 0);
  }
  release_scratch_pool();
  CHECK(scratch_pool_bytes() == 0);
}

TEST_CASE("the scratch pool keeps at most its limit", "[engine][workspace]") {
  const std::size_t default_limit = scratch_pool_limit();
  CHECK(default_limit == std::size_t{128} << 20);
  const Schedule s = make_schedule("1f1b", {4, 16, 1});
  release_scratch_pool();
  (void)lower(s);
  const std::size_t needed = scratch_pool_bytes();
  REQUIRE(needed > 0);
  // A limit below what is kept frees it at once; a call that needs more than the limit frees
  // its Workspace on return.
  set_scratch_pool_limit(needed - 1);
  CHECK(scratch_pool_bytes() == 0);
  const LoweredSchedule l = lower(s);
  CHECK(scratch_pool_bytes() == 0);
  CHECK(validate(l).ok());  // the proof taken needs far less: kept, within the limit
  CHECK(scratch_pool_bytes() <= scratch_pool_limit());
  // 0 keeps nothing, and the calls still work.
  set_scratch_pool_limit(0);
  CHECK(lower(s) == l);
  CHECK(scratch_pool_bytes() == 0);
  set_scratch_pool_limit(default_limit);
  CHECK(lower(s) == l);
  CHECK(scratch_pool_bytes() == needed);
  release_scratch_pool();
}

TEST_CASE("a call made while the pool is lent out uses its own Workspace", "[engine][workspace]") {
  const Schedule s = make_schedule("zb-h1", {4, 8, 1});
  Workspace fresh;
  const Outcome expected = run_all(s, &fresh);
  release_scratch_pool();
  (void)lower(s);  // something kept
  {
    detail::BorrowedWorkspace outer;  // as a plain call holds it while it runs
    CHECK(scratch_pool_bytes() == 0);
    {
      detail::BorrowedWorkspace inner;
      CHECK(&inner.get() != &outer.get());
      CHECK(inner.get().capacity_bytes() == 0);  // a new one, not the one lent out
    }
    // Plain calls inside the borrow: correct results, with arrays of their own.
    CHECK(run_all(s, nullptr) == expected);
    CHECK(lower(s, {}, outer.get()) == lower(s));
  }
  CHECK(scratch_pool_bytes() > 0);  // the first Workspace given back is kept, the other freed
  release_scratch_pool();
}

TEST_CASE("a call that throws does not give its Workspace back", "[engine][workspace]") {
  // Statically fine, but deadlocks: simulate indexes it, runs it and throws.
  Schedule s;
  s.name = "stuck";
  s.ranks = 2;
  s.microbatches = 1;
  s.placement = {0, 1};
  s.programs = {{act(Op::F, 0, 0), act(Op::RECV_B, 0, 0), act(Op::SEND_F, 0, 0), act(Op::B, 0, 0)},
                {act(Op::RECV_F, 1, 0), act(Op::F, 1, 0), act(Op::B, 1, 0), act(Op::SEND_B, 1, 0)}};
  release_scratch_pool();
  CHECK_THROWS_WITH(simulate(s, uniform_costs(1.0, 1.0, 1.0)), Catch::Contains("deadlock"));
  CHECK(scratch_pool_bytes() == 0);
  // The same schedule, runnable, keeps it.
  std::swap(s.programs[0][1], s.programs[0][2]);
  CHECK(simulate(s, uniform_costs(1.0, 1.0, 1.0)).makespan > 0.0);
  CHECK(scratch_pool_bytes() > 0);
  release_scratch_pool();
}

TEST_CASE("plain calls from several threads at once give each its own results", "[engine][workspace]") {
  std::vector<Schedule> schedules;
  for (const FamilyInfo& info : schedule_families) schedules.push_back(make_schedule(info.name, {4, 8, info.chunks_for(2)}));
  std::vector<Outcome> expected;
  for (const Schedule& s : schedules) {
    Workspace fresh;
    expected.push_back(run_all(s, &fresh));
  }
  constexpr std::size_t threads = 4;
  std::vector<std::vector<std::size_t>> wrong(threads);
  std::vector<std::thread> workers;
  for (std::size_t t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      // Each thread walks the families from its own start, three times round.
      for (std::size_t k = 0; k < 3 * schedules.size(); ++k) {
        const std::size_t i = (t * 5 + k) % schedules.size();
        if (!(run_all(schedules[i], nullptr) == expected[i])) wrong[t].push_back(i);
      }
    });
  }
  for (std::thread& w : workers) w.join();
  for (std::size_t t = 0; t < threads; ++t) {
    INFO("thread " << t);
    CHECK(wrong[t].empty());
  }
  release_scratch_pool();
}
