// Validation: each hand-broken schedule is rejected with its own kind and a message that
// names the action, the place and the fix; valid schedules of every family, lowered or not,
// are proven deadlock-free across a sweep; peak memory matches the families' bounds.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ppsched/engine/workspace.hpp"
#include "ppsched/error.hpp"
#include "ppsched/lower/lower.hpp"
#include "ppsched/schedule/csv.hpp"
#include "ppsched/schedule/generators.hpp"
#include "ppsched/plan/search/memory.hpp"
#include "ppsched/sim/analytic.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/sim/simulate.hpp"
#include "ppsched/validate/validate.hpp"

using namespace ppsched;

namespace {

Action act(Op op, std::int32_t stage, std::int32_t mb, std::uint32_t group = 0) { return Action{op, stage, mb, group}; }

// 1F1B written out in the test, one stage per rank: warm-up forwards, then one forward and
// one backward alternately, then the remaining backwards.
Schedule hand_1f1b(std::int32_t p, std::int32_t m) {
  Schedule s;
  s.name = "hand-1f1b";
  s.ranks = p;
  s.microbatches = m;
  for (std::int32_t r = 0; r < p; ++r) s.placement.push_back(r);
  s.programs.resize(static_cast<std::size_t>(p));
  for (std::int32_t r = 0; r < p; ++r) {
    auto& prog = s.programs[static_cast<std::size_t>(r)];
    const std::int32_t warmup = std::min(p - r - 1, m);
    for (std::int32_t i = 0; i < warmup; ++i) prog.push_back(act(Op::F, r, i));
    for (std::int32_t i = 0; i < m - warmup; ++i) {
      prog.push_back(act(Op::F, r, warmup + i));
      prog.push_back(act(Op::B, r, i));
    }
    for (std::int32_t i = m - warmup; i < m; ++i) prog.push_back(act(Op::B, r, i));
  }
  return s;
}

std::string joined_messages(const ValidationReport& r) {
  std::string all;
  for (const Problem& p : r.problems) all += p.message + "\n";
  return all;
}

Problem only_problem(const ValidationReport& r, ProblemKind kind) {
  INFO(to_string(r));
  REQUIRE(r.problems.size() == 1);
  REQUIRE(r.problems.front().kind == kind);
  return r.problems.front();
}

// Index of an action in a rank's program (the test's own lookup).
std::size_t index_of(const Schedule& s, std::int32_t rank, const Action& a) {
  const auto& prog = s.programs[static_cast<std::size_t>(rank)];
  for (std::size_t i = 0; i < prog.size(); ++i) {
    if (prog[i].op == a.op && prog[i].stage == a.stage && prog[i].microbatch == a.microbatch) return i;
  }
  FAIL("action " << to_string(a) << " not on rank " << rank);
  return 0;
}

void erase_action(Schedule& s, std::int32_t rank, const Action& a) {
  auto& prog = s.programs[static_cast<std::size_t>(rank)];
  prog.erase(prog.begin() + static_cast<std::ptrdiff_t>(index_of(s, rank, a)));
}

}  // namespace

TEST_CASE("a hand-written 1F1B is valid, compute-only and lowered", "[validate]") {
  for (std::int32_t p = 1; p <= 5; ++p) {
    for (std::int32_t m = 1; m <= 7; ++m) {
      const Schedule s = hand_1f1b(p, m);
      const ValidationReport r = validate(s);
      INFO("p=" << p << " m=" << m << "\n" << to_string(r));
      REQUIRE(r.ok());
      CHECK(r.deadlock_checked);
      CHECK_FALSE(r.lowered);
      const ValidationReport lr = validate(lower(s));
      INFO(to_string(lr));
      REQUIRE(lr.ok());
      CHECK(lr.lowered == (p > 1));
      for (std::int32_t r0 = 0; r0 < p; ++r0) {
        CHECK(r.memory[static_cast<std::size_t>(r0)].peak_in_flight == std::min(p - r0, m));
        CHECK(r.memory[static_cast<std::size_t>(r0)].peak_activations == std::min(p - r0, m));
      }
    }
  }
}

TEST_CASE("shape problems are reported and stop the checks", "[validate]") {
  Schedule s = hand_1f1b(2, 2);
  s.ranks = 3;
  CHECK(only_problem(validate(s), ProblemKind::shape).message.find("3 ranks but 2 programs") != std::string::npos);
  s = hand_1f1b(2, 2);
  s.placement[1] = 5;
  CHECK(only_problem(validate(s), ProblemKind::shape).message.find("placement[1] = 5") != std::string::npos);
  s = hand_1f1b(2, 2);
  s.microbatches = 0;
  CHECK(only_problem(validate(s), ProblemKind::shape).message.find("0 micro-batches") != std::string::npos);
  // A typo in the sizes must not make the checker index a billion micro-batches.
  s = hand_1f1b(2, 2);
  s.microbatches = 1'000'000'000;
  CHECK(only_problem(validate(s), ProblemKind::shape).message.find("need 2000000000 forwards") != std::string::npos);
}

