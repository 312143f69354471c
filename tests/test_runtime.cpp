// The executor and the World on the CPU backend: the plan's buffers and waits, data flowing
// through every schedule family on 2 and 4 ranks (threaded and deterministic, checking on),
// the measured timeline, no allocation in steady state, a throwing callable at every action,
// the watchdog on a deadlocking schedule, no thread left behind, and overlapped F&B pairs
// (grouped compute actions) run as their two actions in order.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <thread>
#include <cstdlib>
#include <map>
#include <new>
#include <ppsched/backend/cpu.hpp>
#include <ppsched/runtime/executor.hpp>
#include <ppsched/runtime/step_plan.hpp>
#include <ppsched/runtime/synthetic.hpp>
#include <ppsched/runtime/threads.hpp>
#include <ppsched/runtime/world.hpp>
#include <ppsched/schedule/generators.hpp>
#include <ppsched/lower/lower.hpp>
#include <ppsched/validate/validate.hpp>
#include <ppsched/sim/simulate.hpp>
#include <ppsched/trace/compare.hpp>
#include <stdexcept>
#include <string>
#include <vector>

// ------------------------------------------------------------------ allocation counting
// Every allocation of the process is counted while `counting` is on (tests/counting_new.hpp;
// no other translation unit of this executable replaces operator new).
#include "counting_new.hpp"

using namespace std::chrono_literals;
using ppsched::Action;
using ppsched::Batch;
using ppsched::CpuBackend;
using ppsched::CpuCluster;
using ppsched::CpuMode;
using ppsched::CpuOptions;
using ppsched::ExecutorOptions;
using ppsched::Op;
using ppsched::Schedule;
using ppsched::StageFunctions;
using ppsched::World;

namespace {

std::vector<CpuBackend*> backends(CpuCluster& c) {
  std::vector<CpuBackend*> out;
  for (int r = 0; r < c.ranks(); ++r) out.push_back(&c.rank(r));
  return out;
}

struct Family {
  const char* name;
  int chunks;  // virtual stages per rank
};
constexpr Family families[] = {{"gpipe", 1}, {"1f1b", 1}, {"interleaved-1f1b", 2}, {"looped-bfs", 2}, {"zb-h1", 1},
                               {"zb-h2", 1}, {"zb-v", 2}, {"v-half", 2}, {"v-min", 2}, {"dualpipev", 2}};

Schedule make(const Family& f, int p, int m) {
  ppsched::ScheduleRequest req;
  req.ranks = p;
  req.microbatches = m;
  req.chunks = f.chunks;
  return ppsched::lower(ppsched::make_schedule(f.name, req));
}

// Stages whose arithmetic the test can predict exactly: stage s adds s + 1 to each element;
// the loss is half the squared distance to the target; backward passes the gradient through
// and the weight gradient of a micro-batch is the sum of its output gradient, so the total
// over a step is known in closed form. Small integers keep every float sum exact.
struct CheckedModel {
  int stages = 0;
  std::size_t width = 3;
  std::vector<std::vector<float>> applied;  // per stage: the totals given to optimizer_step
  std::vector<float> last_outputs;

  std::vector<StageFunctions> functions(bool split) {
    applied.assign(static_cast<std::size_t>(stages), {});
    std::vector<StageFunctions> out;
    for (int s = 0; s < stages; ++s) {
      StageFunctions f;
      f.input_size = width;
      f.output_size = width;
      f.target_size = s + 1 == stages ? width : 0;
      f.weight_grad_size = 1;
      const float add = static_cast<float>(s + 1);
      f.forward = [add](std::int32_t, std::span<const float> in, std::span<float> o) {
        for (std::size_t i = 0; i < o.size(); ++i) o[i] = in[i] + add;
      };
      auto pass = [](std::span<const float> g, std::span<float> gi) {
        for (std::size_t i = 0; i < gi.size(); ++i) gi[i] = g[i];
      };
      auto weight = [](std::span<const float> g, std::span<float> w) {
        float sum = 0.0f;
        for (float x : g) sum += x;
        w[0] = sum;
      };
      if (split) {
        f.backward_input = [pass](std::int32_t, std::span<const float>, std::span<const float> g, std::span<float> gi) {
          pass(g, gi);
        };
        f.backward_weight = [weight](std::int32_t, std::span<const float>, std::span<const float> g,
                                     std::span<float> w) { weight(g, w); };
      } else {
        f.backward = [pass, weight](std::int32_t, std::span<const float>, std::span<const float> g, std::span<float> gi,
                                    std::span<float> w) {
          pass(g, gi);
          weight(g, w);
        };
      }
      if (s + 1 == stages) {
        f.loss = [](std::int32_t, std::span<const float> o, std::span<const float> t, std::span<float> g) {
          float l = 0.0f;
          for (std::size_t i = 0; i < o.size(); ++i) {
            g[i] = o[i] - t[i];
            l += 0.5f * g[i] * g[i];
          }
          return l;
        };
      }
      f.optimizer_step = [this, s](std::span<const float> total) {
        applied[static_cast<std::size_t>(s)].assign(total.begin(), total.end());
      };
      out.push_back(std::move(f));
    }
    return out;
  }
};

struct CheckedBatch {
  std::vector<float> inputs;
  std::vector<float> targets;
  CheckedBatch(int m, std::size_t width, int shift) {
    for (int mb = 0; mb < m; ++mb) {
      for (std::size_t i = 0; i < width; ++i) {
        inputs.push_back(static_cast<float>(mb + static_cast<int>(i) + shift));
        targets.push_back(static_cast<float>(2 * mb - static_cast<int>(i)));
      }
    }
  }
  [[nodiscard]] Batch view() const { return {inputs, targets}; }
};

void require_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const ppsched::error& e) {
    const std::string what = e.what();
    INFO(what);
    for (const auto& p : parts) CHECK(what.find(p) != std::string::npos);
    return;
  }
  FAIL("expected a ppsched::error");
}

}  // namespace

