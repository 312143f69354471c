// Tests for the schedule generators and the PyTorch-format CSV.
//
// The generators are checked three ways: structurally (every compute action exactly once, in
// a legal per-stage order, on the rank its placement names), by running each schedule through
// a small unit-cost dataflow model written here (no communication, every rank runs its program
// in order, an action starts when its rank is free and its inputs are done) which proves the
// compute order cannot wait on itself and measures the bubble, and against the published
// shapes (the zero-bubble paper's figures, Megatron's schedule table, PyTorch's orders).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ppsched/schedule/csv.hpp"
#include "ppsched/schedule/generators.hpp"
#include "ppsched/lower/lower.hpp"
#include "ppsched/validate/validate.hpp"
#include "ppsched/sim/analytic.hpp"
#include "ppsched/sim/simulate.hpp"

using namespace ppsched;

namespace {

// ------------------------------------------------------------------ helpers

[[nodiscard]] Action act(Op op, std::int32_t stage, std::int32_t mb, std::uint32_t group = 0) {
  Action a;
  a.op = op;
  a.stage = stage;
  a.microbatch = mb;
  a.group = group;
  return a;
}

// Parses "F0 B0 BI1 BW1" (stage given separately) into compute actions: the expected
// programs below are written the way the papers draw them.
[[nodiscard]] std::vector<Action> program_of(std::int32_t stage, const std::string& text) {
  std::vector<Action> out;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    std::size_t digits = word.find_first_of("0123456789");
    const std::string op = word.substr(0, digits);
    const std::int32_t mb = std::stoi(word.substr(digits));
    const Op o = op == "F" ? Op::F : op == "B" ? Op::B : op == "BI" ? Op::BI : Op::BW;
    out.push_back(act(o, stage, mb));
  }
  return out;
}

struct Costs {
  std::int64_t f = 1;                                       // forward of one stage (chunk)
  std::int64_t bi = 1;                                      // backward for the input
  std::int64_t bw = 1;                                      // backward for the weights
  [[nodiscard]] std::int64_t b() const { return bi + bw; }  // full backward
};

struct DataflowRun {
  bool completed = true;
  std::string stuck;  // the head action of every rank that could not go on
  std::int64_t makespan = 0;
  std::vector<std::int64_t> busy, first_start, last_end;

  [[nodiscard]] std::int64_t idle(std::size_t rank) const { return makespan - busy[rank]; }
  [[nodiscard]] std::int64_t idle_in_span(std::size_t rank) const {
    return last_end[rank] - first_start[rank] - busy[rank];
  }
};

// Runs a compute-only schedule with the given costs: each rank executes its program in order;
// an action starts when its rank is free and the actions it depends on (the execution model's
// compute dependencies) have finished. A rank whose next action depends on something never
// run is stuck; if no rank can move, the schedule deadlocks.
[[nodiscard]] DataflowRun run_dataflow(const Schedule& s, const Costs& c) {
  const std::size_t stages = static_cast<std::size_t>(s.stages());
  const std::size_t m = static_cast<std::size_t>(s.microbatches);
  const std::size_t ranks = s.programs.size();
  std::vector<std::int64_t> forward_done(stages * m, -1), backward_done(stages * m, -1);
  std::vector<std::size_t> next(ranks, 0);
  std::vector<std::int64_t> free_at(ranks, 0);
  DataflowRun run;
  run.busy.assign(ranks, 0);
  run.first_start.assign(ranks, -1);
  run.last_end.assign(ranks, 0);
  std::size_t left = 0;
  for (const auto& program : s.programs) left += program.size();
  for (bool moved = true; left > 0 && moved;) {
    moved = false;
    for (std::size_t r = 0; r < ranks; ++r) {
      const auto& program = s.programs[r];
      while (next[r] < program.size()) {
        // An overlapped pair (two adjacent compute actions sharing a group) starts when both
        // inputs are ready, takes both times (no overlap) and ends as one.
        const bool pair = program[next[r]].group != 0 && next[r] + 1 < program.size() &&
                          program[next[r] + 1].group == program[next[r]].group;
        const std::size_t count = pair ? 2 : 1;
        std::int64_t ready = free_at[r];
        std::int64_t cost = 0;
        const auto need = [&](std::int64_t done) {
          if (done < 0) return false;
          ready = std::max(ready, done);
          return true;
        };
        bool blocked = false;
        for (std::size_t k = 0; k < count && !blocked; ++k) {
          const Action& a = program[next[r] + k];
          const std::size_t i = static_cast<std::size_t>(a.stage) * m + static_cast<std::size_t>(a.microbatch);
          if (a.op == Op::F) {
            blocked = a.stage > 0 && !need(forward_done[i - m]);
            cost += c.f;
          } else if (a.op == Op::B || a.op == Op::BI) {
            blocked = !need(forward_done[i]) ||
                      (static_cast<std::size_t>(a.stage) + 1 < stages && !need(backward_done[i + m]));
            cost += a.op == Op::B ? c.b() : c.bi;
          } else {
            blocked = !need(backward_done[i]);
            cost += c.bw;
          }
        }
        if (blocked) break;
        const std::int64_t end = ready + cost;
        free_at[r] = end;
        run.busy[r] += cost;
        if (run.first_start[r] < 0) run.first_start[r] = ready;
        run.last_end[r] = end;
        for (std::size_t k = 0; k < count; ++k) {
          const Action& a = program[next[r] + k];
          const std::size_t i = static_cast<std::size_t>(a.stage) * m + static_cast<std::size_t>(a.microbatch);
          if (a.op == Op::F) forward_done[i] = end;
          if (a.op == Op::B || a.op == Op::BI) backward_done[i] = end;
        }
        next[r] += count;
        left -= count;
        moved = true;
      }
    }
  }
  if (left > 0) {
    run.completed = false;
    for (std::size_t r = 0; r < ranks; ++r)
      if (next[r] < s.programs[r].size())
        run.stuck += "rank " + std::to_string(r) + " at " + to_string(s.programs[r][next[r]]) + "; ";
  }
  for (std::size_t r = 0; r < ranks; ++r) run.makespan = std::max(run.makespan, run.last_end[r]);
  return run;
}

// Largest number of (stage, micro-batch) activations a rank holds awaiting their backward
// (F done, B or BI not yet), over its program.
[[nodiscard]] std::vector<std::int32_t> peak_in_flight(const Schedule& s) {
  std::vector<std::int32_t> peaks;
  for (const auto& program : s.programs) {
    std::int32_t now = 0, peak = 0;
    for (const Action& a : program) {
      if (a.op == Op::F) ++now;
      if (a.op == Op::B || a.op == Op::BI) --now;
      peak = std::max(peak, now);
    }
    peaks.push_back(peak);
  }
  return peaks;
}

// Peak activation memory per rank in units of M_B, counting M_W = 0.5 between BI and BW as
// the execution model does; doubled so that it stays an integer.
[[nodiscard]] std::vector<std::int32_t> twice_peak_memory(const Schedule& s) {
  std::vector<std::int32_t> peaks;
  for (const auto& program : s.programs) {
    std::int32_t now = 0, peak = 0;
    for (const Action& a : program) {
      if (a.op == Op::F) now += 2;
      if (a.op == Op::B) now -= 2;
      if (a.op == Op::BI || a.op == Op::BW) now -= 1;
      peak = std::max(peak, now);
    }
    peaks.push_back(peak);
  }
  return peaks;
}

[[nodiscard]] std::vector<std::int32_t> expected_placement(std::string_view family,
                                                           const ScheduleRequest& r) {
  if (family == "looped-bfs" || family == "interleaved-1f1b" || family == "interleaved-zb") {
    std::vector<std::int32_t> p;
    for (std::int32_t s = 0; s < r.ranks * r.chunks; ++s) p.push_back(s % r.ranks);
    return p;
  }
  if (family == "zb-v" || family == "dualpipev" || family == "v-half" || family == "v-min") {
    std::vector<std::int32_t> p;
    for (std::int32_t s = 0; s < 2 * r.ranks; ++s) p.push_back(s < r.ranks ? s : 2 * r.ranks - 1 - s);
    return p;
  }
  std::vector<std::int32_t> p;
  for (std::int32_t s = 0; s < r.ranks; ++s) p.push_back(s);
  return p;
}