TEST_CASE("compute mistakes each get their own message", "[validate]") {
  SECTION("missing B") {
    Schedule s = hand_1f1b(3, 4);
    erase_action(s, 1, act(Op::B, 1, 2));
    const Problem p = only_problem(validate(s), ProblemKind::missing_compute);
    CHECK(p.message.find("backward of micro-batch 2 on stage 1 is missing") != std::string::npos);
    CHECK(p.message.find("rank 1") != std::string::npos);
  }
  SECTION("missing F") {
    Schedule s = hand_1f1b(3, 4);
    erase_action(s, 2, act(Op::F, 2, 0));
    const ValidationReport r = validate(s);
    CHECK(r.has(ProblemKind::missing_compute));
    CHECK(joined_messages(r).find("F0@s2 is missing") != std::string::npos);
  }
  SECTION("duplicate F") {
    Schedule s = hand_1f1b(3, 4);
    s.programs[0].push_back(act(Op::F, 0, 1));
    const Problem p = only_problem(validate(s), ProblemKind::duplicate);
    CHECK(p.message.find("F1@s0 appears twice") != std::string::npos);
    CHECK(p.rank == 0);
    CHECK(p.position == static_cast<std::int32_t>(s.programs[0].size()) - 1);
  }
  SECTION("stage and micro-batch out of range") {
    Schedule s = hand_1f1b(2, 2);
    s.programs[0].push_back(act(Op::F, 7, 0));
    s.programs[1].push_back(act(Op::F, 1, 9));
    const ValidationReport r = validate(s);
    CHECK(r.has(ProblemKind::stage_out_of_range));
    CHECK(r.has(ProblemKind::microbatch_out_of_range));
    CHECK(joined_messages(r).find("names stage 7, but the schedule has stages 0..1") != std::string::npos);
    CHECK(joined_messages(r).find("names micro-batch 9") != std::string::npos);
  }
  SECTION("compute on a rank its stage is not placed on") {
    Schedule s = hand_1f1b(3, 2);
    const Action moved = act(Op::F, 1, 1);
    erase_action(s, 1, moved);
    s.programs[2].insert(s.programs[2].begin(), moved);
    const Problem p = only_problem(validate(s), ProblemKind::wrong_rank);
    CHECK(p.message.find("F1@s1 is on rank 2") != std::string::npos);
    CHECK(p.message.find("placed on rank 1") != std::string::npos);
  }
  SECTION("B and BI/BW mixed for one (stage, micro-batch)") {
    Schedule s = hand_1f1b(2, 2);
    s.split_backward = true;
    s.programs[1].push_back(act(Op::BI, 1, 0));
    s.programs[1].push_back(act(Op::BW, 1, 0));
    const ValidationReport r = validate(s);
    CHECK(r.has(ProblemKind::mixed_backward));
    CHECK(joined_messages(r).find("micro-batch 0 on stage 1 has both B and BI") != std::string::npos);
  }
  SECTION("BI without split_backward, BW missing") {
    Schedule s = hand_1f1b(2, 2);
    auto& prog = s.programs[1];
    prog[index_of(s, 1, act(Op::B, 1, 1))] = act(Op::BI, 1, 1);
    const ValidationReport r = validate(s);
    CHECK(r.has(ProblemKind::split_flag));
    CHECK(r.has(ProblemKind::missing_compute));
    CHECK(joined_messages(r).find("BW1@s1 is missing") != std::string::npos);
  }
  SECTION("B before its F on the same rank") {
    Schedule s = hand_1f1b(2, 2);
    auto& prog = s.programs[1];  // F0 B0 F1 B1 -> F0 B0 B1 F1
    std::swap(prog[2], prog[3]);
    const Problem p = only_problem(validate(s), ProblemKind::backward_before_forward);
    CHECK(p.message.find("B1@s1 (rank 1 position 2) comes before F1@s1 (rank 1 position 3)") != std::string::npos);
  }
  SECTION("BW before its BI") {
    Schedule s = hand_1f1b(1, 1);
    s.split_backward = true;
    s.programs[0] = {act(Op::F, 0, 0), act(Op::BW, 0, 0), act(Op::BI, 0, 0)};
    CHECK(only_problem(validate(s), ProblemKind::weight_before_input).message.find("BW0@s0") != std::string::npos);
  }
  SECTION("a compute group of one action") {
    Schedule s = hand_1f1b(1, 1);
    s.programs[0][0].group = 3;
    const Problem p = only_problem(validate(s), ProblemKind::pair_size);
    CHECK(p.message.find("group 3 at rank 0 position 0") != std::string::npos);
    CHECK(p.position == 0);
  }
  SECTION("a compute group of three actions") {
    Schedule s = hand_1f1b(2, 3);  // rank 1: F0 B0 F1 B1 F2 B2
    for (std::size_t i = 1; i <= 3; ++i) s.programs[1][i].group = 4;
    const Problem p = only_problem(validate(s), ProblemKind::pair_size);
    CHECK(p.message.find("holds 3 compute actions") != std::string::npos);
    CHECK(p.rank == 1);
  }
  SECTION("a pair that is not one forward and one backward") {
    Schedule s = hand_1f1b(2, 3);  // rank 0: F0 F1 B0 F2 B1 B2
    s.programs[0][0].group = 2;
    s.programs[0][1].group = 2;
    const Problem p = only_problem(validate(s), ProblemKind::pair_ops);
    CHECK(p.message.find("F0@s0#2 and F1@s0#2 at rank 0 position 0") != std::string::npos);
  }
  SECTION("a pair whose backward needs its forward") {
    Schedule s = hand_1f1b(2, 3);  // rank 1: F0 B0 F1 ...
    s.programs[1][0].group = 2;
    s.programs[1][1].group = 2;
    const Problem p = only_problem(validate(s), ProblemKind::pair_dependent);
    CHECK(p.message.find("one micro-batch") != std::string::npos);
  }
  SECTION("a pair split by another action") {
    Schedule s = hand_1f1b(2, 3);  // rank 1: F0 B0 F1 B1 F2 B2
    s.programs[1][1].group = 6;
    s.programs[1][3].group = 6;
    const Problem p = only_problem(validate(s), ProblemKind::group_not_contiguous);
    CHECK(p.message.find("must be adjacent") != std::string::npos);
  }
  SECTION("a group id shared by a compute action and communication") {
    Schedule s = lower(hand_1f1b(2, 3));
    auto& prog = s.programs[0];
    const auto send = std::find_if(prog.begin(), prog.end(), [](const Action& a) { return a.op == Op::SEND_F; });
    REQUIRE(send != prog.begin());
    REQUIRE(is_compute(std::prev(send)->op));
    send->group = 99;
    std::prev(send)->group = 99;
    const Problem p = only_problem(validate(s), ProblemKind::group_mixed);
    CHECK(p.message.find("shares group 99") != std::string::npos);
  }
  SECTION("two stages on one rank used out of order") {
    Schedule s;
    s.name = "local";
    s.ranks = 1;
    s.microbatches = 1;
    s.placement = {0, 0};
    s.programs = {{act(Op::F, 1, 0), act(Op::F, 0, 0), act(Op::B, 1, 0), act(Op::B, 0, 0)}};
    const Problem p = only_problem(validate(s), ProblemKind::local_order);
    CHECK(p.message.find("F0@s1") != std::string::npos);
  }
}

