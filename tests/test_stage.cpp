// The stage interface beyond the float spans: the StageContext every callable may take, the
// around_call wrapper, the two callable forms of a StageCallable slot, the lifetime rules of
// the spans a callable gets (docs/runtime.md), forward-only steps that return losses and
// outputs, and gradient accumulation's memory.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <mutex>
#include <ppsched/backend/cpu.hpp>
#include <ppsched/lower/lower.hpp>
#include <ppsched/runtime/world.hpp>
#include <ppsched/schedule/generators.hpp>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "training_families.hpp"

using ppsched::CpuBackend;
using ppsched::CpuCluster;
using ppsched::StageCall;
using ppsched::StageContext;
using ppsched::StageFunctions;
using ppsched::World;

namespace {

using ppsched_test::backends;
using ppsched_test::Family;
using ppsched_test::make;
const std::vector<Family> families = ppsched_test::training_families();

// One call as a callable saw it.
struct Seen {
  StageContext context;
  std::thread::id thread;
  bool inside_around = false;
};

thread_local int around_depth = 0;

// Stages that add 1 and pass gradients through, recording the context of every call; the
// context form throughout.
struct Recorder {
  std::mutex mutex;
  std::vector<Seen> calls;
  int arounds = 0;

  void note(const StageContext& c) {
    const std::lock_guard<std::mutex> lock(mutex);
    calls.push_back({c, std::this_thread::get_id(), around_depth > 0});
  }

  std::vector<StageFunctions> functions(int stages, bool with_around) {
    std::vector<StageFunctions> out;
    for (int s = 0; s < stages; ++s) {
      StageFunctions f;
      f.input_size = f.output_size = 2;
      f.target_size = s + 1 == stages ? 2 : 0;
      f.weight_grad_size = 1;
      f.forward = [this](const StageContext& c, std::span<const float> in, std::span<float> o) {
        note(c);
        for (std::size_t i = 0; i < o.size(); ++i) o[i] = in[i] + 1.0f;
      };
      f.backward_input = [this](const StageContext& c, std::span<const float>, std::span<const float> g,
                                std::span<float> gi) {
        note(c);
        std::copy_n(g.begin(), gi.size(), gi.begin());  // gi is empty on stage 0
      };
      f.backward_weight = [this](const StageContext& c, std::span<const float>, std::span<const float> g,
                                 std::span<float> w) {
        note(c);
        w[0] = g[0];
      };
      if (s + 1 == stages) {
        f.loss = [this](const StageContext& c, std::span<const float> o, std::span<const float> t,
                        std::span<float> g) {
          note(c);
          for (std::size_t i = 0; i < o.size(); ++i) g[i] = o[i] - t[i];
          return 0.0f;
        };
      }
      f.optimizer_step = [this](const StageContext& c, std::span<const float>) { note(c); };
      if (with_around) {
        f.around_call = [this](const StageContext&, ppsched::StageCallRef call) {
          {
            const std::lock_guard<std::mutex> lock(mutex);
            ++arounds;
          }
          ++around_depth;
          call();
          --around_depth;
        };
      }
      out.push_back(std::move(f));
    }
    return out;
  }
};

}  // namespace