// Structural checks that need no validator; returns the first problem found, or "".
[[nodiscard]] std::string structure_problem(std::string_view family, const ScheduleRequest& r,
                                            const Schedule& s) {
  const auto say = [](auto&&... parts) { return detail::concat(parts...); };
  if (s.name != family) return say("name '", s.name, "'");
  if (s.ranks != r.ranks || static_cast<std::int32_t>(s.programs.size()) != r.ranks) return "rank count";
  if (s.microbatches != r.microbatches) return "micro-batch count";
  if (s.placement != expected_placement(family, r)) return "placement";
  // Every backward split (the zero-bubble and controllable-memory families); DualPipeV splits
  // some (its cool-down) and runs full B in its F&B pairs.
  const bool zero_bubble = family == "zb-h1" || family == "zb-h2" || family == "zb-v" ||
                           family == "v-half" || family == "v-min" || family == "interleaved-zb";
  if (s.split_backward != (zero_bubble || family == "dualpipev")) return "split_backward";
  const std::size_t m = static_cast<std::size_t>(r.microbatches);
  const std::size_t cells = static_cast<std::size_t>(s.stages()) * m;
  // Position of each (stage, mb) action of each kind in its rank's program; -1 = absent.
  std::vector<std::int64_t> pos_f(cells, -1), pos_back(cells, -1), pos_w(cells, -1);
  for (std::size_t rank = 0; rank < s.programs.size(); ++rank) {
    const auto& program = s.programs[rank];
    for (std::size_t k = 0; k < program.size(); ++k) {
      const Action& a = program[k];
      if (!is_compute(a.op)) return say("rank ", rank, ": non-compute ", to_string(a));
      if (a.group != 0) {  // only DualPipeV's F&B pairs: an F then a B of another micro-batch
        const bool first = k + 1 < program.size() && program[k + 1].group == a.group;
        const Action& b = first ? program[k + 1] : program[k - 1];
        if (family != "dualpipev" || (k == 0 && !first) || b.group != a.group ||
            (first ? a.op != Op::F || b.op != Op::B : b.op != Op::F || a.op != Op::B) || a.microbatch == b.microbatch)
          return say("rank ", rank, ": a group on ", to_string(a), " that is not one of DualPipeV's F&B pairs");
      }
      if (a.stage < 0 || a.stage >= s.stages() || a.microbatch < 0 || a.microbatch >= r.microbatches)
        return say("rank ", rank, ": out of range ", to_string(a));
      if (s.placement[static_cast<std::size_t>(a.stage)] != static_cast<std::int32_t>(rank))
        return say("rank ", rank, ": holds ", to_string(a), " of another rank's stage");
      if (family == "forward-only" && a.op != Op::F) return say("forward-only has ", to_string(a));
      if (zero_bubble && a.op == Op::B) return say("zero-bubble family emits B: ", to_string(a));
      if (!zero_bubble && family != "dualpipev" && (a.op == Op::BI || a.op == Op::BW))
        return say("emits split backward ", to_string(a));
      auto& slot = a.op == Op::F ? pos_f : a.op == Op::BW ? pos_w : pos_back;
      const std::size_t i = static_cast<std::size_t>(a.stage) * m + static_cast<std::size_t>(a.microbatch);
      if (slot[i] >= 0) return say("rank ", rank, ": ", to_string(a), " twice");
      slot[i] = static_cast<std::int64_t>(k);
    }
  }
  for (std::size_t i = 0; i < cells; ++i) {
    const auto where = say("stage ", i / m, " micro-batch ", i % m);
    if (pos_f[i] < 0) return where + ": no F";
    if (family == "forward-only") continue;
    if (pos_back[i] < 0) return where + ": no backward";
    if (pos_back[i] < pos_f[i]) return where + ": backward before F";
    if (zero_bubble && pos_w[i] < 0) return where + ": no BW";
    if (family == "dualpipev" && pos_w[i] >= 0 && s.programs[static_cast<std::size_t>(s.placement[i / m])][static_cast<std::size_t>(pos_back[i])].op != Op::BI)
      return where + ": BW after a full B";
    if (zero_bubble && pos_w[i] < pos_back[i]) return where + ": BW before BI";
  }
  return "";
}

constexpr ScheduleRequest req(std::int32_t p, std::int32_t m, std::int32_t v = 1) { return {p, m, v}; }

// PyTorch's ScheduleInterleavedZeroBubble cuts the m micro-batches into max(1, m / p) rounds
// and raises ValueError unless they are equal.
constexpr std::int32_t pytorch_rounds(std::int32_t p, std::int32_t m) { return std::max(1, m / p); }
constexpr bool pytorch_accepts_interleaved_zb(std::int32_t p, std::int32_t m) { return m % pytorch_rounds(p, m) == 0; }

}  // namespace

// ------------------------------------------------------------------ the sweep

TEST_CASE(
    "every family over p 1..16, m 1..64, v 1..4: accepted exactly when its rule holds, complete, "
    "deadlock-free, and within its memory bound",
    "[generators][sweep]") {
  std::size_t built = 0;
  for (const std::string_view family : family_names()) {
    for (std::int32_t p = 1; p <= 16; ++p) {
      for (std::int32_t m = 1; m <= 64; ++m) {
        for (std::int32_t v = 1; v <= 4; ++v) {
          const ScheduleRequest r = req(p, m, v);
          const bool rule = family == "looped-bfs"                                    ? true
                            : family == "zb-v" || family == "v-half" || family == "v-min" ? v == 2
                            : family == "dualpipev"                                   ? (v == 2 && m >= 2 * p)
                            : family == "interleaved-1f1b"                            ? (v == 1 || m % p == 0)
                            : family == "interleaved-zb" ? (v == 1 || pytorch_accepts_interleaved_zb(p, m))
                                                                                         : v == 1;
          if (accepts(family, r) != rule) FAIL(family << " accepts() wrong for " << to_string(r));
          if (!rule) {
            try {
              (void)make_schedule(family, r);
              FAIL(family << " built a schedule against its rule for " << to_string(r));
            } catch (const error& e) {
              const std::string what = e.what();
              if (what.find("nearest valid") == std::string::npos ||
                  what.find(std::string(family)) == std::string::npos)
                FAIL(family << " rejection without the rule and nearest values: " << what);
            }
            continue;
          }
          const Schedule s = make_schedule(family, r);
          ++built;
          const std::string problem = structure_problem(family, r, s);
          if (!problem.empty()) FAIL(family << ' ' << to_string(r) << ": " << problem);
          const DataflowRun run = run_dataflow(s, Costs{});
          if (!run.completed) FAIL(family << ' ' << to_string(r) << " deadlocks: " << run.stuck);

          const auto in_flight = peak_in_flight(s);
          const auto memory2 = twice_peak_memory(s);
          for (std::int32_t rank = 0; rank < p; ++rank) {
            const std::int32_t got = in_flight[static_cast<std::size_t>(rank)];
            std::int32_t want = -1;  // -1: no exact bound stated for this family
            if (family == "gpipe") want = m;
            if (family == "1f1b" || family == "zb-h1") want = std::min(p - rank, m);
            if (family == "zb-h2") want = std::min(2 * (p - rank) - 1, m);
            if (family == "looped-bfs") want = m * v;
            if (family == "interleaved-1f1b")
              want = v == 1 ? std::min(p - rank, m) : std::min(2 * (p - rank - 1) + (v - 1) * p + 1, m * v);
            // One warm-up forward per rank to go instead of interleaved 1F1B's two, rounds of
            // m / rounds micro-batches instead of p, plus the forward before the first BI.
            if (family == "interleaved-zb")
              want = v == 1 ? std::min(p - rank, m) : std::min((v - 1) * (m / pytorch_rounds(p, m)) + p - rank, m * v);
            if (family == "zb-v") {
              // Two half-size chunks: at most 2p chunk activations, 1F1B's p stages' worth.
              if (got > 2 * p || (m >= 2 * p - 1 && got != 2 * p))
                FAIL("zb-v " << to_string(r) << " rank " << rank << " holds " << got << " activations");
            }
            if (family == "forward-only") want = m;  // F only: nothing is ever released
            if (want >= 0 && got != want)
              FAIL(family << ' ' << to_string(r) << " rank " << rank << " holds " << got
                          << " activations, expected " << want);
            // ZB-H1 keeps 1F1B's peak memory p*M_B even with M_W = 0.5 pending after BI.
            if (family == "zb-h1" && memory2[static_cast<std::size_t>(rank)] > 2 * std::min(p, m))
              FAIL("zb-h1 " << to_string(r) << " rank " << rank << " peak memory "
                            << memory2[static_cast<std::size_t>(rank)] / 2.0);
          }
        }
      }
    }
  }
  // 1024 (p, m) pairs for each of the eight v-fixed families, 4096 for looped BFS, the
  // interleaved requests with v = 1 or m a multiple of p, the interleaved zero-bubble ones with
  // v = 1 or PyTorch's even rounds, and DualPipeV's with m >= 2p.
  std::size_t interleaved = 1024, interleaved_zb = 1024, dualpipev = 0;
  for (std::int32_t p = 1; p <= 16; ++p) interleaved += 3 * static_cast<std::size_t>(64 / p);
  for (std::int32_t p = 1; p <= 16; ++p)
    for (std::int32_t m = 1; m <= 64; ++m) interleaved_zb += pytorch_accepts_interleaved_zb(p, m) ? 3 : 0;
  for (std::int32_t p = 1; p <= 16; ++p) dualpipev += static_cast<std::size_t>(64 - 2 * p + 1);
  CHECK(built == 8 * 1024 + 4096 + interleaved + interleaved_zb + dualpipev);
}