TEST_CASE("the plan sizes each pool by the schedule's peak and shares tensors between local stages", "[runtime]") {
  const int p = 4;
  const int m = 8;
  std::vector<ppsched::StageShape> shapes;
  for (int s = 0; s < p; ++s) shapes.push_back({static_cast<std::size_t>(10 + s), static_cast<std::size_t>(11 + s)});
  for (const char* family : {"gpipe", "1f1b"}) {
    const Schedule lowered = make({family, 1}, p, m);
    const auto report = ppsched::validate(lowered);
    REQUIRE(report.ok());
    for (int r = 1; r < p; ++r) {
      const auto plan = ppsched::plan_rank(lowered, r, shapes);
      // Received activations and outgoing gradients share the input size of stage r.
      const auto in_pool = std::find_if(plan.pools.begin(), plan.pools.end(), [&](const auto& pool) {
        return pool.floats == shapes[static_cast<std::size_t>(r)].input_size;
      });
      REQUIRE(in_pool != plan.pools.end());
      const int in_flight = report.memory[static_cast<std::size_t>(r)].peak_in_flight;
      INFO(family << " rank " << r << " in flight " << in_flight << " pool " << in_pool->count);
      CHECK(in_pool->count >= in_flight);
      CHECK(in_pool->count <= in_flight + 2);
      if (std::string(family) == "gpipe") CHECK(in_pool->count >= m);
    }
  }
  // ZB-V places stages p-1 and p on rank p-1: F(p) reads F(p-1)'s output buffer directly.
  const Schedule v = make({"zb-v", 2}, 2, 4);
  std::vector<ppsched::StageShape> same(4, {5, 5});
  const auto plan = ppsched::plan_rank(v, 1, same);
  const auto& prog = v.programs[1];
  std::map<int, std::int32_t> out_of_f1;  // micro-batch -> buffer of F(1)'s output
  for (const auto& step : plan.steps) {
    const Action& a = prog[static_cast<std::size_t>(step.first_action)];
    if (a.op == Op::F && a.stage == 1) out_of_f1[a.microbatch] = step.output;
    if (a.op == Op::F && a.stage == 2) CHECK(step.input == out_of_f1.at(a.microbatch));
    CHECK_FALSE((ppsched::is_comm(a.op) && (a.stage == 1 || a.stage == 2) &&
                 (a.op == Op::SEND_F   ? a.stage == 1
                  : a.op == Op::RECV_F ? a.stage == 2
                                       : false)));
  }
}

// A forward whose plan waits for a comm group it reads nothing from waits for the other
// rank's progress too: reusing the most recently freed buffer did that to most forwards of
// interleaved 1F1B on 2 ranks (21 of 32), whose step then ran 27% longer than simulated, on
// the CPU backend and on an H100 alike (docs/performance.md). The plan takes the free buffer
// whose last use on the other lane is earliest.
TEST_CASE("buffer reuse seldom makes a forward wait for transfers it does not read", "[runtime]") {
  for (const char* family : {"interleaved-1f1b", "1f1b"}) {  // 21 of 32 and 2 of 16 before, on 2 ranks
    const int chunks = std::string(family) == "interleaved-1f1b" ? 2 : 1;
    for (const int p : {2, 4}) {
      for (const int m : {8, 16}) {
        const Schedule lowered = make({family, chunks}, p, m);
        const std::vector<ppsched::StageShape> shapes(static_cast<std::size_t>(lowered.stages()), {1, 1});
        int forwards = 0;
        int waiting_for_more = 0;
        for (int r = 0; r < p; ++r) {
          const auto plan = ppsched::plan_rank(lowered, r, shapes);
          std::map<std::int32_t, std::size_t> writer;  // physical buffer -> the step that last wrote it
          std::int32_t waited = -1;  // the compute stream is in order: an earlier wait holds for later steps
          for (std::size_t i = 0; i < plan.steps.size(); ++i) {
            const auto& step = plan.steps[i];
            if (step.lane == ppsched::Lane::compute) {
              const Action& a = lowered.programs[static_cast<std::size_t>(r)][static_cast<std::size_t>(step.first_action)];
              std::int32_t data = -1;  // the latest comm step that wrote what this step reads
              for (const std::int32_t b : {step.input, step.grad_output, step.loss_input}) {
                const auto w = writer.find(b);
                if (b >= 0 && w != writer.end() && plan.steps[w->second].lane != step.lane) {
                  data = std::max(data, static_cast<std::int32_t>(w->second));
                }
              }
              waited = std::max(waited, step.wait_on);
              CHECK(waited >= data);  // never less than the data: that would be a race
              if (a.op == Op::F) {
                ++forwards;
                if (step.wait_on > data) ++waiting_for_more;
              }
              if (step.output >= 0) writer[step.output] = i;
            } else {
              for (const auto& t : step.transfers) {
                if (!t.send) writer[t.buffer] = i;
              }
            }
          }
        }
        INFO(family << " p=" << p << " m=" << m << ": " << waiting_for_more << " of " << forwards
                    << " forwards wait for more than their inputs");
        CHECK(waiting_for_more * 10 <= forwards);
      }
    }
  }
}