TEST_CASE("a compute order that cannot run is a deadlock naming the stuck actions", "[validate]") {
  // Rank 1 wants F1 first, but F1@s0 comes after B0@s0, which needs B0@s1, after F1@s1.
  Schedule s = hand_1f1b(2, 2);
  s.programs[0] = {act(Op::F, 0, 0), act(Op::B, 0, 0), act(Op::F, 0, 1), act(Op::B, 0, 1)};
  s.programs[1] = {act(Op::F, 1, 1), act(Op::F, 1, 0), act(Op::B, 1, 0), act(Op::B, 1, 1)};
  const Problem p = only_problem(validate(s), ProblemKind::deadlock);
  INFO(p.message);
  CHECK(p.message.find("rank 0: B0@s0 waits for B0@s1 on rank 1, which is behind F1@s1") != std::string::npos);
  CHECK(p.message.find("rank 1: F1@s1 waits for F1@s0 on rank 0, which is behind B0@s0") != std::string::npos);
}

TEST_CASE("communication mistakes each get their own message", "[validate]") {
  const Schedule good = lower(hand_1f1b(3, 4));
  REQUIRE(validate(good).ok());

  SECTION("unmatched send: its receive is missing") {
    Schedule s = good;
    erase_action(s, 2, act(Op::RECV_F, 2, 1));
    const Problem p = only_problem(validate(s), ProblemKind::missing_recv);
    CHECK(p.message.find("SEND_F1@s1") != std::string::npos);
    CHECK(p.message.find("RECV_F1@s2 is missing on rank 2") != std::string::npos);
  }
  SECTION("a receive without its send") {
    Schedule s = good;
    erase_action(s, 1, act(Op::SEND_B, 1, 3));
    const Problem p = only_problem(validate(s), ProblemKind::missing_send);
    CHECK(p.message.find("SEND_B3@s1 is missing on rank 1") != std::string::npos);
  }
  SECTION("a transfer with no communication at all") {
    Schedule s = good;
    erase_action(s, 0, act(Op::SEND_F, 0, 2));
    erase_action(s, 1, act(Op::RECV_F, 1, 2));
    const Problem p = only_problem(validate(s), ProblemKind::missing_transfer);
    CHECK(p.message.find("SEND_F2@s0 (rank 0) -> RECV_F2@s1 (rank 1)") != std::string::npos);
  }
  SECTION("a receive on the wrong peer") {
    Schedule s = good;
    const Action moved = act(Op::RECV_F, 1, 0);
    erase_action(s, 1, moved);
    s.programs[2].insert(s.programs[2].begin(), moved);
    const Problem p = only_problem(validate(s), ProblemKind::wrong_peer);
    INFO(p.message);
    CHECK(p.message.find("RECV_F0@s1 is on rank 2") != std::string::npos);
    CHECK(p.message.find("SEND_F0@s0 from rank 0 (stage 0) goes to rank 1") != std::string::npos);
  }
  SECTION("a needless send across a boundary inside one rank") {
    Schedule s;
    s.name = "two-on-one";
    s.ranks = 1;
    s.microbatches = 1;
    s.placement = {0, 0};
    s.programs = {{act(Op::F, 0, 0), act(Op::SEND_F, 0, 0), act(Op::F, 1, 0), act(Op::B, 1, 0), act(Op::B, 0, 0)}};
    const Problem p = only_problem(validate(s), ProblemKind::needless_comm);
    CHECK(p.message.find("both on rank 0") != std::string::npos);
  }
  SECTION("a send on the last stage has no peer") {
    Schedule s = good;
    s.programs[2].push_back(act(Op::SEND_F, 2, 0));
    CHECK(only_problem(validate(s), ProblemKind::no_peer).message.find("no stage 3 to send to") != std::string::npos);
  }
  SECTION("duplicate receive") {
    Schedule s = good;
    s.programs[1].insert(s.programs[1].begin(), act(Op::RECV_F, 1, 0));
    CHECK(only_problem(validate(s), ProblemKind::duplicate).message.find("RECV_F0@s1 appears twice") != std::string::npos);
  }
  SECTION("a receive issued after the compute that needs it") {
    Schedule s = good;
    auto& prog = s.programs[1];
    const std::size_t r = index_of(s, 1, act(Op::RECV_F, 1, 0));
    const std::size_t f = index_of(s, 1, act(Op::F, 1, 0));
    prog.insert(prog.begin() + static_cast<std::ptrdiff_t>(f) + 1, prog[r]);
    prog.erase(prog.begin() + static_cast<std::ptrdiff_t>(r));
    const Problem p = only_problem(validate(s), ProblemKind::recv_after_consumer);
    CHECK(p.message.find("F0@s1") != std::string::npos);
    CHECK(p.message.find("move RECV_F0@s1 before F0@s1") != std::string::npos);
  }
  SECTION("a send issued before its producer") {
    Schedule s = good;
    auto& prog = s.programs[0];
    const std::size_t snd = index_of(s, 0, act(Op::SEND_F, 0, 1));
    const Action moved = prog[snd];
    prog.erase(prog.begin() + static_cast<std::ptrdiff_t>(snd));
    prog.insert(prog.begin(), moved);
    const ValidationReport r = validate(s);
    CHECK(r.has(ProblemKind::send_before_producer));
    CHECK(joined_messages(r).find("move F1@s0 before SEND_F1@s0") != std::string::npos);
  }
  SECTION("a group that is not contiguous") {
    Schedule s = good;
    auto& prog = s.programs[1];
    for (Action& a : prog) {
      if (is_comm(a.op)) a.group = 0;
    }
    prog[index_of(s, 1, act(Op::RECV_F, 1, 0))].group = 9;
    prog[index_of(s, 1, act(Op::SEND_B, 1, 3))].group = 9;
    const Problem p = only_problem(validate(s), ProblemKind::group_not_contiguous);
    CHECK(p.message.find("group 9 on rank 1 is not contiguous") != std::string::npos);
  }
  SECTION("two ranks posting their messages to each other in different orders") {
    // Rank 1 posts both receives up front, but for micro-batch 1 first.
    Schedule s;
    s.name = "swapped";
    s.ranks = 2;
    s.microbatches = 2;
    s.placement = {0, 1};
    s.programs = {
        {act(Op::F, 0, 0), act(Op::SEND_F, 0, 0), act(Op::F, 0, 1), act(Op::SEND_F, 0, 1), act(Op::RECV_B, 0, 0),
         act(Op::B, 0, 0), act(Op::RECV_B, 0, 1), act(Op::B, 0, 1)},
        {act(Op::RECV_F, 1, 1), act(Op::RECV_F, 1, 0), act(Op::F, 1, 0), act(Op::B, 1, 0), act(Op::SEND_B, 1, 0),
         act(Op::F, 1, 1), act(Op::B, 1, 1), act(Op::SEND_B, 1, 1)},
    };
    const Problem p = only_problem(validate(s), ProblemKind::pair_order);
    CHECK(p.message.find("rank 1 receives RECV_F1@s1 (rank 1 position 0) before RECV_F0@s1 (rank 1 position 1), "
                         "but rank 0 sends SEND_F0@s0 (rank 0 position 1) before SEND_F1@s0 (rank 0 position 3)") !=
          std::string::npos);
    CHECK(p.message.find("NCCL matches point-to-point messages between two ranks in posting order") !=
          std::string::npos);
  }
}