// ------------------------------------------------------------------ bubbles

TEST_CASE("the bubbles agree exactly with the analytic formulas under uniform costs",
          "[generators][bubble]") {
  std::vector<Costs> costs;
  for (std::int64_t f = 1; f <= 3; ++f)
    for (std::int64_t bi = 1; bi <= 3; ++bi)
      for (std::int64_t bw = 1; bw <= 3; ++bw) costs.push_back({f, bi, bw});

  SECTION("GPipe and 1F1B: (p-1)(T_F+T_B) idle on every rank, for any m") {
    for (const std::string_view family : {"gpipe", "1f1b"})
      for (std::int32_t p = 1; p <= 8; ++p)
        for (std::int32_t m = 1; m <= 24; ++m) {
          const Schedule s = make_schedule(family, req(p, m));
          for (const Costs& c : costs) {
            const DataflowRun run = run_dataflow(s, c);
            for (std::size_t r = 0; r < static_cast<std::size_t>(p); ++r)
              if (run.idle(r) != (p - 1) * (c.f + c.b()))
                FAIL(family << ' ' << to_string(req(p, m)) << " rank " << r << " idle " << run.idle(r));
          }
        }
  }

  SECTION("interleaved 1F1B: (p-1)(T_F+T_B)/v idle on every rank (chunk costs T/v)") {
    for (std::int32_t p = 1; p <= 8; ++p)
      for (std::int32_t v = 2; v <= 4; ++v)
        for (std::int32_t m = p; m <= 24; m += p) {
          const Schedule s = make_interleaved_1f1b(req(p, m, v));
          for (const Costs& c : costs) {
            // c holds one chunk's costs, so a whole rank's T_F is v*c.f and the formula
            // (p-1)(v*c.f + v*c.b)/v is (p-1)(c.f + c.b).
            const DataflowRun run = run_dataflow(s, c);
            for (std::size_t r = 0; r < static_cast<std::size_t>(p); ++r)
              if (run.idle(r) != (p - 1) * (c.f + c.b()))
                FAIL("interleaved " << to_string(req(p, m, v)) << " rank " << r << " idle " << run.idle(r));
          }
        }
  }

  SECTION("looped BFS: (p-1)(T_F+T_B)/v idle on every rank when m >= p (chunk costs T/v)") {
    for (std::int32_t p = 1; p <= 8; ++p)
      for (std::int32_t v = 1; v <= 4; ++v)
        for (std::int32_t m = p; m <= 24; m += 3) {
          const Schedule s = make_looped_bfs(req(p, m, v));
          for (const Costs& c : costs) {
            const DataflowRun run = run_dataflow(s, c);
            for (std::size_t r = 0; r < static_cast<std::size_t>(p); ++r)
              if (run.idle(r) != (p - 1) * (c.f + c.b()))
                FAIL("looped-bfs " << to_string(req(p, m, v)) << " rank " << r << " idle " << run.idle(r));
          }
        }
  }

  SECTION("ZB-H1: (p-1)(T_F+T_BI-T_BW) idle on every rank when m >= p and T_BW <= T_F <= T_BI") {
    for (std::int32_t p = 1; p <= 8; ++p)
      for (std::int32_t m = p; m <= 24; ++m) {
        const Schedule s = make_zb_h1(req(p, m));
        for (const Costs& c : costs) {
          if (!(c.bw <= c.f && c.f <= c.bi)) continue;
          const DataflowRun run = run_dataflow(s, c);
          for (std::size_t r = 0; r < static_cast<std::size_t>(p); ++r)
            if (run.idle(r) != (p - 1) * (c.f + c.bi - c.bw))
              FAIL("zb-h1 " << to_string(req(p, m)) << " rank " << r << " idle " << run.idle(r));
        }
      }
  }

  SECTION(
      "interleaved zero bubble: (p-1)(T_F+T_BI-T_BW)/v idle on every rank when m >= p and T_BW <= T_F <= T_BI "
      "(chunk costs T/v)") {
    for (std::int32_t p = 1; p <= 8; ++p)
      for (std::int32_t v = 2; v <= 4; ++v)
        for (std::int32_t m = p; m <= 24; ++m) {
          if (!pytorch_accepts_interleaved_zb(p, m)) continue;
          const Schedule s = make_interleaved_zero_bubble(req(p, m, v));
          for (const Costs& c : costs) {
            if (!(c.bw <= c.f && c.f <= c.bi)) continue;
            const DataflowRun run = run_dataflow(s, c);
            for (std::size_t r = 0; r < static_cast<std::size_t>(p); ++r)
              if (run.idle(r) != (p - 1) * (c.f + c.bi - c.bw))
                FAIL("interleaved-zb " << to_string(req(p, m, v)) << " rank " << r << " idle " << run.idle(r));
          }
        }
  }

  SECTION(
      "ZB-H2: (p-1)(T_F+T_BI-2T_BW) idle in the span of the first (busiest) rank, and no more on any "
      "rank, when m >= 2p-1 and T_BW <= T_F <= T_BI") {
    for (std::int32_t p = 1; p <= 8; ++p)
      for (std::int32_t m = 2 * p - 1; m <= 24; ++m) {
        const Schedule s = make_zb_h2(req(p, m));
        for (const Costs& c : costs) {
          if (!(c.bw <= c.f && c.f <= c.bi)) continue;
          const DataflowRun run = run_dataflow(s, c);
          const std::int64_t want = (p - 1) * (c.f + c.bi - 2 * c.bw);
          if (run.idle_in_span(0) != want)
            FAIL("zb-h2 " << to_string(req(p, m)) << " rank 0 idle " << run.idle_in_span(0));
          for (std::size_t r = 1; r < static_cast<std::size_t>(p); ++r)
            if (run.idle_in_span(r) > want)
              FAIL("zb-h2 " << to_string(req(p, m)) << " rank " << r << " idle " << run.idle_in_span(r));
        }
      }
  }

  SECTION("ZB-H2 and ZB-V: no idle inside any rank's span when T_F = T_BI = T_BW and m >= 2p-1") {
    for (std::int32_t p = 1; p <= 8; ++p)
      for (std::int32_t m = 2 * p - 1; m <= 24; ++m)
        for (const Schedule& s : {make_zb_h2(req(p, m)), make_zb_v(req(p, m, 2))}) {
          const DataflowRun run = run_dataflow(s, Costs{2, 2, 2});
          for (std::size_t r = 0; r < static_cast<std::size_t>(p); ++r)
            if (run.idle_in_span(r) != 0)
              FAIL(s.name << ' ' << to_string(req(p, m)) << " rank " << r << " idle " << run.idle_in_span(r));
        }
  }

  SECTION("splitting the backward never makes ZB-H1 slower than 1F1B") {
    for (std::int32_t p = 1; p <= 8; ++p)
      for (std::int32_t m = 1; m <= 16; ++m)
        for (const Costs& c : costs)
          CHECK(run_dataflow(make_zb_h1(req(p, m)), c).makespan <=
                run_dataflow(make_1f1b(req(p, m)), c).makespan);
  }
}

// ------------------------------------------------------------------ through lower, validate, simulate