TEST_CASE("every callable gets its step, micro-batch, stage, rank, stream, stop token and seed", "[stage]") {
  for (const Family& fam : families) {
    const ppsched::Schedule s = make(fam, 2, 4);
    const int m = s.microbatches;
    CpuCluster cluster(s.ranks);
    Recorder rec;
    ppsched::ExecutorOptions eo;
    eo.seed = 1234;
    World<CpuBackend> world(backends(cluster), s, rec.functions(s.stages(), true), eo);
    const std::vector<float> inputs(static_cast<std::size_t>(m) * 2, 0.5f);
    const std::vector<float> targets(static_cast<std::size_t>(m) * 2, 0.0f);
    for (int step = 0; step < 2; ++step) (void)world.run_step({inputs, targets});
    INFO(fam.name);

    // Each (step, stage, micro-batch) is called for forward, loss (last stage), backward_input
    // and backward_weight once; each (step, stage) for optimizer_step once.
    std::map<std::tuple<std::int64_t, int, int, StageCall>, int> count;
    std::map<int, const void*> stream_of_rank;
    std::map<int, std::set<std::thread::id>> threads_of_rank;
    for (const Seen& c : rec.calls) {
      const StageContext& x = c.context;
      ++count[{x.step, x.stage, x.microbatch, x.call}];
      CHECK(x.rank == s.rank_of(x.stage));
      CHECK(x.seed == ppsched::stage_seed(1234, x.step, x.stage, x.microbatch));
      CHECK_FALSE(x.stop.stop_requested());
      CHECK(x.stream != nullptr);
      CHECK(c.inside_around);
      auto [it, fresh] = stream_of_rank.emplace(x.rank, x.stream);
      CHECK(it->second == x.stream);
      (void)fresh;
      threads_of_rank[x.rank].insert(c.thread);
    }
    CHECK(rec.arounds == static_cast<int>(rec.calls.size()));
    REQUIRE(stream_of_rank.size() == 2);
    CHECK(stream_of_rank[0] != stream_of_rank[1]);
    for (std::int64_t step = 0; step < 2; ++step) {
      for (int st = 0; st < s.stages(); ++st) {
        for (int mb = 0; mb < m; ++mb) {
          CHECK(count[{step, st, mb, StageCall::forward}] == 1);
          CHECK(count[{step, st, mb, StageCall::backward_input}] == 1);
          CHECK(count[{step, st, mb, StageCall::backward_weight}] == 1);
          CHECK(count[{step, st, mb, StageCall::loss}] == (st + 1 == s.stages() ? 1 : 0));
        }
        CHECK(count[{step, st, -1, StageCall::optimizer_step}] == 1);
      }
    }
  }
}

TEST_CASE("seeds differ between steps, stages and micro-batches and with the user's seed", "[stage]") {
  std::set<std::uint64_t> seeds;
  for (std::uint64_t user : {0u, 1u}) {
    for (std::int64_t step = 0; step < 3; ++step) {
      for (int stage = 0; stage < 4; ++stage) {
        for (int mb = -1; mb < 8; ++mb) seeds.insert(ppsched::stage_seed(user, step, stage, mb));
      }
    }
  }
  CHECK(seeds.size() == 2u * 3u * 4u * 9u);
  static_assert(ppsched::stage_seed(7, 1, 2, 3) == ppsched::stage_seed(7, 1, 2, 3));
}

TEST_CASE("a slot takes the index form or the context form and is called either way", "[stage]") {
  StageFunctions f;
  CHECK_FALSE(f.forward);
  CHECK(f.forward == nullptr);
  int got = -2;
  f.forward = [&got](std::int32_t mb, std::span<const float>, std::span<float>) { got = mb; };
  CHECK(f.forward);
  StageContext c;
  c.microbatch = 5;
  f.forward(c, {}, {});
  CHECK(got == 5);
  f.forward(3, {}, {});
  CHECK(got == 3);
  f.forward = [&got](const StageContext& x, std::span<const float>, std::span<float>) { got = 100 + x.microbatch; };
  f.forward(4, {}, {});
  CHECK(got == 104);
  // A generic lambda keeps the index form it had before contexts existed.
  f.forward = [&got](auto mb, auto, auto) { got = static_cast<int>(mb) + 200; };
  f.forward(c, {}, {});
  CHECK(got == 205);
  // An empty std::function stays empty; optimizer_step has a form without an index.
  f.forward = std::function<void(std::int32_t, std::span<const float>, std::span<float>)>();
  CHECK_FALSE(f.forward);
  f.optimizer_step = [&got](std::span<const float> g) { got = static_cast<int>(g.size()); };
  const float g[3] = {};
  f.optimizer_step(std::span<const float>(g));
  CHECK(got == 3);
  f.optimizer_step = nullptr;
  CHECK_FALSE(f.optimizer_step);
}