TEST_CASE("the plan rejects programs that use a tensor before it exists", "[runtime]") {
  Schedule s{"hand", 2, 1, {0, 1}, {{{Op::F, 0, 0}, {Op::SEND_F, 0, 0}}, {{Op::F, 1, 0}, {Op::RECV_F, 1, 0}}}};
  const std::vector<ppsched::StageShape> shapes{{2, 2}, {2, 2}};
  require_error([&] { (void)ppsched::plan_rank(s, 1, shapes); }, {"before the action that provides it", "F0@s1"});
  const std::vector<ppsched::StageShape> bad{{2, 3}, {2, 2}};
  require_error([&] { (void)ppsched::plan_rank(s, 0, bad); }, {"stage 0 produces 3 floats", "expects 2"});
}

TEST_CASE("every schedule family moves the right data and gradients on 2 and 4 ranks", "[runtime]") {
  const CpuMode mode = GENERATE(CpuMode::threaded, CpuMode::deterministic);
  const auto accumulation =
      GENERATE(ppsched::GradAccumulation::microbatch_order, ppsched::GradAccumulation::schedule_order);
  for (const Family& fam : families) {
    for (int p : {2, 4}) {
      const int m = 2 * p;
      const Schedule s = make(fam, p, m);
      CpuOptions co;
      co.mode = mode;
      CpuCluster cluster(p, co);
      CheckedModel model;
      model.stages = s.stages();
      ExecutorOptions eo;
      eo.accumulation = accumulation;
      World<CpuBackend> world(backends(cluster), s, model.functions(s.split_backward), eo);
      for (int shift : {0, 5}) {
        const CheckedBatch batch(m, model.width, shift);
        const auto& result = world.run_step(batch.view());
        INFO(fam.name << " p=" << p << " shift " << shift << " " << ppsched::to_string(mode));
        // Output = input + sum(1..S); loss and gradients follow in closed form.
        const float total_add = static_cast<float>(model.stages * (model.stages + 1) / 2);
        float grad_sum = 0.0f;
        for (int mb = 0; mb < m; ++mb) {
          float loss = 0.0f;
          for (std::size_t i = 0; i < model.width; ++i) {
            const std::size_t k = static_cast<std::size_t>(mb) * model.width + i;
            const float g = batch.inputs[k] + total_add - batch.targets[k];
            loss += 0.5f * g * g;
            grad_sum += g;
          }
          CHECK(result.losses[static_cast<std::size_t>(mb)] == loss);
        }
        for (int st = 0; st < model.stages; ++st) {
          REQUIRE(model.applied[static_cast<std::size_t>(st)].size() == 1);
          CHECK(model.applied[static_cast<std::size_t>(st)][0] == grad_sum);
        }
        // One span per action; on each rank the compute lane runs in program order.
        std::size_t actions = 0;
        for (const auto& prog : s.programs) actions += prog.size();
        REQUIRE(result.timeline.spans.size() == actions);
        for (int r = 0; r < p; ++r) {
          double previous_end = -1.0;
          for (const auto& span : result.timeline.spans) {
            if (span.rank != r || span.lane != ppsched::Lane::compute) continue;
            CHECK(span.start >= previous_end);
            CHECK(span.end >= span.start);
            previous_end = span.end;
          }
        }
      }
    }
  }
}

TEST_CASE("the deterministic mode runs a World's step in one fixed order", "[runtime]") {
  // Two clusters, the same program: the stage callables run in the same global order. (In
  // this mode only the engine thread runs callables, so the log needs no lock.)
  auto order = [] {
    const Schedule s = make({"zb-v", 2}, 3, 6);
    CpuOptions co;
    co.mode = CpuMode::deterministic;
    CpuCluster cluster(3, co);
    CheckedModel model;
    model.stages = s.stages();
    auto fns = model.functions(true);
    std::vector<std::string> log;
    for (int st = 0; st < s.stages(); ++st) {
      auto& f = fns[static_cast<std::size_t>(st)];
      f.forward = [fwd = f.forward, &log, st](std::int32_t mb, std::span<const float> in, std::span<float> o) {
        log.push_back("F" + std::to_string(mb) + "@s" + std::to_string(st));
        fwd(mb, in, o);
      };
      f.backward_input = [bi = f.backward_input, &log, st](std::int32_t mb, std::span<const float> in,
                                                          std::span<const float> g, std::span<float> gi) {
        log.push_back("BI" + std::to_string(mb) + "@s" + std::to_string(st));
        bi(mb, in, g, gi);
      };
    }
    World<CpuBackend> world(backends(cluster), s, fns);
    const CheckedBatch batch(6, model.width, 0);
    (void)world.run_step(batch.view());
    (void)world.run_step(batch.view());
    return log;
  };
  const auto first = order();
  REQUIRE(first.size() == 2u * 2u * 6u * 6u);  // 2 steps x (F + BI) x 6 stages x 6 micro-batches
  for (int run = 0; run < 3; ++run) CHECK(order() == first);
}

TEST_CASE("forward-only runs inference without a loss or targets", "[runtime]") {
  CpuCluster cluster(3);
  ppsched::ScheduleRequest req;
  req.ranks = 3;
  req.microbatches = 4;
  const Schedule s = ppsched::make_schedule("forward-only", req);
  CheckedModel model;
  model.stages = 3;
  auto fns = model.functions(false);
  std::vector<float> seen(4 * model.width, 0.0f);
  fns.back().forward = [&seen, w = model.width](std::int32_t mb, std::span<const float> in, std::span<float> o) {
    for (std::size_t i = 0; i < o.size(); ++i) {
      o[i] = in[i] + 3.0f;
      seen[static_cast<std::size_t>(mb) * w + i] = o[i];
    }
  };
  World<CpuBackend> world(backends(cluster), s, fns);
  const CheckedBatch batch(4, model.width, 1);
  (void)world.run_step({batch.inputs, {}});
  for (std::size_t k = 0; k < seen.size(); ++k) CHECK(seen[k] == batch.inputs[k] + 6.0f);
}