TEST_CASE(
    "every family through lower -> validate -> simulate: valid, deadlock-free, the dataflow model's "
    "makespan and peak memory",
    "[generators][pipeline]") {
  std::size_t checked = 0;
  for (const std::string_view family : family_names())
    for (std::int32_t p = 1; p <= 8; ++p)
      for (std::int32_t m = 1; m <= 16; ++m)
        for (std::int32_t v = 1; v <= 3; ++v) {
          const ScheduleRequest r = req(p, m, v);
          if (!accepts(family, r)) continue;
          const Schedule s = make_schedule(family, r);
          const ValidationReport compute_only = validate(s);
          if (!compute_only.ok()) FAIL(family << ' ' << to_string(r) << ":\n" << compute_only);
          const Schedule lowered = lower(s);
          const ValidationReport report = validate(lowered);
          if (!report.ok() || !report.deadlock_checked)
            FAIL(family << ' ' << to_string(r) << " lowered:\n" << report);
          const auto in_flight = peak_in_flight(s);
          for (std::size_t rank = 0; rank < in_flight.size(); ++rank)
            if (family != "forward-only" && report.memory[rank].peak_in_flight != in_flight[rank])
              FAIL(family << ' ' << to_string(r) << " rank " << rank << ": validator counts "
                          << report.memory[rank].peak_in_flight << " in flight, this test "
                          << in_flight[rank]);
          // Free communication on its own stream: lowering adds no bubble, so the simulator
          // reproduces the dependency-only run exactly.
          SimOptions options;
          options.record_timeline = false;
          const SimResult sim = simulate(s, uniform_costs(1, 1, 1), options);
          const DataflowRun run = run_dataflow(s, Costs{});
          if (sim.makespan != static_cast<double>(run.makespan))
            FAIL(family << ' ' << to_string(r) << " simulated makespan " << sim.makespan << ", dataflow "
                        << run.makespan);
          // With communication on the compute stream it must still finish (no deadlock).
          options.comm_on_compute_stream = true;
          CHECK(simulate(s, uniform_costs(1, 1, 1), options).makespan >= sim.makespan);
          ++checked;
        }
  CHECK(checked > 1000);
}

TEST_CASE("the simulator's idle time equals the analytic bubble of sim/analytic.hpp",
          "[generators][pipeline]") {
  SimOptions options;
  options.record_timeline = false;
  for (const std::string_view family :
       {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "interleaved-zb",
        "forward-only"})
    for (std::int32_t p = 1; p <= 6; ++p)
      for (std::int32_t m = p; m <= 3 * p; m += p)
        for (const Costs& c : {Costs{1, 1, 1}, Costs{2, 3, 1}, Costs{2, 2, 1}, Costs{3, 4, 2}}) {
          const std::int32_t v = family == "interleaved-1f1b" || family == "interleaved-zb" ? 2 : 1;
          const Schedule s = make_schedule(family, req(p, m, v));
          // A chunk costs T/v of a rank's T.
          const SimResult sim = simulate(
              s,
              uniform_costs(static_cast<double>(c.f), static_cast<double>(c.bi), static_cast<double>(c.bw)),
              options);
          const AnalyticBubble formula =
              analytic_bubble(family, p, m, v, static_cast<double>(v * c.f), static_cast<double>(v * c.bi),
                              static_cast<double>(v * c.bw));
          if (!formula.holds) continue;
          INFO(family << ' ' << to_string(req(p, m, v)) << " costs " << c.f << '/' << c.bi << '/' << c.bw);
          if (formula.measured_against == "span") {
            // ZB-H2: the formula is the first rank's; later ranks idle less within their span.
            CHECK(sim.ranks[0].idle_in_span == Approx(formula.idle_per_rank));
            for (const SimRankStats& rank : sim.ranks)
              CHECK(rank.idle_in_span <= formula.idle_per_rank + 1e-9);
          } else {
            for (const SimRankStats& rank : sim.ranks) CHECK(rank.idle == Approx(formula.idle_per_rank));
          }
        }
}

// ------------------------------------------------------------------ published shapes

TEST_CASE("1F1B, ZB-H1 and ZB-H2 match the zero-bubble paper's figures (p=4, m=8)", "[generators][paper]") {
  // Figures 2 and 3 of Qi et al. (ICLR 2024), micro-batches renumbered from 0.
  const Schedule one_f_one_b = make_1f1b(req(4, 8));
  CHECK(one_f_one_b.programs[0] == program_of(0, "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7"));
  CHECK(one_f_one_b.programs[3] == program_of(3, "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7"));

  const Schedule h1 = make_zb_h1(req(4, 8));
  CHECK(h1.programs[0] == program_of(0,
                                     "F0 F1 F2 F3 BI0 BW0 F4 BI1 BW1 F5 BI2 BW2 F6 BI3 BW3 F7 "
                                     "BI4 BW4 BI5 BW5 BI6 BW6 BI7 BW7"));
  CHECK(h1.programs[3] == program_of(3,
                                     "F0 BI0 F1 BI1 F2 BI2 F3 BI3 BW0 F4 BI4 BW1 F5 BI5 BW2 F6 BI6 BW3 F7 "
                                     "BI7 BW4 BW5 BW6 BW7"));

  const Schedule h2 = make_zb_h2(req(4, 8));
  CHECK(h2.programs[0] == program_of(0,
                                     "F0 F1 F2 F3 F4 F5 F6 BI0 BW0 F7 BI1 BW1 BI2 BW2 BI3 BW3 "
                                     "BI4 BW4 BI5 BW5 BI6 BW6 BI7 BW7"));
  CHECK(h2.programs[3] == program_of(3,
                                     "F0 BI0 F1 BI1 F2 BI2 F3 BI3 F4 BI4 F5 BI5 F6 BI6 BW0 F7 BI7 "
                                     "BW1 BW2 BW3 BW4 BW5 BW6 BW7"));
}

TEST_CASE("interleaved 1F1B follows Megatron's schedule table and warm-up", "[generators][megatron]") {
  // Megatron's get_schedule_table with microbatch_group_size_per_vp_stage = p: for each group
  // of p micro-batches, every chunk in turn runs the whole group.
  const std::int32_t p = 2, m = 4, v = 2;
  const Schedule s = make_interleaved_1f1b(req(p, m, v));
  // Forward order on rank r: (mb, chunk) = (0,0)(1,0)(0,1)(1,1)(2,0)(3,0)(2,1)(3,1). Warm-up
  // of rank 0 is 2(p-1) + (v-1)p = 4 forwards, of rank 1 (v-1)p = 2.
  const auto stage = [&](std::int32_t chunk, std::int32_t rank) { return chunk * p + rank; };
  const std::vector<Action> rank0 = {
      act(Op::F, stage(0, 0), 0), act(Op::F, stage(0, 0), 1), act(Op::F, stage(1, 0), 0),
      act(Op::F, stage(1, 0), 1), act(Op::F, stage(0, 0), 2), act(Op::B, stage(1, 0), 0),
      act(Op::F, stage(0, 0), 3), act(Op::B, stage(1, 0), 1), act(Op::F, stage(1, 0), 2),
      act(Op::B, stage(0, 0), 0), act(Op::F, stage(1, 0), 3), act(Op::B, stage(0, 0), 1),
      act(Op::B, stage(1, 0), 2), act(Op::B, stage(1, 0), 3), act(Op::B, stage(0, 0), 2),
      act(Op::B, stage(0, 0), 3)};
  CHECK(s.programs[0] == rank0);
  const std::vector<Action> rank1 = {
      act(Op::F, stage(0, 1), 0), act(Op::F, stage(0, 1), 1), act(Op::F, stage(1, 1), 0),
      act(Op::B, stage(1, 1), 0), act(Op::F, stage(1, 1), 1), act(Op::B, stage(1, 1), 1),
      act(Op::F, stage(0, 1), 2), act(Op::B, stage(0, 1), 0), act(Op::F, stage(0, 1), 3),
      act(Op::B, stage(0, 1), 1), act(Op::F, stage(1, 1), 2), act(Op::B, stage(1, 1), 2),
      act(Op::F, stage(1, 1), 3), act(Op::B, stage(1, 1), 3), act(Op::B, stage(0, 1), 2),
      act(Op::B, stage(0, 1), 3)};
  CHECK(s.programs[1] == rank1);
  // v = 1 is plain 1F1B on the same placement.
  CHECK(make_interleaved_1f1b(req(4, 6, 1)).programs == make_1f1b(req(4, 6)).programs);
}

TEST_CASE("ZB-V follows the paper's V schedule (as PyTorch's ScheduleZBVZeroBubble orders it)",
          "[generators][zbv]") {
  // p = 2, m = 3 = 2p-1, rank 0 holds stages 0 and 3, rank 1 stages 1 and 2. Derived by hand
  // from the published steps: rank 0 warms up with 3 forwards of chunk 0, then runs chunk 1's
  // F/BI/BW twice (the last stage needs nothing from below), then one steady round, then
  // chunk 0's remaining BI/BW pairs.
  const Schedule s = make_zb_v(req(2, 3, 2));
  const std::vector<Action> rank0 = {
      act(Op::F, 0, 0),  act(Op::F, 0, 1),  act(Op::F, 0, 2),  act(Op::F, 3, 0),  act(Op::BI, 3, 0),
      act(Op::BW, 3, 0), act(Op::F, 3, 1),  act(Op::BI, 3, 1), act(Op::BW, 3, 1), act(Op::BI, 0, 0),
      act(Op::BW, 0, 0), act(Op::F, 3, 2),  act(Op::BI, 3, 2), act(Op::BW, 3, 2), act(Op::BI, 0, 1),
      act(Op::BW, 0, 1), act(Op::BI, 0, 2), act(Op::BW, 0, 2)};
  CHECK(s.programs[0] == rank0);
  const std::vector<Action> rank1 = {
      act(Op::F, 1, 0),  act(Op::F, 2, 0),  act(Op::F, 1, 1),  act(Op::F, 2, 1),  act(Op::BI, 2, 0),
      act(Op::BW, 2, 0), act(Op::F, 1, 2),  act(Op::BI, 1, 0), act(Op::BW, 1, 0), act(Op::F, 2, 2),
      act(Op::BI, 2, 1), act(Op::BW, 2, 1), act(Op::BI, 1, 1), act(Op::BI, 2, 2), act(Op::BI, 1, 2),
      act(Op::BW, 1, 1), act(Op::BW, 2, 2), act(Op::BW, 1, 2)};
  CHECK(s.programs[1] == rank1);
}