TEST_CASE("a lowered schedule that deadlocks under rendezvous names every stuck action", "[validate]") {
  // Rank 0 sends F1 before receiving B0; rank 1 sends B0 before receiving F1: each send
  // waits for a receive that is queued behind the other send.
  Schedule s;
  s.name = "send-send";
  s.ranks = 2;
  s.microbatches = 2;
  s.placement = {0, 1};
  s.programs = {
      {act(Op::F, 0, 0), act(Op::SEND_F, 0, 0), act(Op::F, 0, 1), act(Op::SEND_F, 0, 1), act(Op::RECV_B, 0, 0),
       act(Op::B, 0, 0), act(Op::RECV_B, 0, 1), act(Op::B, 0, 1)},
      {act(Op::RECV_F, 1, 0), act(Op::F, 1, 0), act(Op::B, 1, 0), act(Op::SEND_B, 1, 0), act(Op::RECV_F, 1, 1),
       act(Op::F, 1, 1), act(Op::B, 1, 1), act(Op::SEND_B, 1, 1)},
  };
  const ValidationReport r = validate(s);
  INFO(to_string(r));
  REQUIRE(r.has(ProblemKind::deadlock));
  const std::string m = joined_messages(r);
  CHECK(m.find("deadlock under rendezvous with communication on its own stream") != std::string::npos);
  CHECK(m.find("rank 0: SEND_F1@s0 (posted) waits for RECV_F1@s1 on rank 1, which is behind SEND_B0@s1") !=
        std::string::npos);
  CHECK(m.find("rank 1: SEND_B0@s1 (posted) waits for RECV_B0@s0 on rank 0, which is behind SEND_F1@s0") !=
        std::string::npos);
  CHECK(m.find("rank 0: B0@s0 waits for RECV_B0@s0") != std::string::npos);

  // Posting each rank's pair together (as lower() does) removes the deadlock.
  s.programs[0] = {act(Op::F, 0, 0), act(Op::SEND_F, 0, 0), act(Op::F, 0, 1), act(Op::SEND_F, 0, 1, 1),
                   act(Op::RECV_B, 0, 0, 1), act(Op::B, 0, 0), act(Op::RECV_B, 0, 1), act(Op::B, 0, 1)};
  s.programs[1] = {act(Op::RECV_F, 1, 0), act(Op::F, 1, 0), act(Op::B, 1, 0), act(Op::SEND_B, 1, 0, 4),
                   act(Op::RECV_F, 1, 1, 4), act(Op::F, 1, 1), act(Op::B, 1, 1), act(Op::SEND_B, 1, 1)};
  const ValidationReport fixed = validate(s);
  INFO(to_string(fixed));
  CHECK(fixed.ok());
}