TEST_CASE("a steady-state step allocates nothing in the executor or the backend", "[runtime]") {
  // Excluded: the warm-up step (first use of channel queues and access histories) and the
  // user's callables (the synthetic stages allocate nothing).
  const CpuMode mode = GENERATE(CpuMode::threaded, CpuMode::deterministic);
  for (const Family& fam : {Family{"1f1b", 1}, Family{"interleaved-1f1b", 2}, Family{"zb-h1", 1}}) {
    const int p = 4;
    const int m = 8;
    const Schedule s = make(fam, p, m);
    CpuOptions co;
    co.mode = mode;
    CpuCluster cluster(p, co);
    auto stages = ppsched::synthetic_stages(ppsched::uniform_costs(0, 0, 0), s.stages(), m, 1ms, 4);
    for (auto& st : stages) st.weight_grad_size = 2;  // exercise the gradient buffers too
    World<CpuBackend> world(backends(cluster), s, stages);
    const std::vector<float> inputs(static_cast<std::size_t>(m) * 4, 1.0f);
    const std::vector<float> targets(static_cast<std::size_t>(m) * 4, 0.0f);
    (void)world.run_step({inputs, targets});
    allocations = 0;
    counting = true;
    for (int step = 0; step < 3; ++step) (void)world.run_step({inputs, targets});
    counting = false;
    INFO(fam.name << " " << ppsched::to_string(mode));
    CHECK(allocations.load() == 0);
  }
}

TEST_CASE("a callable that throws at any action stops every rank with a named error", "[runtime]") {
  const CpuMode mode = GENERATE(CpuMode::threaded, CpuMode::deterministic);
  const int threads_before = ppsched::live_threads();
  for (const Family& fam : families) {
    for (int p : {2, 3}) {
      const int m = 2 * p;
      const Schedule s = make(fam, p, m);
      CpuOptions co;
      co.mode = mode;
      CpuCluster cluster(p, co);
      CheckedModel model;
      model.stages = s.stages();
      auto fns = model.functions(s.split_backward);
      Action fault{};
      bool armed = false;
      auto maybe_throw = [&](Op op, int stage, std::int32_t mb) {
        if (armed && fault.op == op && fault.stage == stage && fault.microbatch == mb) {
          throw std::runtime_error("injected fault");
        }
      };
      for (int st = 0; st < s.stages(); ++st) {
        auto& f = fns[static_cast<std::size_t>(st)];
        f.forward = [fwd = f.forward, maybe_throw, st](std::int32_t mb, std::span<const float> in, std::span<float> o) {
          maybe_throw(Op::F, st, mb);
          fwd(mb, in, o);
        };
        if (f.backward) {
          f.backward = [bwd = f.backward, maybe_throw, st](std::int32_t mb, std::span<const float> in,
                                                           std::span<const float> g, std::span<float> gi,
                                                           std::span<float> w) {
            maybe_throw(Op::B, st, mb);
            bwd(mb, in, g, gi, w);
          };
        } else {
          f.backward_input = [bi = f.backward_input, maybe_throw, st](std::int32_t mb, std::span<const float> in,
                                                                      std::span<const float> g, std::span<float> gi) {
            maybe_throw(Op::BI, st, mb);
            maybe_throw(Op::B, st, mb);  // a full B in a split schedule (dualpipev) runs BI then BW
            bi(mb, in, g, gi);
          };
          f.backward_weight = [bw = f.backward_weight, maybe_throw, st](std::int32_t mb, std::span<const float> in,
                                                                        std::span<const float> g, std::span<float> w) {
            maybe_throw(Op::BW, st, mb);
            bw(mb, in, g, w);
          };
        }
      }
      World<CpuBackend> world(backends(cluster), s, fns);
      const CheckedBatch batch(m, model.width, 0);
      for (int r = 0; r < p; ++r) {
        for (const Action& a : s.programs[static_cast<std::size_t>(r)]) {
          if (!ppsched::is_compute(a.op)) continue;
          fault = a;
          armed = true;
          INFO(fam.name << " p=" << p << ": fault at " << ppsched::to_string(a) << " on rank " << r);
          require_error([&] { (void)world.run_step(batch.view()); },
                        {"rank " + std::to_string(r), "stage " + std::to_string(a.stage),
                         "micro-batch " + std::to_string(a.microbatch), ppsched::to_string(a), "injected fault"});
          armed = false;
          // The World recovers: the next step runs and is right.
          const auto& ok = world.run_step(batch.view());
          CHECK(ok.losses[0] == ok.losses[0]);  // not NaN
        }
      }
    }
  }
  CHECK(ppsched::live_threads() == threads_before);
}