// ------------------------------------------------------------------ interleaved zero bubble

namespace {

// PyTorch's ScheduleInterleavedZeroBubble._calculate_single_rank_operations with
// _get_1f1b_rank_ops(enable_zero_bubble=True), restated step by step: warm-up steps run a
// forward, 1F1B steps a forward then a BI, cool-down steps a BI; a step's stage comes from
// its index, its micro-batch from a counter per stage; after the BI of step s, once
// s - warmup >= rank, the W of the oldest backward step without one. PyTorch's idle padding
// (None) is left out.
[[nodiscard]] std::vector<Action> pytorch_interleaved_zb_order(std::int32_t p, std::int32_t m, std::int32_t v,
                                                               std::int32_t rank) {
  const std::int32_t per_round = m / pytorch_rounds(p, m);
  const std::int32_t microbatch_ops = v * m;
  const std::int32_t warmup = std::min((v - 1) * per_round + (p - 1 - rank), microbatch_ops);
  const std::int32_t fwd_bwd = microbatch_ops - warmup;
  const std::int32_t cooldown = microbatch_ops - fwd_bwd;
  const auto forward_stage = [&](std::int32_t step) { return ((step / per_round) % v) * p + rank; };
  const auto backward_stage = [&](std::int32_t step) {
    return (v - 1 - ((step - warmup) / per_round) % v) * p + rank;
  };
  std::map<std::int32_t, std::int32_t> next_f, next_i, next_w;
  std::vector<std::int32_t> backward_steps;
  std::size_t weights = 0;
  std::vector<Action> out;
  const auto weight = [&] {
    const std::int32_t stage = backward_stage(backward_steps[weights++]);
    out.push_back(act(Op::BW, stage, next_w[stage]++));
  };
  for (std::int32_t step = 0; step < warmup + fwd_bwd + cooldown; ++step) {
    if (step < warmup + fwd_bwd) {
      const std::int32_t stage = forward_stage(step);
      out.push_back(act(Op::F, stage, next_f[stage]++));
    }
    if (step >= warmup) {
      const std::int32_t stage = backward_stage(step);
      out.push_back(act(Op::BI, stage, next_i[stage]++));
      backward_steps.push_back(step);
      if (step - warmup >= rank) weight();
    }
  }
  while (weights < backward_steps.size()) weight();
  return out;
}

}  // namespace

TEST_CASE("interleaved zero bubble: PyTorch's ScheduleInterleavedZeroBubble order, rule and alias",
          "[generators][interleaved-zb]") {
  // p = 2, m = 2, v = 2 by hand: one round of 2; rank 1 (stages 1, 3) warms up with
  // (v-1)*2 + 0 forwards, rank 0 (stages 0, 2) with one more; rank 1's W trails its BI by one.
  const Schedule small = make_interleaved_zero_bubble(req(2, 2, 2));
  CHECK(small.placement == std::vector<std::int32_t>{0, 1, 0, 1});
  CHECK(small.split_backward);
  CHECK(small.programs[0] == std::vector<Action>{act(Op::F, 0, 0), act(Op::F, 0, 1), act(Op::F, 2, 0),
                                                 act(Op::F, 2, 1), act(Op::BI, 2, 0), act(Op::BW, 2, 0),
                                                 act(Op::BI, 2, 1), act(Op::BW, 2, 1), act(Op::BI, 0, 0),
                                                 act(Op::BW, 0, 0), act(Op::BI, 0, 1), act(Op::BW, 0, 1)});
  CHECK(small.programs[1] == std::vector<Action>{act(Op::F, 1, 0), act(Op::F, 1, 1), act(Op::F, 3, 0),
                                                 act(Op::BI, 3, 0), act(Op::F, 3, 1), act(Op::BI, 3, 1),
                                                 act(Op::BW, 3, 0), act(Op::BI, 1, 0), act(Op::BW, 3, 1),
                                                 act(Op::BI, 1, 1), act(Op::BW, 1, 0), act(Op::BW, 1, 1)});

  // Every request PyTorch accepts, rounds of p and of other sizes (p=4, m=10: two rounds of 5).
  std::size_t compared = 0;
  for (std::int32_t p = 1; p <= 8; ++p)
    for (std::int32_t v = 1; v <= 4; ++v)
      for (std::int32_t m = 1; m <= 32; ++m) {
        if (!pytorch_accepts_interleaved_zb(p, m)) continue;
        const Schedule s = make_schedule("InterleavedZeroBubble", req(p, m, v));
        for (std::int32_t rank = 0; rank < p; ++rank)
          if (s.programs[static_cast<std::size_t>(rank)] != pytorch_interleaved_zb_order(p, m, v, rank))
            FAIL(to_string(req(p, m, v)) << " rank " << rank << " differs from PyTorch's order");
        ++compared;
      }
  CHECK(compared > 500);

  // One chunk per rank is ZB-H1's order, for any m.
  for (std::int32_t p = 1; p <= 8; ++p)
    for (std::int32_t m = 1; m <= 20; ++m)
      CHECK(make_interleaved_zero_bubble(req(p, m, 1)).programs == make_zb_h1(req(p, m)).programs);

  // PyTorch's rule: max(1, m / p) equal rounds. p=4, m=9 has two rounds of 4.5.
  using Catch::Matchers::Contains;
  CHECK(accepts("interleaved-zb", req(4, 10, 2)));
  CHECK(accepts("interleaved-zb", req(4, 3, 2)));
  CHECK_FALSE(accepts("interleaved-zb", req(4, 9, 2)));
  CHECK(accepts("interleaved-zb", req(4, 9, 1)));
  CHECK_THROWS_WITH(make_interleaved_zero_bubble(req(4, 9, 2)),
                    Contains("schedule 'interleaved-zb'") && Contains("got m=9") &&
                        Contains("nearest valid: m=8 or m=10"));
  CHECK(family_info("interleaved_zb").placement == PlacementKind::looped);
  CHECK(family_info("interleaved-zb").split_backward);
}

TEST_CASE(
    "interleaved zero bubble over p 2..8, v 2..4: valid and deadlock-free once lowered, and faster than "
    "ZB-H1 and interleaved 1F1B at unit costs",
    "[generators][interleaved-zb]") {
  std::size_t checked = 0, pytorch_accepted = 0;
  for (std::int32_t p = 2; p <= 8; ++p)
    for (std::int32_t v = 2; v <= 4; ++v)
      for (std::int32_t m = 1; m <= 3 * p; ++m) {
        const ScheduleRequest r = req(p, m, v);
        pytorch_accepted += pytorch_accepts_interleaved_zb(p, m) ? 1 : 0;
        if (!accepts("interleaved-zb", r)) continue;
        const Schedule s = make_schedule("interleaved-zb", r);
        const ValidationReport compute_only = validate(s);
        if (!compute_only.ok()) FAIL(to_string(r) << ":\n" << compute_only);
        const ValidationReport lowered = validate(lower(s));
        if (!lowered.ok() || !lowered.deadlock_checked) FAIL(to_string(r) << " lowered:\n" << lowered);
        ++checked;
      }
  CHECK(checked == pytorch_accepted);

  // The issue's comparison: F = BI = BW = 1 per rank (B = 2, split 1 + 1), a chunk costing 1/v
  // of it. ZB-H1 idles (p-1)(T_F+T_BI-T_BW) = p-1 per rank, interleaved 1F1B (p-1)(T_F+T_B)/v,
  // interleaved zero bubble (p-1)(T_F+T_BI-T_BW)/v: 55 and 58.5 against 51.5 at v = 2.
  const std::int32_t p = 8, m = 16;
  SimOptions options;
  options.record_timeline = false;
  const auto makespan = [&](std::string_view family, std::int32_t v) {
    const double chunk = 1.0 / v;
    return simulate(make_schedule(family, req(p, m, v)), uniform_costs(chunk, chunk, chunk), options).makespan;
  };
  const double zb_h1 = makespan("zb-h1", 1);
  CHECK(zb_h1 == Approx(3 * m + (p - 1)));
  for (std::int32_t v = 2; v <= 4; ++v) {
    INFO("v=" << v);
    const double interleaved_zb = makespan("interleaved-zb", v);
    const double interleaved_1f1b = makespan("interleaved-1f1b", v);
    CHECK(interleaved_zb == Approx(3 * m + (p - 1) / static_cast<double>(v)));
    CHECK(interleaved_zb < zb_h1);
    CHECK(interleaved_zb < interleaved_1f1b);
  }
}