TEST_CASE("an around_call that does not run its call, or runs it twice, fails the step by name", "[stage]") {
  const ppsched::Schedule s = make({"1f1b", 1}, 2, 2);
  for (int runs : {0, 2}) {
    CpuCluster cluster(2);
    Recorder rec;
    auto fns = rec.functions(s.stages(), false);
    fns[1].around_call = [runs](const StageContext&, ppsched::StageCallRef call) {
      for (int k = 0; k < runs; ++k) call();
    };
    World<CpuBackend> world(backends(cluster), s, fns);
    const std::vector<float> data(4, 0.0f);
    try {
      (void)world.run_step({data, data});
      FAIL("expected an error");
    } catch (const ppsched::error& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK(what.find("around_call") != std::string::npos);
      CHECK(what.find(runs == 0 ? "without running" : "twice") != std::string::npos);
      CHECK(what.find("stage 1") != std::string::npos);
    }
  }
}

namespace {

// Stage s adds s + 1; the loss is the sum of the output minus the target (small integers:
// every float sum is exact, so the test derives each expected value).
std::vector<StageFunctions> adding_stages(int stages, std::size_t width) {
  std::vector<StageFunctions> out;
  for (int s = 0; s < stages; ++s) {
    StageFunctions f;
    f.input_size = f.output_size = width;
    f.target_size = s + 1 == stages ? width : 0;
    f.weight_grad_size = 3;
    const auto add = static_cast<float>(s + 1);
    f.forward = [add](std::int32_t, std::span<const float> in, std::span<float> o) {
      for (std::size_t i = 0; i < o.size(); ++i) o[i] = in[i] + add;
    };
    f.backward = [](std::int32_t mb, std::span<const float>, std::span<const float> g, std::span<float> gi,
                    std::span<float> w) {
      std::copy_n(g.begin(), gi.size(), gi.begin());
      for (std::size_t k = 0; k < w.size(); ++k) w[k] = static_cast<float>(mb + 1) * g[0];
    };
    f.backward_input = [](std::int32_t, std::span<const float>, std::span<const float> g, std::span<float> gi) {
      std::copy_n(g.begin(), gi.size(), gi.begin());
    };
    f.backward_weight = [](std::int32_t mb, std::span<const float>, std::span<const float> g, std::span<float> w) {
      for (std::size_t k = 0; k < w.size(); ++k) w[k] = static_cast<float>(mb + 1) * g[0];
    };
    if (s + 1 == stages) {
      f.loss = [](std::int32_t, std::span<const float> o, std::span<const float> t, std::span<float> g) {
        float l = 0.0f;
        for (std::size_t i = 0; i < o.size(); ++i) {
          l += o[i] - t[i];
          g[i] = 1.0f;
        }
        return l;
      };
    }
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace

TEST_CASE("a forward-only step returns the losses and, when asked, the last stage's outputs", "[stage]") {
  ppsched::ScheduleRequest req;
  req.ranks = 3;
  req.microbatches = 4;
  const ppsched::Schedule s = ppsched::make_schedule("forward-only", req);
  const std::size_t width = 2;
  const int m = 4;
  CpuCluster cluster(3);
  ppsched::ExecutorOptions eo;
  eo.keep_outputs = true;
  World<CpuBackend> world(backends(cluster), s, adding_stages(3, width), eo);
  std::vector<float> inputs;
  std::vector<float> targets;
  for (int mb = 0; mb < m; ++mb) {
    for (std::size_t i = 0; i < width; ++i) {
      inputs.push_back(static_cast<float>(10 * mb + static_cast<int>(i)));
      targets.push_back(static_cast<float>(mb));
    }
  }
  const float added = 1.0f + 2.0f + 3.0f;
  for (int step = 0; step < 2; ++step) {
    const auto& r = world.run_step({inputs, targets});
    REQUIRE(r.losses.size() == static_cast<std::size_t>(m));
    REQUIRE(r.outputs.size() == inputs.size());
    for (int mb = 0; mb < m; ++mb) {
      float want = 0.0f;
      for (std::size_t i = 0; i < width; ++i) want += inputs[mb * width + i] + added - targets[mb * width + i];
      CHECK(r.losses[static_cast<std::size_t>(mb)] == want);
    }
    for (std::size_t k = 0; k < inputs.size(); ++k) CHECK(r.outputs[k] == inputs[k] + added);
  }
  // Without targets: outputs, and no losses (NaN, not last step's).
  const auto& r = world.run_step({inputs, {}});
  for (float l : r.losses) CHECK(std::isnan(l));
  for (std::size_t k = 0; k < inputs.size(); ++k) CHECK(r.outputs[k] == inputs[k] + added);
  // Targets of the wrong size are refused, naming the fix.
  const std::vector<float> short_targets(3, 0.0f);
  try {
    (void)world.run_step({inputs, short_targets});
    FAIL("expected an error");
  } catch (const ppsched::error& e) {
    CHECK(std::string(e.what()).find("or none") != std::string::npos);
  }
}

TEST_CASE("keep_outputs in a training step gives the forward outputs beside the losses", "[stage]") {
  for (const Family& fam : families) {
    const ppsched::Schedule s = make(fam, 2, 4);
    CpuCluster cluster(2);
    ppsched::ExecutorOptions eo;
    eo.keep_outputs = true;
    World<CpuBackend> world(backends(cluster), s, adding_stages(s.stages(), 2), eo);
    std::vector<float> inputs(8);
    for (std::size_t k = 0; k < inputs.size(); ++k) inputs[k] = static_cast<float>(k);
    const std::vector<float> targets(8, 0.0f);
    const auto& r = world.run_step({inputs, targets});
    const float added = static_cast<float>(s.stages() * (s.stages() + 1) / 2);
    INFO(fam.name);
    REQUIRE(r.outputs.size() == inputs.size());
    for (std::size_t k = 0; k < inputs.size(); ++k) CHECK(r.outputs[k] == inputs[k] + added);
    for (int mb = 0; mb < 4; ++mb) {
      CHECK(r.losses[static_cast<std::size_t>(mb)] == inputs[2 * mb] + inputs[2 * mb + 1] + 2 * added);
    }
  }
}

namespace {

// The slots micro-batch-order accumulation needs for stage `s` on its rank, derived from the
// program: while the weight gradient of micro-batch k runs, it holds one slot, plus one for
// each micro-batch already done whose predecessors are not all done.
int slots_needed(const ppsched::Schedule& lowered, int s) {
  const auto& prog = lowered.programs[static_cast<std::size_t>(lowered.rank_of(s))];
  std::vector<bool> done(static_cast<std::size_t>(lowered.microbatches), false);
  int most = 0;
  int count = 0;
  for (const auto& a : prog) {
    if (a.stage != s || (a.op != ppsched::Op::B && a.op != ppsched::Op::BW)) continue;
    int prefix = 0;
    while (prefix < lowered.microbatches && done[static_cast<std::size_t>(prefix)]) ++prefix;
    most = std::max(most, count - prefix + 1);
    done[static_cast<std::size_t>(a.microbatch)] = true;
    ++count;
  }
  return most;
}

}  // namespace

TEST_CASE("micro-batch-order accumulation holds a gradient only while an earlier one is missing", "[stage]") {
  for (const Family& fam : families) {
    const ppsched::Schedule s = ppsched::lower(make(fam, 4, 8));
    const auto fns = adding_stages(s.stages(), 2);
    CpuCluster cluster(4);
    bool in_order = true;
    for (int r = 0; r < 4; ++r) {
      std::size_t want = 0;
      for (int st = 0; st < s.stages(); ++st) {
        if (s.rank_of(st) != r) continue;
        const int slots = slots_needed(s, st);
        in_order = in_order && slots == 1;
        want += 3u * static_cast<std::size_t>(slots + 1);  // the slots and the total
      }
      ppsched::Executor<CpuBackend> exact(cluster.rank(r), s, fns);
      ppsched::ExecutorOptions eo;
      eo.accumulation = ppsched::GradAccumulation::schedule_order;
      ppsched::Executor<CpuBackend> cheap(cluster.rank(r), s, fns, eo);
      INFO(fam.name << " rank " << r);
      CHECK(exact.gradient_floats() == want);
      CHECK(cheap.gradient_floats() <= exact.gradient_floats());
      // Before, micro-batch order kept all m gradients and the total.
      CHECK(exact.gradient_floats() <= cheap.gradient_floats() / 2 * 9);
    }
    INFO(fam.name);
    // Every family but looped BFS runs each stage's weight gradients in micro-batch order,
    // and then the exact mode costs what schedule order does: 2 gradients per stage.
    CHECK(in_order == (std::string(fam.name) != "looped-bfs"));
  }
}

namespace {

// Checks the lifetime rules of docs/runtime.md from inside the callables: the forward's
// input is the same memory, with the same content, in every backward call of that
// micro-batch on that stage; BW gets BI's grad_output again; each stage reads what the
// previous one wrote. Values differ per stage and micro-batch, so a buffer reused too early
// shows up as a changed content.
struct LifetimeChecker {
  struct Kept {
    const float* data = nullptr;
    std::vector<float> content;
  };
  std::mutex mutex;
  std::map<std::pair<int, int>, Kept> inputs, outputs, grads;  // (stage, mb)
  int violations = 0;
  int checks = 0;

  void keep(std::map<std::pair<int, int>, Kept>& where, int s, int mb, std::span<const float> x) {
    const std::lock_guard<std::mutex> lock(mutex);
    where[{s, mb}] = {x.data(), std::vector<float>(x.begin(), x.end())};
  }
  void same(std::map<std::pair<int, int>, Kept>& where, int s, int mb, std::span<const float> x, bool memory) {
    const std::lock_guard<std::mutex> lock(mutex);
    ++checks;
    const auto it = where.find({s, mb});
    if (it == where.end() || (memory && it->second.data != x.data()) ||
        !std::equal(x.begin(), x.end(), it->second.content.begin(), it->second.content.end())) {
      ++violations;
    }
  }

  std::vector<StageFunctions> functions(int stages) {
    std::vector<StageFunctions> out;
    for (int s = 0; s < stages; ++s) {
      StageFunctions f;
      f.input_size = f.output_size = 3;
      f.target_size = s + 1 == stages ? 3 : 0;
      f.forward = [this, s](const StageContext& c, std::span<const float> in, std::span<float> o) {
        keep(inputs, s, c.microbatch, in);
        if (s > 0) same(outputs, s - 1, c.microbatch, in, false);
        for (std::size_t i = 0; i < o.size(); ++i) o[i] = in[i] * 3.0f + static_cast<float>(s);
        keep(outputs, s, c.microbatch, o);
      };
      f.backward_input = [this, s](const StageContext& c, std::span<const float> in, std::span<const float> g,
                                   std::span<float> gi) {
        same(inputs, s, c.microbatch, in, true);
        keep(grads, s, c.microbatch, g);
        for (std::size_t i = 0; i < gi.size(); ++i) gi[i] = g[i] * 2.0f + static_cast<float>(s);
      };
      f.backward_weight = [this, s](const StageContext& c, std::span<const float> in, std::span<const float> g,
                                    std::span<float>) {
        same(inputs, s, c.microbatch, in, true);
        same(grads, s, c.microbatch, g, true);
      };
      if (s + 1 == stages) {
        f.loss = [this, s](const StageContext& c, std::span<const float> o, std::span<const float>,
                           std::span<float> g) {
          same(outputs, s, c.microbatch, o, false);
          for (std::size_t i = 0; i < g.size(); ++i) g[i] = o[i] + static_cast<float>(c.microbatch);
          return 0.0f;
        };
      }
      out.push_back(std::move(f));
    }
    return out;
  }
};

}  // namespace

TEST_CASE("inputs live until the micro-batch's last backward, grad_output until its BW", "[stage]") {
  const auto mode = GENERATE(ppsched::CpuMode::threaded, ppsched::CpuMode::deterministic);
  for (const Family& fam : families) {
    for (int p : {2, 4}) {
      const ppsched::Schedule s = make(fam, p, 2 * p);
      const int m = s.microbatches;
      ppsched::CpuOptions co;
      co.mode = mode;
      CpuCluster cluster(p, co);
      LifetimeChecker checker;
      World<CpuBackend> world(backends(cluster), s, checker.functions(s.stages()));
      std::vector<float> inputs(static_cast<std::size_t>(m) * 3);
      for (std::size_t k = 0; k < inputs.size(); ++k) inputs[k] = static_cast<float>(k);
      const std::vector<float> targets(inputs.size(), 0.0f);
      (void)world.run_step({inputs, targets});
      INFO(fam.name << " p=" << p);
      CHECK(checker.violations == 0);
      // Every F but stage 0's, every loss, every BI and BW checked something.
      CHECK(checker.checks == m * ((s.stages() - 1) + 1 + 2 * s.stages() + s.stages()));
      // Stage 0's input is the batch itself, not a copy.
      for (int mb = 0; mb < m; ++mb) CHECK(checker.inputs[{0, mb}].data == inputs.data() + 3 * mb);
    }
  }
}

namespace {

// Stages whose weight gradient per micro-batch is a float sum sensitive to order; the
// parameter tied between `tied` stages is `count` floats at a per-stage offset.
struct TiedModel {
  std::mutex mutex;
  std::vector<std::vector<float>> applied;

  static float part(int s, int mb, std::size_t k) {
    return 0.1f * static_cast<float>(s + 1) + 0.01f * static_cast<float>(mb * 7 + static_cast<int>(k)) / 3.0f;
  }

  std::vector<StageFunctions> functions(int stages, std::size_t size) {
    applied.assign(static_cast<std::size_t>(stages), {});
    std::vector<StageFunctions> out;
    for (int s = 0; s < stages; ++s) {
      StageFunctions f;
      f.input_size = f.output_size = 1;
      f.target_size = s + 1 == stages ? 1 : 0;
      f.weight_grad_size = size + static_cast<std::size_t>(s % 2);  // stages differ in size
      f.forward = [](std::int32_t, std::span<const float> in, std::span<float> o) { o[0] = in[0]; };
      f.backward_input = [](std::int32_t, std::span<const float>, std::span<const float> g, std::span<float> gi) {
        if (!gi.empty()) gi[0] = g[0];
      };
      f.backward_weight = [s](std::int32_t mb, std::span<const float>, std::span<const float>, std::span<float> w) {
        for (std::size_t k = 0; k < w.size(); ++k) w[k] = part(s, mb, k);
      };
      if (s + 1 == stages) {
        f.loss = [](std::int32_t, std::span<const float>, std::span<const float>, std::span<float> g) {
          g[0] = 1.0f;
          return 0.0f;
        };
      }
      f.optimizer_step = [this, s](std::span<const float> total) {
        const std::lock_guard<std::mutex> lock(mutex);
        applied[static_cast<std::size_t>(s)].assign(total.begin(), total.end());
      };
      out.push_back(std::move(f));
    }
    return out;
  }
};

}  // namespace

TEST_CASE("tied weights: the shared gradient is summed across stages before every optimizer_step", "[stage]") {
  const std::size_t size = 5;
  const std::size_t count = 3;
  for (const Family& fam : families) {
    for (int p : {2, 4}) {
      const ppsched::Schedule s = make(fam, p, 2 * p);
      const int stages = s.stages();
      const int m = s.microbatches;
      // The first and the last stage share a parameter (the embedding and the output
      // projection), and so do stages 1 and 2 at other offsets.
      ppsched::ExecutorOptions eo;
      eo.tied_weights.push_back({{stages - 1, 0}, {2, 1}, count});
      const bool two_groups = stages >= 4;
      if (two_groups) eo.tied_weights.push_back({{1, 2}, {0, 2}, 2});
      // Three copies, listed out of order: the sum is taken in stage order (with two, the
      // order cannot change a float sum).
      if (two_groups) eo.tied_weights.push_back({{3, 1, 2}, {0, 4, 0}, 1});
      CpuCluster cluster(p);
      TiedModel model;
      World<CpuBackend> world(backends(cluster), s, model.functions(stages, size), eo);
      const std::vector<float> data(static_cast<std::size_t>(m), 1.0f);
      (void)world.run_step({data, data});

      // Unpipelined: each stage's gradient summed over micro-batches in order, then the
      // shared slices summed in stage order and written back to each copy.
      std::vector<std::vector<float>> want(static_cast<std::size_t>(stages));
      for (int st = 0; st < stages; ++st) {
        auto& w = want[static_cast<std::size_t>(st)];
        w.assign(size + static_cast<std::size_t>(st % 2), 0.0f);
        for (int mb = 0; mb < m; ++mb) {
          for (std::size_t k = 0; k < w.size(); ++k) w[k] += TiedModel::part(st, mb, k);
        }
      }
      auto tie = [&](std::vector<std::pair<int, std::size_t>> copies, std::size_t n) {
        std::sort(copies.begin(), copies.end());
        for (std::size_t k = 0; k < n; ++k) {
          float sum = 0.0f;
          for (auto [st, off] : copies) sum += want[static_cast<std::size_t>(st)][off + k];
          for (auto [st, off] : copies) want[static_cast<std::size_t>(st)][off + k] = sum;
        }
      };
      tie({{stages - 1, 2}, {0, 1}}, count);
      if (two_groups) tie({{1, 0}, {2, 2}}, 2);
      if (two_groups) tie({{3, 0}, {1, 4}, {2, 0}}, 1);
      INFO(fam.name << " p=" << p);
      for (int st = 0; st < stages; ++st) CHECK(model.applied[static_cast<std::size_t>(st)] == want[static_cast<std::size_t>(st)]);
    }
  }
}

TEST_CASE("a tied group naming an unknown stage, or a slice outside the gradient, is refused", "[stage]") {
  const ppsched::Schedule s = make({"1f1b", 1}, 2, 2);
  CpuCluster cluster(2);
  TiedModel model;
  auto fns = model.functions(2, 4);
  auto refused = [&](ppsched::TiedWeights t, const char* part) {
    ppsched::ExecutorOptions eo;
    eo.tied_weights.push_back(std::move(t));
    try {
      World<CpuBackend> w(backends(cluster), s, fns, eo);
      FAIL("expected an error");
    } catch (const ppsched::error& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(part) != std::string::npos);
      CHECK(std::string(e.what()).find("tied_weights[0]") != std::string::npos);
    }
  };
  refused({{0, 7}, {0, 0}, 1}, "names stage 7, which does not exist");
  refused({{0, 0}, {0, 0}, 1}, "names stage 0 twice");
  refused({{0, 1}, {0, 4}, 2}, "does not fit its weight_grad_size");
  refused({{0}, {0}, 1}, "at least two stages");
}

TEST_CASE("an error thrown by the loss names the loss, not only the action it runs in", "[stage][issue24]") {
  // Issue 24, item 8: a throwing loss was reported as "action B0@s1: ...", as if the
  // backward had thrown.
  for (const bool training : {true, false}) {
    INFO((training ? "training" : "forward-only"));
    const ppsched::Schedule s = training ? make({"1f1b", 1}, 2, 2) : ppsched::make_schedule("forward-only", {2, 2, 1});
    CpuCluster cluster(2);
    Recorder rec;
    auto fns = rec.functions(s.stages(), false);
    fns[1].loss = [](const StageContext&, std::span<const float>, std::span<const float>, std::span<float>) -> float {
      throw std::runtime_error("labels out of range");
    };
    World<CpuBackend> world(backends(cluster), s, fns);
    const std::vector<float> data(4, 0.0f);
    try {
      (void)world.run_step({data, data});
      FAIL("expected an error");
    } catch (const ppsched::error& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK(what.find(training ? "action B0@s1 (in the loss, StageFunctions::loss): labels out of range" :
                                 "action F0@s1 (in the loss, StageFunctions::loss): labels out of range") !=
            std::string::npos);
    }
    // A throw from the backward itself is not blamed on the loss.
    if (!training) continue;
    fns = rec.functions(s.stages(), false);
    fns[1].backward_input = [](const StageContext&, std::span<const float>, std::span<const float>, std::span<float>) {
      throw std::runtime_error("bad gradient");
    };
    World<CpuBackend> again(backends(cluster), s, fns);
    try {
      (void)again.run_step({data, data});
      FAIL("expected an error");
    } catch (const ppsched::error& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK(what.find("action B0@s1: bad gradient") != std::string::npos);
      CHECK(what.find("loss") == std::string::npos);
    }
  }
}