TEST_CASE("validate_or_throw lists the problems in a ppsched::error", "[validate]") {
  Schedule s = hand_1f1b(2, 3);
  erase_action(s, 0, act(Op::B, 0, 1));
  s.programs[1].push_back(act(Op::F, 1, 0));
  try {
    (void)validate_or_throw(s);
    FAIL("no error");
  } catch (const error& e) {
    const std::string m = e.what();
    CHECK(m.find("schedule 'hand-1f1b': is not valid: 2 problem(s)") != std::string::npos);
    CHECK(m.find("backward of micro-batch 1 on stage 0 is missing") != std::string::npos);
    CHECK(m.find("F0@s1 appears twice") != std::string::npos);
  }
  CHECK_NOTHROW(validate_or_throw(hand_1f1b(2, 3)));
}

TEST_CASE("memory: M_W between BI and BW, bytes per stage", "[validate]") {
  // One rank, two micro-batches: F0 F1 BI0 BI1 BW0 BW1: peak 2 M_B after F1; after BI0 and
  // BI1 it is 2 M_W.
  Schedule s;
  s.name = "split";
  s.ranks = 1;
  s.microbatches = 2;
  s.split_backward = true;
  s.placement = {0};
  s.programs = {{act(Op::F, 0, 0), act(Op::F, 0, 1), act(Op::BI, 0, 0), act(Op::BI, 0, 1), act(Op::BW, 0, 0),
                 act(Op::BW, 0, 1)}};
  ValidateOptions o;
  o.memory.weight_fraction = 0.25;
  o.memory.activation_bytes = {1000.0};
  ValidationReport r = validate(s, o);
  REQUIRE(r.ok());
  CHECK(r.memory[0].peak_activations == 2.0);
  CHECK(r.memory[0].peak_bytes == 2000.0);
  CHECK(r.memory[0].peak_in_flight == 2);
  // F0 BI0 F1: 0.25 + 1 = 1.25 at the peak.
  s.programs = {{act(Op::F, 0, 0), act(Op::BI, 0, 0), act(Op::F, 0, 1), act(Op::BW, 0, 0), act(Op::BI, 0, 1),
                 act(Op::BW, 0, 1)}};
  r = validate(s, o);
  REQUIRE(r.ok());
  CHECK(r.memory[0].peak_activations == 1.25);
  CHECK(r.memory[0].peak_bytes == 1250.0);
  CHECK(r.memory[0].peak_in_flight == 1);

  o.memory.activation_bytes = {1.0, 2.0};
  CHECK_THROWS_AS(validate(s, o), error);
}