TEST_CASE("small cases: m < p and a single rank", "[generators]") {
  // One micro-batch through four stages: a chain, nothing to overlap.
  for (const std::string_view family : {"gpipe", "1f1b", "zb-h1", "zb-h2"}) {
    const Schedule s = make_schedule(family, req(4, 1));
    for (std::int32_t r = 0; r < 4; ++r) {
      const auto& program = s.programs[static_cast<std::size_t>(r)];
      REQUIRE(!program.empty());
      CHECK(program.front() == act(Op::F, r, 0));
    }
    const DataflowRun run = run_dataflow(s, Costs{});
    CHECK(run.completed);
    // The critical path is the whole chain: 4 forwards, 4 backward-for-inputs, one BW.
    CHECK(run.makespan == (s.split_backward ? 4 + 4 + 1 : 4 + 4 * 2));
  }
  // p = 1: every family is a sequential loop over micro-batches with no idle time.
  for (const std::string_view family : family_names()) {
    const std::int32_t v = accepts(family, req(1, 5, 1)) ? 1 : 2;
    const Schedule s = make_schedule(family, req(1, 5, v));
    const DataflowRun run = run_dataflow(s, Costs{});
    REQUIRE(run.completed);
    CHECK(run.idle(0) == 0);
  }
}

// ------------------------------------------------------------------ names and errors

TEST_CASE("family names: canonical list, lookup and aliases", "[generators][names]") {
  const std::vector<std::string_view> names(family_names().begin(), family_names().end());
  CHECK(names == std::vector<std::string_view>{"gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "zb-h1", "zb-h2",
                                               "interleaved-zb", "zb-v", "v-half", "v-min", "dualpipev",
                                               "forward-only"});
  for (const FamilyInfo& f : schedule_families) {
    CHECK(family_info(f.name).name == f.name);
    CHECK_FALSE(f.rule.empty());
    CHECK_FALSE(f.summary.empty());
  }
  // PyTorch's class names (without "Schedule") and other spellings find the same family.
  CHECK(family_info("GPipe").name == "gpipe");
  CHECK(family_info("1F1B").name == "1f1b");
  CHECK(family_info("Interleaved1F1B").name == "interleaved-1f1b");
  CHECK(family_info("LoopedBFS").name == "looped-bfs");
  CHECK(family_info("ZBVZeroBubble").name == "zb-v");
  CHECK(family_info("InterleavedZeroBubble").name == "interleaved-zb");  // ScheduleInterleavedZeroBubble
  CHECK(family_info("DualPipeV").name == "dualpipev");  // PyTorch's ScheduleDualPipeV
  CHECK(family_info("ZB_H2").name == "zb-h2");
  CHECK(make_schedule("ZB-H1", req(3, 4)) == make_zb_h1(req(3, 4)));
}

TEST_CASE("invalid requests are errors that state the rule and the nearest valid values",
          "[generators][errors]") {
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(
      make_schedule("2f2b", req(2, 2)),
      Contains("unknown family '2f2b'") && Contains("gpipe, 1f1b, interleaved-1f1b, looped-bfs, zb-h1, "
                                                    "zb-h2, interleaved-zb, zb-v, v-half, v-min, dualpipev, "
                                                    "forward-only"));
  CHECK_THROWS_WITH(make_interleaved_1f1b(req(4, 6, 2)),
                    Contains("schedule 'interleaved-1f1b'") &&
                        Contains("m must be a multiple of p=4 (got m=6)") &&
                        Contains("nearest valid: m=4 or m=8"));
  CHECK_THROWS_WITH(make_interleaved_1f1b(req(4, 3, 2)), Contains("nearest valid: m=4") && Contains("v=1"));
  CHECK_THROWS_WITH(make_1f1b(req(4, 8, 2)), Contains("schedule '1f1b'") &&
                                                 Contains("v must be 1 (got v=2)") &&
                                                 Contains("interleaved-1f1b"));
  CHECK_THROWS_WITH(make_zb_v(req(4, 8, 1)),
                    Contains("v must be 2 (got v=1)") && Contains("nearest valid: v=2"));
  CHECK_THROWS_WITH(make_gpipe(req(0, 8)), Contains("p must be at least 1 (got p=0)"));
  CHECK_THROWS_WITH(make_looped_bfs(req(2, -1, 2)), Contains("m must be at least 1 (got m=-1)"));
  CHECK_THROWS_WITH(make_looped_bfs(req(2, 4, 0)), Contains("v must be at least 1 (got v=0)"));
  CHECK_THROWS_WITH(make_looped_bfs(req(4096, 4096, 4096)), Contains("more than the") && Contains("fewer"));
  CHECK_FALSE(accepts("looped-bfs", req(4096, 4096, 4096)));
  // 3pvm past int64 at the int32 limits: refused, not wrapped to a small count and allocated.
  constexpr std::int32_t most = 2147483647;
  CHECK_THROWS_WITH(make_looped_bfs(req(most, most, most)), Contains("more than the"));
  CHECK_THROWS_WITH(make_1f1b(req(most, most)), Contains("more than the"));
  CHECK_FALSE(accepts("looped-bfs", req(most, most, most)));
  CHECK_FALSE(accepts("no-such-family", req(2, 2)));
  CHECK_THROWS_AS(family_info(""), error);
}

// ------------------------------------------------------------------ CSV

TEST_CASE("CSV round trip: every family, compute-only, reads back exactly", "[csv]") {
  for (const std::string_view family : family_names())
    for (const ScheduleRequest r :
         {req(1, 1, 1), req(1, 3, 2), req(2, 4, 2), req(4, 8, 2), req(3, 7, 3), req(4, 8, 1)}) {
      if (!accepts(family, r)) continue;
      const Schedule s = make_schedule(family, r);
      const std::string text = to_pytorch_csv(s);
      CsvReadOptions options;
      options.name = s.name;
      const Schedule back = from_pytorch_csv(text, options);
      if (!(back == s)) FAIL(family << ' ' << to_string(r) << " did not round trip:\n" << text);
      // With the placement given explicitly too.
      options.placement = s.placement;
      CHECK(from_pytorch_csv(text, options) == s);
    }
}

TEST_CASE("CSV writes PyTorch's spelling: one row per rank, I and W for the split backward", "[csv]") {
  const Schedule s = make_zb_h1(req(2, 2));
  CHECK(to_pytorch_csv(s) == "0F0,0F1,0I0,0W0,0I1,0W1\r\n1F0,1I0,1F1,1I1,1W0,1W1\r\n");
  CsvWriteOptions unix_lines;
  unix_lines.line_end = "\n";
  CHECK(to_pytorch_csv(make_gpipe(req(2, 1)), unix_lines) == "0F0,0B0\n1F0,1B0\n");
  CHECK(csv_cell(act(Op::SEND_F, 2, 3)) == "2SEND_F3");
  CHECK(csv_cell(act(Op::RECV_B, 1, 0, 7)) == "1RECV_B0#7");
  CHECK(csv_cell(act(Op::RECV_B, 1, 0, 7), false) == "1RECV_B0");
  Schedule broken = make_gpipe(req(2, 1));
  broken.programs[1][1].microbatch = -1;
  CHECK_THROWS_WITH(to_pytorch_csv(broken), Catch::Matchers::Contains("rank 1, action 1"));
}