TEST_CASE("a throwing loss or optimizer step is reported like any stage callable", "[runtime]") {
  const int threads_before = ppsched::live_threads();
  {
    CpuCluster cluster(2);
    CheckedModel model;
    model.stages = 2;
    auto fns = model.functions(false);
    bool loss_fails = false;
    bool optimizer_fails = false;
    fns[1].loss = [loss = fns[1].loss, &loss_fails](std::int32_t mb, std::span<const float> o, std::span<const float> t,
                                                    std::span<float> g) {
      if (loss_fails && mb == 1) throw std::runtime_error("loss exploded");
      return loss(mb, o, t, g);
    };
    fns[0].optimizer_step = [opt = fns[0].optimizer_step, &optimizer_fails](std::span<const float> g) {
      if (optimizer_fails) throw std::runtime_error("optimizer diverged");
      opt(g);
    };
    World<CpuBackend> world(backends(cluster), make({"1f1b", 1}, 2, 4), fns);
    const CheckedBatch batch(4, model.width, 0);
    loss_fails = true;
    require_error([&] { (void)world.run_step(batch.view()); },
                  {"rank 1", "stage 1", "micro-batch 1", "B1@s1", "loss exploded"});
    loss_fails = false;
    optimizer_fails = true;
    require_error([&] { (void)world.run_step(batch.view()); },
                  {"rank 0", "stage 0", "optimizer_step", "optimizer diverged"});
    optimizer_fails = false;
    const auto& ok = world.run_step(batch.view());
    CHECK(ok.losses[1] == ok.losses[1]);
  }
  CHECK(ppsched::live_threads() == threads_before);
}

TEST_CASE("a deadlocking hand-written schedule: validation rejects it, the watchdog catches it", "[runtime]") {
  // Rank 0 posts its receive of the gradient before sending the activation that produces it.
  Schedule s{"deadlock",
             2,
             1,
             {0, 1},
             {{{Op::F, 0, 0}, {Op::RECV_B, 0, 0}, {Op::SEND_F, 0, 0}, {Op::B, 0, 0}},
              {{Op::RECV_F, 1, 0}, {Op::F, 1, 0}, {Op::B, 1, 0}, {Op::SEND_B, 1, 0}}}};
  CheckedModel model;
  model.stages = 2;
  const auto fns = model.functions(false);
  const CheckedBatch batch(1, model.width, 0);
  {
    CpuCluster cluster(2);
    require_error([&] { World<CpuBackend> world(backends(cluster), s, fns); }, {"deadlock"});
  }
  const CpuMode mode = GENERATE(CpuMode::threaded, CpuMode::deterministic);
  const int threads_before = ppsched::live_threads();
  {
    CpuOptions co;
    co.mode = mode;
    CpuCluster cluster(2, co);
    ExecutorOptions eo;
    eo.validate = false;
    eo.watchdog = 100ms;
    World<CpuBackend> world(backends(cluster), s, fns, eo);
    require_error([&] { (void)world.run_step(batch.view()); }, {"watchdog", "waits for", "to be posted"});
  }
  CHECK(ppsched::live_threads() == threads_before);
}

TEST_CASE("measured timelines compare with the simulator's", "[runtime]") {
  const int p = 2;
  const int m = 4;
  const Schedule s = make({"1f1b", 1}, p, m);
  CpuCluster cluster(p);
  const auto cost = ppsched::uniform_costs(1.0, 1.0, 1.0, "ms");
  World<CpuBackend> world(backends(cluster), s, ppsched::synthetic_stages(cost, p, m, 100us));
  const std::vector<float> inputs(m, 1.0f);
  const std::vector<float> targets(m, 0.0f);
  const auto& measured = world.run_step({inputs, targets}).timeline;
  const auto predicted = ppsched::simulate(s, cost).timeline;
  const auto cmp = ppsched::compare(measured, predicted);
  CHECK(cmp.only_in_measured.empty());
  CHECK(cmp.only_in_predicted.empty());
  CHECK(cmp.per_rank.size() == static_cast<std::size_t>(p));
  CHECK(cmp.matched == measured.spans.size());
}

TEST_CASE("setup errors name the stage and the fix", "[runtime]") {
  CpuCluster cluster(2);
  const Schedule zb = make({"zb-h1", 1}, 2, 4);
  CheckedModel model;
  model.stages = 2;
  require_error([&] { World<CpuBackend> w(backends(cluster), zb, model.functions(false)); },
                {"splits backward", "backward_input"});
  auto fns = model.functions(false);
  fns[1].loss = nullptr;
  require_error([&] { World<CpuBackend> w(backends(cluster), make({"1f1b", 1}, 2, 4), fns); }, {"no loss", "stage 1"});
  World<CpuBackend> w(backends(cluster), make({"1f1b", 1}, 2, 4), model.functions(false));
  const std::vector<float> few(5, 0.0f);
  require_error([&] { (void)w.run_step({few, few}); }, {"batch", "input floats"});
  CpuCluster three(3);
  require_error(
      [&] {
        World<CpuBackend> w3(backends(three), make({"1f1b", 1}, 2, 4), model.functions(false));
      },
      {"backends"});
}