TEST_CASE("sweep: every family, p 1..16, m 1..64, v 1..4 — valid, deadlock-free, within its memory bound",
          "[validate][sweep]") {
  std::size_t schedules = 0, round_trips = 0;
  for (std::string_view family : family_names()) {
    for (std::int32_t p = 1; p <= 16; ++p) {
      for (std::int32_t m = 1; m <= 64; ++m) {
        for (std::int32_t v = 1; v <= 4; ++v) {
          const ScheduleRequest request{p, m, v};
          if (!accepts(family, request)) continue;
          const Schedule s = make_schedule(family, request);
          const ValidationReport compute = validate(s);
          const Schedule l = lower(s);
          const ValidationReport lowered = validate(l);
          if (!compute.ok() || !lowered.ok()) {
            FAIL(family << ' ' << to_string(request) << '\n' << to_string(compute) << '\n' << to_string(lowered));
          }
          // Lowering does not change what is stored, only when data moves.
          for (std::int32_t r = 0; r < p; ++r) {
            const RankMemory& mem = lowered.memory[static_cast<std::size_t>(r)];
            if (mem.peak_activations != compute.memory[static_cast<std::size_t>(r)].peak_activations) {
              FAIL(family << ' ' << to_string(request) << " rank " << r << ": lowering changed the memory");
            }
            // The literature's bounds, for the families that state one.
            const std::int32_t bound = analytic_peak_in_flight(family, p, m, r);
            if (bound >= 0 && mem.peak_in_flight != bound) {
              FAIL(family << ' ' << to_string(request) << " rank " << r << ": " << mem.peak_in_flight
                          << " micro-batches in flight, the bound is " << bound);
            }
          }
          // A lowered schedule survives PyTorch's CSV format (groups in ppsched's suffix).
          if (m <= 16 && v <= 2) {
            CsvReadOptions read;
            read.name = s.name;
            read.microbatches = m;
            read.placement = s.placement;
            Schedule back = from_pytorch_csv(to_pytorch_csv(l), read);
            back.split_backward = l.split_backward;
            if (!(back == l) || !validate(back).ok()) FAIL(family << ' ' << to_string(request) << ": CSV round trip");
            ++round_trips;
          }
          ++schedules;
        }
      }
    }
  }
  CHECK(schedules > 10000);
  CHECK(round_trips > 1000);
}

TEST_CASE("an overlapped pair is one item: valid in either order, lowered around, counted at its peak",
          "[validate][pair]") {
  Schedule s = hand_1f1b(2, 3);  // rank 1: F0 B0 F1 B1 F2 B2
  s.programs[1][1].group = 1;    // (B0, F1): backward first
  s.programs[1][2].group = 1;
  s.programs[1][3].group = 2;    // (B1, F2)
  s.programs[1][4].group = 2;
  const ValidationReport report = validate(s);
  INFO(to_string(report));
  REQUIRE(report.ok());
  // The pair holds F1's new activation while B0 still holds its own: 2 M_B, not 1.
  CHECK(report.memory[1].peak_activations == Approx(2.0));
  const Schedule lowered = lower(s);
  REQUIRE(validate(lowered).ok());
  for (const auto& prog : lowered.programs) {
    for (std::size_t i = 0; i < prog.size(); ++i) {
      if (!is_compute(prog[i].op) || prog[i].group == 0) continue;
      // The pair stayed adjacent, with a group id that no communication of the rank uses.
      REQUIRE(i + 1 < prog.size());
      CHECK(prog[i + 1].group == prog[i].group);
      for (const Action& a : prog) {
        if (is_comm(a.op)) CHECK(a.group != prog[i].group);
      }
      ++i;
    }
  }
  // A pair that waits on its own output deadlocks, named as one pair.
  Schedule stuck = hand_1f1b(2, 3);
  // rank 0: F0 F1 B0 F2 B1 B2 -> pair (B0, F2): B0 needs rank 1's B0, which is fine; make rank 1
  // pair (B1@s1, F2@s1) come before F1@s1 so that it waits on F2@s0 ... use a cross-rank cycle:
  stuck.programs[0] = {act(Op::F, 0, 0), act(Op::B, 0, 0, 1), act(Op::F, 0, 1, 1), act(Op::F, 0, 2), act(Op::B, 0, 1),
                       act(Op::B, 0, 2)};
  stuck.programs[1] = {act(Op::F, 1, 1), act(Op::F, 1, 0), act(Op::B, 1, 0), act(Op::B, 1, 1), act(Op::F, 1, 2),
                       act(Op::B, 1, 2)};
  const ValidationReport r = validate(stuck);
  INFO(to_string(r));
  REQUIRE(r.has(ProblemKind::deadlock));
  CHECK(joined_messages(r).find("the overlapped pair {B0@s0#1, F1@s0#1}") != std::string::npos);
}