TEST_CASE("CSV with communication and groups round trips exactly", "[csv]") {
  // 1F1B on two ranks with one micro-batch, lowered by hand, sends and receives grouped.
  Schedule s;
  s.name = "hand";
  s.ranks = 2;
  s.microbatches = 1;
  s.placement = {0, 1};
  s.programs = {{act(Op::F, 0, 0), act(Op::SEND_F, 0, 0, 1), act(Op::RECV_B, 0, 0, 2), act(Op::B, 0, 0)},
                {act(Op::RECV_F, 1, 0, 1), act(Op::F, 1, 0), act(Op::B, 1, 0), act(Op::SEND_B, 1, 0, 2)}};
  // With PyTorch's bookkeeping (the default for a schedule with communication): the forward
  // send's wait after that micro-batch's backward, the backward send's at the end of the row,
  // and each stage's REDUCE_GRAD and its wait after its last backward (m = 1).
  const std::string text = to_pytorch_csv(s);
  CHECK(text ==
        "0F0,0SEND_F0#1,0RECV_B0#2,0B0,0WAIT_SEND_F0,0REDUCE_GRAD,0WAIT_REDUCE_GRAD\r\n"
        "1RECV_F0#1,1F0,1B0,1REDUCE_GRAD,1WAIT_REDUCE_GRAD,1SEND_B0#2,1WAIT_SEND_B0\r\n");
  CsvReadOptions options;
  options.name = "hand";
  CHECK(from_pytorch_csv(text, options) == s);
  CsvWriteOptions bare;
  bare.pytorch_bookkeeping = false;
  CHECK(to_pytorch_csv(s, bare) == "0F0,0SEND_F0#1,0RECV_B0#2,0B0\r\n1RECV_F0#1,1F0,1B0,1SEND_B0#2\r\n");
  CHECK(from_pytorch_csv(to_pytorch_csv(s, bare), options) == s);
  options.skip_pytorch_only_actions = false;
  CHECK_THROWS_WITH(from_pytorch_csv(text, options), Catch::Matchers::Contains("'0WAIT_SEND_F0' is PyTorch's WAIT_SEND_F"));
  options.skip_pytorch_only_actions = true;
  // Without groups the cells are plain PyTorch; reading gives the same actions, ungrouped.
  CsvWriteOptions plain;
  plain.write_groups = false;
  Schedule ungrouped = s;
  for (auto& program : ungrouped.programs)
    for (auto& a : program) a.group = 0;
  CHECK(from_pytorch_csv(to_pytorch_csv(s, plain), options) == ungrouped);
}

TEST_CASE("parse_pytorch_action reads one action string as the CSV reader reads its cell", "[csv]") {
  using Catch::Matchers::Contains;
  CHECK(parse_pytorch_action("0F3") == std::vector<Action>{{Op::F, 0, 3}});
  CHECK(parse_pytorch_action(" 1I2 ") == std::vector<Action>{{Op::BI, 1, 2}});
  CHECK(parse_pytorch_action("1BW2") == std::vector<Action>{{Op::BW, 1, 2}});
  CHECK(parse_pytorch_action("2SEND_F3#7") == std::vector<Action>{{Op::SEND_F, 2, 3, 7}});
  CHECK(parse_pytorch_action("1R0") == std::vector<Action>{{Op::R, 1, 0}});
  // An overlapped pair: its two compute actions share group 1, or the group written after it.
  CHECK(parse_pytorch_action("(0F7;7B3)OVERLAP_F_B") == std::vector<Action>{{Op::F, 0, 7, 1}, {Op::B, 7, 3, 1}});
  CHECK(parse_pytorch_action("(0F7;7B3)OVERLAP_F_B#5") == std::vector<Action>{{Op::F, 0, 7, 5}, {Op::B, 7, 3, 5}});
  // The same as the reader gives for the cell alone in its row, for every cell a writer makes.
  for (const std::string_view family : family_names()) {
    if (!accepts(family, req(2, 4, 2))) continue;
    const Schedule s = lower(make_schedule(family, req(2, 4, 2))).release();
    for (const auto& program : s.programs) {
      for (const Action& a : program) {
        if (is_compute(a.op) && a.group != 0) continue;  // pairs: above
        CHECK(parse_pytorch_action(csv_cell(a)) == std::vector<Action>{a});
      }
    }
  }
  // What it refuses, naming the string: PyTorch's bookkeeping, typos, a group on a non-pair;
  // a large stage number allocates nothing.
  CHECK_THROWS_WITH(parse_pytorch_action("0WAIT_SEND_F1"), Contains("action string '0WAIT_SEND_F1'") && Contains("WAIT_SEND_F"));
  CHECK_THROWS_WITH(parse_pytorch_action("3REDUCE_GRAD"), Contains("REDUCE_GRAD"));
  CHECK_THROWS_WITH(parse_pytorch_action(""), Contains("is empty"));
  CHECK_THROWS_WITH(parse_pytorch_action("0F1,1F1"), Contains("comma"));
  CHECK_THROWS_WITH(parse_pytorch_action("(0F1;0SEND_F1)OVERLAP_F_B#2"), Contains("not a pair"));
  CHECK_THROWS_WITH(parse_pytorch_action("(0F1;1B1)OVERLAP"), Contains("OVERLAP_F_B"));
  CHECK_THROWS_WITH(parse_pytorch_action("()OVERLAP_F_B"), Contains("holds no action"));
  CHECK_THROWS_AS(parse_pytorch_action("0X1"), ppsched::error);
  CHECK(parse_pytorch_action("(2147483647F0;0B0)OVERLAP_F_B").front().stage == 2147483647);
}

TEST_CASE("CSV reads what PyTorch writes", "[csv]") {
  CsvReadOptions options;
  SECTION("ScheduleLoopedBFS(p=2, two stages per rank, m=2), compute-only with idle steps") {
    // PyTorch's _calculate_single_rank_operations: rank r pads r idle steps, runs the forwards
    // of its stages, pads 2(p-1-r) idle steps, then the backwards in reverse.
    options.name = "looped-bfs";
    const Schedule s = from_pytorch_csv(
        "0F0,0F1,2F0,2F1,,,2B1,2B0,0B1,0B0\r\n,1F0,1F1,3F0,3F1,3B1,3B0,1B1,1B0\r\n", options);
    CHECK(s == make_looped_bfs(req(2, 2, 2)));
  }
  SECTION(
      "rows with REDUCE_GRAD after a stage's last backward (PyTorch's _add_reduce_grad), Unix line ends, "
      "spaces") {
    options.name = "gpipe";
    const std::string text = "0F0, 0F1,0B0,0B1,0REDUCE_GRAD\n1F0,1F1,1B0,1B1 ,1REDUCE_GRAD\n";
    CHECK(from_pytorch_csv(text, options) == make_gpipe(req(2, 2)));
    options.skip_pytorch_only_actions = false;
    CHECK_THROWS_WITH(from_pytorch_csv(text, options),
                      Catch::Matchers::Contains("'0REDUCE_GRAD' is PyTorch's REDUCE_GRAD") &&
                          Catch::Matchers::Contains("row 1 (rank 0), column 5"));
  }
  SECTION("ppsched's BI/BW spelling, quoted cells, no final line end") {
    const Schedule s = from_pytorch_csv("\"0F0\",0BI0,0BW0", options);
    CHECK(s.split_backward);
    CHECK(s.programs[0] == std::vector<Action>{act(Op::F, 0, 0), act(Op::BI, 0, 0), act(Op::BW, 0, 0)});
  }
  SECTION("OVERLAP_F_B cells become overlapped pairs; UNSHARD/RESHARD are skipped") {
    const Schedule s = from_pytorch_csv("0UNSHARD,0F0,(0F1;0B0)OVERLAP_F_B,0B1,0RESHARD\r\n", options);
    CHECK(s.programs[0] == std::vector<Action>{act(Op::F, 0, 0), Action{Op::F, 0, 1, 1}, Action{Op::B, 0, 0, 1},
                                               act(Op::B, 0, 1)});
    CHECK(to_pytorch_csv(s) == "0F0,(0F1;0B0)OVERLAP_F_B,0B1\r\n");
    // A pair's id moves above an id another cell of the row names; anything but two compute
    // sub-actions is read in order, ungrouped.
    const Schedule t = from_pytorch_csv("(0F1;1B0)OVERLAP_F_B,0SEND_F1#1,(0F2;0SEND_F2)OVERLAP_F_B\r\n", options);
    CHECK(t.programs[0] == std::vector<Action>{Action{Op::F, 0, 1, 2}, Action{Op::B, 1, 0, 2},
                                               Action{Op::SEND_F, 0, 1, 1}, act(Op::F, 0, 2), act(Op::SEND_F, 0, 2)});
    CHECK(to_pytorch_csv(t) == "(0F1;1B0)OVERLAP_F_B#2,0SEND_F1#1,0F2,0SEND_F2,0WAIT_SEND_F1,0WAIT_SEND_F2\r\n");
  }
  SECTION("a pair id that counting would not give is written after OVERLAP_F_B and read back exactly") {
    // The fuzzer's case: two forwards sharing id 2 (a malformed pair validate() names); then a
    // user's numbering; then an id a third action of the row shares.
    for (const std::vector<Action>& program :
         {std::vector<Action>{Action{Op::F, 0, 0, 2}, Action{Op::F, 0, 5, 2}},
          std::vector<Action>{Action{Op::F, 0, 1, 7}, Action{Op::B, 0, 0, 7}, Action{Op::F, 0, 2, 1},
                              Action{Op::B, 0, 1, 1}},
          std::vector<Action>{Action{Op::F, 0, 0, 1}, Action{Op::B, 0, 0, 1}, Action{Op::F, 0, 1, 1}}}) {
      Schedule u;
      u.ranks = 1;
      u.microbatches = 6;
      u.placement = {0};
      u.programs = {program};
      const std::string text = to_pytorch_csv(u);
      INFO(text);
      CHECK(text.find("OVERLAP_F_B#") != std::string::npos);
      CHECK(from_pytorch_csv(text, options).programs == u.programs);
      // Without ids the pairs are still pairs, numbered by counting.
      CsvWriteOptions plain;
      plain.write_groups = false;
      CHECK(to_pytorch_csv(u, plain).find('#') == std::string::npos);
    }
  }
  SECTION("a rank with no actions is an empty row") {
    const Schedule s = from_pytorch_csv("0F0\r\n\r\n", [] {
      CsvReadOptions o;
      o.placement = {0};
      return o;
    }());
    CHECK(s.ranks == 2);
    CHECK(s.programs[1].empty());
  }
}