// Overlapped F&B pairs (two consecutive compute actions of a rank sharing a nonzero group,
// as schedules that overlap one micro-batch's forward with another's backward write them):
// the executor groups only communication, so each action of the pair is its own step and
// the two run in program order on the compute stream, with the results of the ungrouped
// schedule.
TEST_CASE("an overlapped F&B pair runs as its two actions, in order, on the compute stream", "[runtime]") {
  const int p = 2;
  const int m = 4;
  const Schedule plain = make({"1f1b", 1}, p, m);
  Schedule paired = plain;
  std::uint32_t next_group = 1;
  for (const auto& prog : plain.programs) {
    for (const Action& a : prog) next_group = std::max(next_group, a.group + 1);
  }
  int pairs = 0;
  for (auto& prog : paired.programs) {
    for (std::size_t i = 0; i + 1 < prog.size(); ++i) {
      if (prog[i].op == Op::F && prog[i + 1].op == Op::B && prog[i].group == 0 && prog[i + 1].group == 0) {
        prog[i].group = prog[i + 1].group = next_group++;
        ++pairs;
        ++i;
      }
    }
  }
  REQUIRE(pairs > 0);
  std::vector<ppsched::StageShape> shapes(static_cast<std::size_t>(p), {3, 3});
  for (int r = 0; r < p; ++r) {
    const auto plan = ppsched::plan_rank(paired, r, shapes);
    const auto& prog = paired.programs[static_cast<std::size_t>(r)];
    for (const auto& step : plan.steps) {
      if (ppsched::is_compute(prog[static_cast<std::size_t>(step.first_action)].op)) CHECK(step.action_count == 1);
    }
  }
  // Runs each schedule; returns each rank's compute calls in the order they ran (one compute
  // stream per rank, so one writer per log) and the step's losses.
  auto run = [&](const Schedule& s, std::vector<std::vector<std::string>>& calls) {
    CpuCluster cluster(p);
    CheckedModel model;
    model.stages = p;
    auto fns = model.functions(false);
    calls.assign(static_cast<std::size_t>(p), {});
    for (int st = 0; st < p; ++st) {
      auto& log = calls[static_cast<std::size_t>(st)];  // stage st is on rank st
      auto& f = fns[static_cast<std::size_t>(st)];
      f.forward = [fwd = f.forward, &log, st](std::int32_t mb, std::span<const float> in, std::span<float> o) {
        log.push_back(ppsched::to_string(Action{Op::F, st, mb}));
        fwd(mb, in, o);
      };
      f.backward = [bwd = f.backward, &log, st](std::int32_t mb, std::span<const float> in, std::span<const float> g,
                                                std::span<float> gi, std::span<float> w) {
        log.push_back(ppsched::to_string(Action{Op::B, st, mb}));
        bwd(mb, in, g, gi, w);
      };
    }
    ExecutorOptions options;
    options.validate = false;  // the pair's group is the IR's newer form; this test is about the executor
    World<CpuBackend> world(backends(cluster), s, fns, options);
    const CheckedBatch batch(m, model.width, 1);
    return world.run_step(batch.view()).losses;
  };
  std::vector<std::vector<std::string>> plain_calls;
  std::vector<std::vector<std::string>> paired_calls;
  const auto plain_losses = run(plain, plain_calls);
  const auto paired_losses = run(paired, paired_calls);
  for (int r = 0; r < p; ++r) {
    std::vector<std::string> program_order;
    for (const Action& a : paired.programs[static_cast<std::size_t>(r)]) {
      if (ppsched::is_compute(a.op)) program_order.push_back(ppsched::to_string(Action{a.op, a.stage, a.microbatch}));
    }
    INFO("rank " << r);
    CHECK(paired_calls[static_cast<std::size_t>(r)] == program_order);
  }
  CHECK(paired_losses == plain_losses);
}

// ------------------------------------------------------------------ issue 17: misuse