TEST_CASE("validate() of a LoweredSchedule takes lowering's proof and reports what the full checks do",
          "[validate][lower]") {
  // Per-stage sizes and a weight fraction of their own, so the memory figures carry bytes.
  auto options_for = [](const Schedule& s, bool deadlock) {
    ValidateOptions o;
    o.memory.weight_fraction = 0.25;
    for (std::int32_t st = 0; st < s.stages(); ++st) o.memory.activation_bytes.push_back(1.0 + st);
    o.check_deadlock = deadlock;
    return o;
  };
  std::vector<LowerOptions> lowerings(3);
  lowerings[1].group_simultaneous = false;
  lowerings[2].compute_time = [](const Action& a) { return a.op == Op::F ? 1.0 + 0.5 * (a.stage % 3) : 2.5; };
  lowerings[2].transfer_time = [](const Action& a) { return 0.25 * (1 + a.microbatch % 2); };
  lowerings[2].fb_overlap = 0.5;
  std::size_t compared = 0;
  Workspace workspace;
  for (std::string_view family : family_names()) {
    for (std::int32_t p = 1; p <= 6; ++p) {
      for (std::int32_t m = 1; m <= 10; ++m) {
        for (std::int32_t v = 1; v <= 3; ++v) {
          const ScheduleRequest request{p, m, v};
          if (!accepts(family, request)) continue;
          const Schedule s = make_schedule(family, request);
          for (std::size_t k = 0; k < lowerings.size(); ++k) {
            const LoweredSchedule l = lower(s, lowerings[k]);
            REQUIRE(l.proven());
            const bool deadlock = compared % 5 != 0;
            const ValidationReport taken = validate(l, options_for(l, deadlock));
            // The full checks, on the same schedule as a plain Schedule: they are what proves
            // lower() right, and what the proof must agree with.
            const Schedule& plain = l;
            const ValidationReport full = validate(plain, options_for(l, deadlock));
            // With a workspace kept across calls, the same reports.
            const ValidationReport taken_ws = validate(l, options_for(l, deadlock), workspace);
            const ValidationReport full_ws = validate(plain, options_for(l, deadlock), workspace);
            CHECK(to_string(taken_ws) == to_string(taken));
            CHECK(to_string(full_ws) == to_string(full));
            INFO(family << ' ' << to_string(request) << " lowering " << k << '\n' << to_string(full));
            REQUIRE(full.ok());
            REQUIRE(full.deadlock_checked == deadlock);
            CHECK(taken.ok());
            CHECK(taken.schedule_name == full.schedule_name);
            CHECK(taken.lowered == full.lowered);
            CHECK(taken.deadlock_checked == full.deadlock_checked);
            CHECK(taken.stage_peak_in_flight == full.stage_peak_in_flight);
            CHECK(to_string(taken) == to_string(full));
            REQUIRE(taken.memory.size() == full.memory.size());
            for (std::size_t r = 0; r < full.memory.size(); ++r) {
              CHECK(taken.memory[r].peak_activations == full.memory[r].peak_activations);
              CHECK(taken.memory[r].peak_bytes == full.memory[r].peak_bytes);
              CHECK(taken.memory[r].peak_in_flight == full.memory[r].peak_in_flight);
            }
            ++compared;
          }
        }
      }
    }
  }
  CHECK(compared > 1000);
}