TEST_CASE("CSV rejects typos and inconsistent placement with file, row, column and the grammar", "[csv]") {
  using Catch::Matchers::Contains;
  CsvReadOptions options;
  options.source = "plan.csv";
  const auto grammar = Contains("<stage><op><micro-batch>");
  CHECK_THROWS_WITH(from_pytorch_csv("0F0,OF1\r\n", options),
                    Contains("schedule CSV 'plan.csv'") && Contains("cannot read cell 'OF1'") &&
                        Contains("row 1 (rank 0), column 2") && grammar);
  CHECK_THROWS_WITH(
      from_pytorch_csv("0F0\r\n1F0,1X0\r\n", options),
      Contains("'X0' does not start with an operation") && Contains("row 2 (rank 1), column 2"));
  CHECK_THROWS_WITH(from_pytorch_csv("0F\r\n", options), Contains("needs a micro-batch number") && grammar);
  CHECK_THROWS_WITH(from_pytorch_csv("0F0x\r\n", options), Contains("unexpected 'x' after the micro-batch"));
  CHECK(from_pytorch_csv("0F0#2\r\n", options).programs[0].front().group == 2);  // validate() names a lone one
  CHECK_THROWS_WITH(from_pytorch_csv("0SEND_F0#\r\n", options), Contains("followed by a group number"));
  CHECK_THROWS_WITH(from_pytorch_csv("99999999999F0\r\n", options),
                    Contains("stage '99999999999' is too large"));
  CHECK_THROWS_WITH(from_pytorch_csv("0F0,\"1F0\r\n", options), Contains("never closed"));
  CHECK_THROWS_WITH(from_pytorch_csv("(0F0;0B0)OVERLAP\r\n", options), Contains("OVERLAP_F_B"));
  for (const char* bad_suffix : {"(0F0;0B0)OVERLAP_F_B#\r\n", "(0F0;0B0)OVERLAP_F_B#0\r\n",
                                 "(0F0;0B0)OVERLAP_F_Bx\r\n", "(0F0;0B0)OVERLAP_F_B#3x\r\n"})
    CHECK_THROWS_WITH(from_pytorch_csv(bad_suffix, options), Contains("only #<group> may follow"));
  CHECK_THROWS_WITH(from_pytorch_csv("(0F0;0SEND_F0)OVERLAP_F_B#3\r\n", options),
                    Contains("gives a group to what is not a pair"));
  CHECK_THROWS_WITH(from_pytorch_csv("", options), Contains("the CSV has no rows"));
  CHECK_THROWS_WITH(from_pytorch_csv(",,\r\n0UNSHARD\r\n", options), Contains("no row holds an action"));
  // Placement: a stage on two rows, a stage on no row, a stage against the given placement.
  CHECK_THROWS_WITH(from_pytorch_csv("0F0,1F0\r\n1B0\r\n", options),
                    Contains("stage 1 appears on rank 0 (row 1 (rank 0), column 2) and on rank 1") &&
                        Contains("CsvReadOptions::placement"));
  CHECK_THROWS_WITH(from_pytorch_csv("0F0,2F0,0B0\r\n", options), Contains("stage 1 appears on no row"));
  CHECK_THROWS_WITH(from_pytorch_csv("0F0,5000F0\r\n", options), Contains("names stage 5000"));
  options.placement = {1, 0};
  CHECK_THROWS_WITH(from_pytorch_csv("0F0\r\n1F0\r\n", options),
                    Contains("is on rank 0 but the placement puts stage 0 on rank 1"));
  options.placement = {0};
  CHECK_THROWS_WITH(from_pytorch_csv("0F0,1F0\r\n", options),
                    Contains("which the placement (stages 0..0) does not cover"));
  options.placement.clear();
  options.microbatches = 2;
  CHECK_THROWS_WITH(from_pytorch_csv("0F0,0F2\r\n", options),
                    Contains("micro-batch 2 but the schedule has 2"));
  options.microbatches = 4;
  CHECK(from_pytorch_csv("0F0,0F2\r\n", options).microbatches == 4);
}

TEST_CASE("CSV files: save and load", "[csv]") {
  const auto dir = std::filesystem::temp_directory_path() / "ppsched_test_schedule_csv";
  std::filesystem::create_directories(dir);
  const auto path = dir / "zb-v.csv";
  const Schedule s = make_zb_v(req(3, 6, 2));
  save_pytorch_csv(path, s);
  const Schedule back = load_pytorch_csv(path);
  CHECK(back.name == "zb-v");  // the file's stem
  CHECK(back == s);
  std::filesystem::remove_all(dir);
  CHECK_THROWS_WITH(load_pytorch_csv(dir / "missing.csv"), Catch::Matchers::Contains("cannot open the file"));
}

// ------------------------------------------------------------------ the gallery's example

TEST_CASE("docs/schedules.md example: generate, check the rule, round trip through PyTorch's CSV",
          "[example]") {
  // example-begin schedules
  const ScheduleRequest request{.ranks = 4, .microbatches = 8, .chunks = 2};
  if (!accepts("interleaved-1f1b", request)) return;  // or let make_schedule throw the rule
  const Schedule s = make_schedule("interleaved-1f1b", request);

  const std::string csv = to_pytorch_csv(s);  // PyTorch's _load_csv reads this
  CsvReadOptions read;
  read.name = s.name;  // the CSV carries no name
  const Schedule back = from_pytorch_csv(csv, read);
  // example-end schedules
  CHECK(back == s);
  CHECK(s.stages() == 8);
}

TEST_CASE("reading OVERLAP_F_B pairs is linear in the row: a million pairs, ids as before", "[csv][issue24]") {
  // Issue 24, item 7g: every pair numbered by count scanned the whole row for another cell
  // with its id, so n pairs cost n^2 (80k pairs 16 s, a million over an hour: the suite's
  // 600 s limit ends this case before the fix). The ids must stay as they were: pair k gets
  // k, except one whose id another cell of the row names, which moves above every id.
  constexpr std::int32_t n = 1'000'000;
  std::string text;
  text.reserve(static_cast<std::size_t>(n) * 26 + 64);
  for (std::int32_t k = 0; k < n; ++k) {
    text += "(0F" + std::to_string(k + 1) + ";1B" + std::to_string(k) + ")OVERLAP_F_B,";
  }
  text += "0SEND_F1#2,(0F0;1B" + std::to_string(n) + ")OVERLAP_F_B#7\r\n";  // names ids 2 and 7
  CsvReadOptions options;
  options.placement = {0, 0};
  const Schedule s = from_pytorch_csv(text, options);
  REQUIRE(s.programs.size() == 1);
  const std::vector<Action>& row = s.programs[0];
  REQUIRE(row.size() == 2 * static_cast<std::size_t>(n) + 3);
  std::size_t wrong = 0;
  for (std::int32_t k = 0; k < n; ++k) {
    const auto at = 2 * static_cast<std::size_t>(k);
    // ids 2 and 7 are named by other cells: those pairs move above the n + 1 pairs' ids, to
    // n + 2 and n + 3, in order.
    const std::uint32_t expected = k + 1 == 2 ? n + 2 : k + 1 == 7 ? n + 3 : static_cast<std::uint32_t>(k + 1);
    if (row[at].group != expected || row[at + 1].group != expected) ++wrong;
  }
  CHECK(wrong == 0);
  CHECK(row[2 * n].group == 2);      // 0SEND_F1#2 keeps its id
  CHECK(row[2 * n + 1].group == 7);  // the pair with #7 keeps its id
  CHECK(row[2 * n + 2].group == 7);
}