TEST_CASE("run_step from several threads at once runs every call's step, one at a time", "[runtime]") {
  // Before: a second caller bumped the step generation while the first step ran, reset the
  // count of running ranks, and both calls returned although one step ran (or a rank ran
  // twice and the step deadlocked). Counting the forwards tells a call whose step never ran.
  const int p = 3;
  const int m = 6;
  const Schedule s = make({"1f1b", 1}, p, m);
  CpuCluster cluster(p);
  CheckedModel model;
  model.stages = s.stages();
  auto fns = model.functions(false);
  std::atomic<int> forwards{0};
  for (auto& f : fns) {
    f.forward = [fwd = f.forward, &forwards](std::int32_t mb, std::span<const float> in, std::span<float> o) {
      forwards.fetch_add(1, std::memory_order_relaxed);
      fwd(mb, in, o);
    };
  }
  World<CpuBackend> world(backends(cluster), s, fns);
  const CheckedBatch batch(m, model.width, 0);
  const std::vector<float> expected = world.run_step(batch.view()).losses;
  forwards = 0;
  constexpr int callers = 4;
  constexpr int steps_each = 20;
  std::atomic<int> succeeded{0};
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < callers; ++t) {
    threads.emplace_back([&] {
      for (int k = 0; k < steps_each; ++k) {
        try {
          (void)world.run_step(batch.view());
          succeeded.fetch_add(1);
        } catch (const ppsched::error&) {
          failed.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failed.load() == 0);
  CHECK(succeeded.load() == callers * steps_each);
  CHECK(forwards.load() == succeeded.load() * s.stages() * m);
  CHECK(world.run_step(batch.view()).losses == expected);
}

TEST_CASE("a watchdog of milliseconds::max() means none: no overflow, no false timeout", "[runtime]") {
  using Clock = std::chrono::steady_clock;
  const auto now = Clock::now();
  CHECK(ppsched::detail::saturating_deadline(now, std::chrono::milliseconds::max()) == Clock::time_point::max());
  CHECK(ppsched::detail::saturating_deadline(now, std::chrono::hours::max()) == Clock::time_point::max());
  CHECK(ppsched::detail::saturating_deadline(now, std::chrono::nanoseconds::max()) == Clock::time_point::max());
  CHECK(ppsched::detail::saturating_deadline(Clock::time_point::max(), 1ms) == Clock::time_point::max());
  CHECK(ppsched::detail::saturating_deadline(now, 5ms) == now + 5ms);
  CHECK(ppsched::detail::saturating_deadline(now, -5ms) == now);
  CHECK(ppsched::HostWait::within(std::chrono::milliseconds::max()).deadline == Clock::time_point::max());
  CHECK_FALSE(ppsched::detail::reached(std::chrono::hours(24 * 365), ppsched::no_timeout));
  CHECK(ppsched::detail::reached(2ms, 1ms));

  for (const CpuMode mode : {CpuMode::threaded, CpuMode::deterministic}) {
    INFO(ppsched::to_string(mode));
    const int p = 2;
    const int m = 4;
    const Schedule s = make({"1f1b", 1}, p, m);
    CpuOptions co;
    co.mode = mode;
    co.watchdog = std::chrono::milliseconds::max();
    CpuCluster cluster(p, co);
    CheckedModel model;
    model.stages = s.stages();
    ExecutorOptions eo;
    eo.watchdog = ppsched::no_timeout;
    World<CpuBackend> world(backends(cluster), s, model.functions(false), eo);
    const CheckedBatch batch(m, model.width, 0);
    for (int step = 0; step < 3; ++step) {
      const auto& r = world.run_step(batch.view());
      REQUIRE(r.losses.size() == static_cast<std::size_t>(m));
      for (float l : r.losses) CHECK(std::isfinite(l));
    }
    // A standalone executor on its own rank of a one-rank schedule, too.
    CpuCluster one(1, co);
    const Schedule single = make({"1f1b", 1}, 1, m);
    CheckedModel solo;
    solo.stages = single.stages();
    const auto solo_fns = solo.functions(false);
    ppsched::Executor<CpuBackend> ex(one.rank(0), single, solo_fns, eo);
    CHECK_NOTHROW(ex.run_step(batch.view()));
  }
  // Zero and negative stay errors that say how to write "none".
  CpuCluster cluster(2);
  const Schedule s = make({"1f1b", 1}, 2, 4);
  CheckedModel model;
  model.stages = s.stages();
  ExecutorOptions eo;
  eo.watchdog = 0ms;
  require_error([&] { World<CpuBackend> w(backends(cluster), s, model.functions(false), eo); },
                {"watchdog is 0 ms", "no_timeout"});
  CpuOptions co;
  co.watchdog = -1ms;
  require_error([&] { CpuCluster c(2, co); }, {"watchdog is -1 ms", "no_timeout"});
  // Between steps the watchdog can change, to none and back, by the same rules.
  World<CpuBackend> world(backends(cluster), s, model.functions(false));
  const CheckedBatch batch(4, model.width, 0);
  world.set_watchdog(ppsched::no_timeout);
  CHECK(world.executor(1).watchdog() == ppsched::no_timeout);
  CHECK_NOTHROW(world.run_step(batch.view()));
  world.set_watchdog(5s);
  CHECK(world.executor(0).watchdog() == 5s);
  require_error([&] { world.set_watchdog(0ms); }, {"watchdog is 0 ms"});
  CHECK_NOTHROW(world.run_step(batch.view()));
}

TEST_CASE("a step that issues more than the queue holds pays no handover per operation (deterministic mode)",
          "[runtime]") {
  // Before: once a stream's queue was full the host got the engine back for every freed
  // slot, one operation at a time (20-90x slower). Now a full queue drains to half first.
  const int p = 2;
  const int m = 64;
  const Schedule s = make({"1f1b", 1}, p, m);
  for (const CpuMode mode : {CpuMode::deterministic, CpuMode::threaded}) {
    INFO(ppsched::to_string(mode));
    CpuOptions co;
    co.mode = mode;
    co.queue_capacity = 64;
    CpuCluster cluster(p, co);
    CheckedModel model;
    model.stages = s.stages();
    World<CpuBackend> world(backends(cluster), s, model.functions(false));
    CpuCluster roomy(p, CpuOptions{mode, true, 60'000ms, 1u << 14});
    CheckedModel reference;
    reference.stages = s.stages();
    World<CpuBackend> reference_world(backends(roomy), s, reference.functions(false));
    const CheckedBatch batch(m, model.width, 0);
    for (int step = 0; step < 2; ++step) {
      CHECK(world.run_step(batch.view()).losses == reference_world.run_step(batch.view()).losses);
      CHECK(model.applied == reference.applied);
    }
    for (int r = 0; r < p; ++r) CHECK(roomy.rank(r).queue_full_waits() == 0);
    if (mode != CpuMode::deterministic) continue;
    for (int r = 0; r < p; ++r) {
      const std::size_t actions = s.programs[static_cast<std::size_t>(r)].size();  // 4m = 256
      const std::uint64_t waits = cluster.rank(r).queue_full_waits();
      INFO("rank " << r << ": " << waits << " waits for room over 2 steps of " << actions << " actions");
      // Each wait now frees half a queue (32 operations); an action issues at most 6.
      CHECK(waits > 0);
      CHECK(waits * 32 <= 2 * 6 * actions + 64);
    }
  }
}

TEST_CASE("each rank's executor keeps only its own program, and the World one schedule", "[runtime]") {
  const int p = 4;
  const int m = 8;
  const Schedule s = make({"interleaved-1f1b", 2}, p, m);
  CpuCluster cluster(p);
  CheckedModel model;
  model.stages = s.stages();
  World<CpuBackend> world(backends(cluster), s, model.functions(false));
  CHECK(world.schedule() == s);
  for (int r = 0; r < p; ++r) {
    const auto& kept = world.executor(r).schedule();
    CHECK(kept.placement == s.placement);
    CHECK(kept.microbatches == m);
    CHECK(world.executor(r).program() == s.programs[static_cast<std::size_t>(r)]);
    for (int q = 0; q < p; ++q) {
      if (q != r) CHECK(kept.programs[static_cast<std::size_t>(q)].empty());
    }
  }
  const CheckedBatch batch(m, model.width, 0);
  for (float l : world.run_step(batch.view()).losses) CHECK(std::isfinite(l));
}

TEST_CASE("a World given a cost model runs the lowering simulate() timed", "[runtime]") {
  // Issue 13: lowering with unit times orders the transfers for a run that is not the one
  // simulated; with the model, the World's programs are simulate's.
  const int p = 4;
  const int m = 8;
  ppsched::ScheduleRequest req;
  req.ranks = p;
  req.microbatches = m;
  const Schedule compute_only = ppsched::make_schedule("zb-h1", req);
  ppsched::CostModel costs;
  for (int st = 0; st < p; ++st) {
    ppsched::StageCost c;
    c.forward = 1.0 + 3.0 * st;
    c.backward_input = 2.0 + (st % 2 == 0 ? 5.0 : 0.5);
    c.backward_weight = 0.25 + st;
    costs.stages.push_back(c);
  }
  const Schedule simulated = ppsched::lower(compute_only, ppsched::lower_options_for(costs, p, m));
  const Schedule unit = ppsched::lower(compute_only);
  REQUIRE(simulated != unit);  // the costs change the lowering, or the test shows nothing
  const auto sim = ppsched::simulate(compute_only, costs);
  CHECK(sim.lowered_internally);
  CpuCluster cluster(p);
  CheckedModel model;
  model.stages = compute_only.stages();
  World<CpuBackend> world(backends(cluster), compute_only, costs, model.functions(true));
  CHECK(world.schedule() == simulated);
  for (int r = 0; r < p; ++r) CHECK(world.executor(r).program() == simulated.programs[static_cast<std::size_t>(r)]);
  // The measured timeline has the simulated programs' actions, rank by rank.
  const CheckedBatch batch(m, model.width, 0);
  const auto& result = world.run_step(batch.view());
  CHECK(result.timeline.spans.size() == sim.timeline.spans.size());
  // An executor alone does the same.
  CpuCluster one(p);
  CheckedModel solo;
  solo.stages = compute_only.stages();
  const auto fns = solo.functions(true);
  ppsched::Executor<CpuBackend> ex(one.rank(2), compute_only, costs, fns);
  CHECK(ex.program() == simulated.programs[2]);
}

TEST_CASE("a World or an Executor given lower()'s output runs it as it is", "[runtime]") {
  // Issue 26: a LoweredSchedule used to decay to a Schedule and be validated again in full;
  // its proof now reaches the runtime. The programs run must be lower()'s, for a proven
  // schedule and for one lower() returned unchanged (which is still checked).
  const int p = 4;
  const int m = 8;
  ppsched::ScheduleRequest req;
  req.ranks = p;
  req.microbatches = m;
  const Schedule compute_only = ppsched::make_schedule("1f1b", req);
  const ppsched::LoweredSchedule lowered = ppsched::lower(compute_only);
  REQUIRE(lowered.proven());
  CheckedModel model;
  model.stages = compute_only.stages();
  const auto fns = model.functions(false);
  const CheckedBatch batch(m, model.width, 0);
  double reference = 0.0;
  {
    CpuCluster cluster(p);
    World<CpuBackend> world(backends(cluster), compute_only, fns);
    reference = world.run_step(batch.view()).mean_loss();
  }
  CpuCluster cluster(p);
  World<CpuBackend> world(backends(cluster), lowered, fns);
  CHECK(world.schedule() == lowered.schedule());
  CHECK(world.run_step(batch.view()).mean_loss() == reference);
  CpuCluster one(p);
  ppsched::Executor<CpuBackend> ex(one.rank(1), lowered, fns);
  CHECK(ex.program() == lowered.schedule().programs[1]);
  // lower() hands back a schedule that already has communication unproven: a World still
  // validates it, so the hand-written deadlock below is refused at construction.
  const Schedule deadlock{"deadlock",
                          2,
                          1,
                          {0, 1},
                          {{{Op::F, 0, 0}, {Op::RECV_B, 0, 0}, {Op::SEND_F, 0, 0}, {Op::B, 0, 0}},
                           {{Op::RECV_F, 1, 0}, {Op::F, 1, 0}, {Op::B, 1, 0}, {Op::SEND_B, 1, 0}}}};
  const ppsched::LoweredSchedule unproven = ppsched::lower(deadlock);
  REQUIRE_FALSE(unproven.proven());
  CheckedModel two;
  two.stages = 2;
  CpuCluster pair(2);
  require_error([&] { World<CpuBackend> w(backends(pair), unproven, two.functions(false)); }, {"deadlock"});
}

TEST_CASE("a stage size whose m-fold does not fit is a setup error, not a wrapped batch check", "[runtime]") {
  // Before: 4 micro-batches of 2^63 input floats wrapped to 0, an empty batch passed the
  // check, and the step sliced past its end.
  CpuCluster cluster(2);
  const Schedule s = make({"1f1b", 1}, 2, 4);
  CheckedModel model;
  model.stages = s.stages();
  auto fns = model.functions(false);
  fns[0].input_size = std::numeric_limits<std::size_t>::max() / 2 + 1;
  require_error([&] { World<CpuBackend> w(backends(cluster), s, fns); }, {"stage 0 declares", "input floats"});
  fns = model.functions(false);
  fns.back().target_size = std::numeric_limits<std::size_t>::max() / 3;
  require_error([&] { World<CpuBackend> w(backends(cluster), s, fns); }, {"target floats"});
}