TEST_CASE("a plain Schedule is always checked in full, a copy of a lowered one or a changed one included",
          "[validate][lower]") {
  // A copy taken out of lower()'s result is a plain Schedule: changed, it is checked in full.
  const LoweredSchedule lowered = lower(hand_1f1b(3, 4));
  REQUIRE(lowered.proven());
  REQUIRE(lowered.communicates());
  Schedule l = lowered;
  CHECK(l == lowered.schedule());
  const std::size_t recv = index_of(l, 1, act(Op::RECV_F, 1, 2));
  const Action removed = l.programs[1][recv];
  l.programs[1][recv].microbatch = 3;  // now RECV_F3 twice, RECV_F2 missing
  ValidationReport r = validate(l);
  CHECK(r.has(ProblemKind::duplicate));
  CHECK(r.has(ProblemKind::missing_recv));
  l.programs[1][recv] = removed;
  CHECK(validate(l).ok());
  CHECK(to_string(validate(l)) == to_string(validate(lowered)));

  const ValidationReport before = validate(l);
  l.programs[0].back().group = 99;  // a group id alone: seen, whatever it means
  CHECK(to_string(validate(l)) != to_string(before));
  l.programs[0].back().group = 0;
  l.microbatches = 5;
  CHECK(validate(l).has(ProblemKind::missing_compute));
  l.microbatches = 4;
  l.placement = {0, 1, 1};
  CHECK_FALSE(validate(l).ok());
  l.placement = {0, 1, 2};
  REQUIRE(l.programs[2].back() == act(Op::SEND_B, 2, 3));
  l.programs[2].pop_back();
  CHECK(validate(l).has(ProblemKind::missing_send));
  // The LoweredSchedule itself cannot be changed: it has only const access.
  static_assert(std::is_same_v<decltype(lowered.schedule()), const Schedule&>);

  // A schedule that already communicates is returned by lower() as it is: not vouched for.
  Schedule stuck;
  stuck.name = "send-send";
  stuck.ranks = 2;
  stuck.microbatches = 2;
  stuck.placement = {0, 1};
  stuck.programs = {
      {act(Op::F, 0, 0), act(Op::SEND_F, 0, 0), act(Op::F, 0, 1), act(Op::SEND_F, 0, 1), act(Op::RECV_B, 0, 0),
       act(Op::B, 0, 0), act(Op::RECV_B, 0, 1), act(Op::B, 0, 1)},
      {act(Op::RECV_F, 1, 0), act(Op::F, 1, 0), act(Op::B, 1, 0), act(Op::SEND_B, 1, 0), act(Op::RECV_F, 1, 1),
       act(Op::F, 1, 1), act(Op::B, 1, 1), act(Op::SEND_B, 1, 1)},
  };
  const LoweredSchedule same = lower(stuck);
  CHECK_FALSE(same.proven());
  CHECK(same == stuck);
  CHECK(validate(same).has(ProblemKind::deadlock));
  CHECK_THROWS_AS(validate_or_throw(same), ppsched::error);

  // Every schedule lower() wrote keeps its proof, not only the last one (no per-thread state).
  const LoweredSchedule first = lower(hand_1f1b(2, 2));
  const LoweredSchedule second = lower(hand_1f1b(2, 3));
  CHECK(first.proven());
  CHECK(second.proven());
  CHECK(validate(first).ok());
  CHECK(validate_or_throw(second).ok());
}

TEST_CASE("a Workspace lends its arrays across calls and frees them on release", "[validate][lower]") {
  Workspace ws;
  CHECK(ws.capacity_bytes() == 0);
  const Schedule s = make_schedule("1f1b", {4, 16, 1});
  const LoweredSchedule l = lower(s, {}, ws);
  const std::size_t held = ws.capacity_bytes();
  CHECK(held > 0);
  CHECK(validate(l, {}, ws).ok());
  const Schedule& plain = l;
  CHECK(validate(plain, {}, ws).ok());
  CHECK(ws.capacity_bytes() >= held);
  CHECK(lower(s, {}, ws) == l);
  ws.release();
  CHECK(ws.capacity_bytes() == 0);
}

// Bug fixed by issue 13: the report printed `peak_activations` (stored stage activations) under
// the label M_B, which is a rank's share: with v stages per rank it said v times too much.
TEST_CASE("memory in M_B: one unit for validate, simulate and the search", "[validate][memory]") {
  for (std::string_view family : family_names()) {
    for (const std::int32_t v : {1, 2}) {
      const ScheduleRequest request{4, 8, v};
      if (!accepts(family, request)) continue;
      const Schedule s = make_schedule(family, request);
      INFO(family << " v=" << v);
      CostModel costs = uniform_costs(1.0, 1.0, 1.0);
      costs.weight_memory_fraction = 0.25;
      ValidateOptions o;
      o.memory.weight_fraction = costs.weight_memory_fraction;
      const ValidationReport r = validate(s, o);
      REQUIRE(r.ok());
      const plan::PeakMemory peak = plan::peak_memory(s, costs);
      // Sizes equal to the stages' M_B weights: the byte count of the one walk then equals its M_B.
      ValidateOptions sized = o;
      sized.memory.activation_bytes = plan::stage_weights(s.placement, s.ranks);
      const ValidationReport weighted = validate(s, sized);
      const std::int32_t per_rank = s.stages() / s.ranks;
      std::string printed = "peak activations per rank (M_B):";
      for (std::size_t k = 0; k < r.memory.size(); ++k) {
        CHECK(r.memory[k].peak_microbatches == peak.microbatches[k]);
        CHECK(r.memory[k].peak_microbatches == weighted.memory[k].peak_bytes);
        if (per_rank == 1) CHECK(r.memory[k].peak_microbatches == r.memory[k].peak_activations);
        CHECK(r.memory[k].peak_microbatches == Approx(r.memory[k].peak_activations / per_rank));
        std::ostringstream number;
        number << ' ' << r.memory[k].peak_microbatches;
        printed += number.str();
      }
      CHECK(to_string(r).find(printed) != std::string::npos);
      // The same figures from the simulator and from a LoweredSchedule's report.
      const SimResult sim = simulate(s, costs);
      const ValidationReport proven = validate(lower(s), o);
      for (std::size_t k = 0; k < r.memory.size(); ++k) {
        CHECK(sim.memory[k].peak_microbatches == r.memory[k].peak_microbatches);
        CHECK(proven.memory[k].peak_microbatches == r.memory[k].peak_microbatches);
      }
    }
  }
}
