// Graph capture of the steady-state step (ExecutorOptions::graphs) on the CPU backend's model
// of CUDA Graphs: replayed steps give the eager steps' losses and gradients bit for bit for
// every training family; the host issues a handful of operations per replayed step instead of
// every action's; what cannot be replayed safely is refused before the first step, naming the
// stage and the reason; and the model itself enforces CUDA's capture rules.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <ppsched/backend/cpu.hpp>
#include <ppsched/runtime/world.hpp>
#include <ppsched/schedule/generators.hpp>

#include "../examples/mlp/mlp.hpp"
#include "../examples/mlp/mlp_stage.hpp"
#include "training_families.hpp"

namespace {

using Catch::Matchers::Contains;

// The example MLP split over the schedule's stages, declared capturable, its loss written
// into "device" memory (host memory on the CPU backend) instead of returned.
struct Model {
  std::vector<std::size_t> widths;
  std::size_t rows = 2;
  int m = 0;
  mlp::Mlp net;
  std::vector<std::unique_ptr<mlp::MlpStage>> adapters;
  std::vector<ppsched::StageFunctions> functions;
  std::vector<std::vector<float>> applied;  // per stage: the gradient its last optimizer_step got

  Model(int stages, int microbatches, bool capturable)
      : widths(make_widths(stages)), m(microbatches), net(widths, 7), applied(static_cast<std::size_t>(stages)) {
    const std::size_t layers = widths.size() - 1;
    const float loss_scale = 1.0f / static_cast<float>(rows * static_cast<std::size_t>(m));
    for (int s = 0; s < stages; ++s) {
      const std::size_t first = layers * static_cast<std::size_t>(s) / static_cast<std::size_t>(stages);
      const std::size_t last = layers * static_cast<std::size_t>(s + 1) / static_cast<std::size_t>(stages);
      adapters.push_back(std::make_unique<mlp::MlpStage>(net, first, last, rows, m));
      ppsched::StageFunctions f = adapters.back()->functions(s + 1 == stages, loss_scale, 0.5f);
      f.optimizer_step = [apply = f.optimizer_step, this, s](std::span<const float> g) {
        applied[static_cast<std::size_t>(s)].assign(g.begin(), g.end());
        apply(g);
      };
      if (capturable) {
        f.capturable = true;
        if (f.loss) {
          f.device_loss = [loss = f.loss](const ppsched::StageContext& c, std::span<const float> out,
                                          std::span<const float> target, std::span<float> grad,
                                          std::span<float> value) { value[0] = loss(c, out, target, grad); };
          f.loss = nullptr;
        }
      }
      functions.push_back(std::move(f));
    }
  }

  static std::vector<std::size_t> make_widths(int stages) {
    std::vector<std::size_t> w{3};
    const std::size_t layers = static_cast<std::size_t>(std::max(4, stages) + 1);
    for (std::size_t l = 1; l < layers; ++l) w.push_back(4 + l % 3);
    w.push_back(2);
    return w;
  }

  [[nodiscard]] std::vector<float> gradient() const {
    std::vector<float> g;
    for (const auto& a : applied) g.insert(g.end(), a.begin(), a.end());
    return g;
  }
};

// Fills `out` in place (a replayed step reads the memory it was captured with).
void fill(std::vector<float>& out, std::uint32_t seed, float scale) {
  mlp::Random random(seed);
  for (float& x : out) x = scale * random.next();
}

ppsched::ExecutorOptions graph_options(bool graphs) {
  ppsched::ExecutorOptions eo;
  eo.record_timeline = false;
  eo.graphs.enabled = graphs;
  return eo;
}

std::uint64_t host_operations(ppsched::CpuCluster& cluster) {
  std::uint64_t n = 0;
  for (int r = 0; r < cluster.ranks(); ++r) n += cluster.rank(r).host_operations();
  return n;
}

struct Run {
  std::vector<std::vector<float>> losses;     // per step
  std::vector<std::vector<float>> gradients;  // per step
  std::vector<std::uint64_t> host_ops;        // per step, every rank's together
  bool replayed = false;                      // every rank replayed a captured graph at the end
};

Run train(const ppsched::Schedule& schedule, bool graphs, int steps, ppsched::CpuMode mode = ppsched::CpuMode::threaded) {
  Model model(schedule.stages(), schedule.microbatches, graphs);
  ppsched::CpuOptions co;
  co.mode = mode;
  ppsched::CpuCluster cluster(schedule.ranks, co);
  ppsched::World<ppsched::CpuBackend> world(ppsched_test::backends(cluster), schedule, model.functions,
                                            graph_options(graphs));
  std::vector<float> inputs(static_cast<std::size_t>(model.m) * model.rows * model.widths.front());
  std::vector<float> targets(static_cast<std::size_t>(model.m) * model.rows * model.widths.back());
  Run run;
  for (int step = 0; step < steps; ++step) {
    fill(inputs, 100u + static_cast<std::uint32_t>(step), 1.0f);
    fill(targets, 200u + static_cast<std::uint32_t>(step), 0.8f);
    const std::uint64_t before = host_operations(cluster);
    const auto& result = world.run_step({inputs, targets});
    run.host_ops.push_back(host_operations(cluster) - before);
    run.losses.push_back(result.losses);
    run.gradients.push_back(model.gradient());
  }
  run.replayed = true;
  for (int r = 0; r < schedule.ranks; ++r) run.replayed = run.replayed && world.executor(r).graph_captured();
  return run;
}

}  // namespace

TEST_CASE("replayed steps give the eager steps' losses and gradients bit for bit, every family", "[graphs]") {
  for (const ppsched_test::Family& fam : ppsched_test::training_families()) {
    for (int p : {2, 4}) {
      const ppsched::Schedule s = ppsched_test::make(fam, p, 2 * p);
      INFO(fam.name << " p=" << p);
      const Run eager = train(s, false, 10);
      const Run replayed = train(s, true, 10);
      CHECK(replayed.replayed);
      CHECK_FALSE(eager.replayed);
      for (int step = 0; step < 10; ++step) {
        INFO("step " << step);
        REQUIRE(eager.losses[static_cast<std::size_t>(step)].size() == static_cast<std::size_t>(2 * p));
        CHECK(replayed.losses[static_cast<std::size_t>(step)] == eager.losses[static_cast<std::size_t>(step)]);
        CHECK(replayed.gradients[static_cast<std::size_t>(step)] == eager.gradients[static_cast<std::size_t>(step)]);
      }
      // The losses change from step to step: the replay reads each step's new batch.
      CHECK(replayed.losses[9] != replayed.losses[8]);
    }
  }
}

TEST_CASE("the deterministic engine replays bit for bit too", "[graphs]") {
  for (const char* name : {"1f1b", "zb-v"}) {
    ppsched::ScheduleRequest req;
    req.ranks = 4;
    req.microbatches = 8;
    req.chunks = std::string(name) == "zb-v" ? 2 : 1;
    const ppsched::Schedule s = ppsched::make_schedule(name, req);
    const Run eager = train(s, false, 4, ppsched::CpuMode::deterministic);
    const Run replayed = train(s, true, 4, ppsched::CpuMode::deterministic);
    INFO(name);
    CHECK(replayed.replayed);
    CHECK(replayed.losses == eager.losses);
    CHECK(replayed.gradients == eager.gradients);
  }
}

TEST_CASE("a replayed step issues a few host operations per rank instead of every action's", "[graphs]") {
  ppsched::ScheduleRequest req;
  req.ranks = 4;
  req.microbatches = 8;
  req.chunks = 2;
  const ppsched::Schedule s = ppsched::make_schedule("interleaved-1f1b", req);
  const Run eager = train(s, false, 4);
  const Run replayed = train(s, true, 4);
  // The warm-up step and the capturing step issue what an eager step does (the capture
  // records it, then replays it once).
  CHECK(replayed.host_ops[0] == eager.host_ops[0]);
  CHECK(replayed.host_ops[1] > eager.host_ops[1]);
  for (std::size_t step = 2; step < 4; ++step) {
    INFO("step " << step << ": eager " << eager.host_ops[step] << ", replayed " << replayed.host_ops[step]);
    // Per rank: replay, the record of the step's end event, the host's wait for it.
    CHECK(replayed.host_ops[step] == 3u * 4u);
    CHECK(replayed.host_ops[step] * 10 <= eager.host_ops[step]);
  }
}

TEST_CASE("what a replay cannot repeat is refused before the first step, naming the stage and why", "[graphs]") {
  ppsched::ScheduleRequest req;
  req.ranks = 2;
  req.microbatches = 4;
  const ppsched::Schedule s = ppsched::make_schedule("1f1b", req);
  ppsched::CpuCluster cluster(2);
  std::atomic<int> calls{0};
  auto build = [&](Model& model, ppsched::ExecutorOptions eo) {
    for (auto& f : model.functions) {
      f.forward = [fw = f.forward, &calls](const ppsched::StageContext& c, std::span<const float> in,
                                           std::span<float> out) {
        ++calls;
        fw(c, in, out);
      };
    }
    ppsched::World<ppsched::CpuBackend> world(ppsched_test::backends(cluster), s, model.functions, eo);
  };

  SECTION("a stage not declared capturable") {
    Model model(2, 4, true);
    model.functions[1].capturable = false;
    REQUIRE_THROWS_WITH(build(model, graph_options(true)),
                        Contains("stage 1 is not declared capturable") && Contains("StageFunctions::capturable") &&
                            Contains("rank 1"));
  }
  SECTION("a loss that returns its value to the host") {
    Model model(2, 4, true);
    auto& last = model.functions[1];
    last.loss = [dl = last.device_loss](const ppsched::StageContext& c, std::span<const float> out,
                                        std::span<const float> target, std::span<float> grad) {
      float v = 0;
      dl(c, out, target, grad, std::span<float>(&v, 1));
      return v;
    };
    last.device_loss = nullptr;
    REQUIRE_THROWS_WITH(build(model, graph_options(true)),
                        Contains("stage 1's loss returns its value to the host") &&
                            Contains("StageFunctions::device_loss"));
  }
  SECTION("a timeline read from the replayed step's events") {
    Model model(2, 4, true);
    ppsched::ExecutorOptions eo = graph_options(true);
    eo.record_timeline = true;
    REQUIRE_THROWS_WITH(build(model, eo), Contains("record_timeline is on with graphs"));
  }
  SECTION("keep_outputs, a copy into the step's host result") {
    Model model(2, 4, true);
    ppsched::ExecutorOptions eo = graph_options(true);
    eo.keep_outputs = true;
    REQUIRE_THROWS_WITH(build(model, eo), Contains("keep_outputs"));
  }
  SECTION("a negative warm-up") {
    Model model(2, 4, true);
    ppsched::ExecutorOptions eo = graph_options(true);
    eo.graphs.warmup_steps = -1;
    REQUIRE_THROWS_WITH(build(model, eo), Contains("graphs.warmup_steps is -1"));
  }
  CHECK(calls == 0);  // refused before any callable ran
}

TEST_CASE("a gradient reducer is refused in graph mode", "[graphs]") {
  ppsched::ScheduleRequest req;
  req.ranks = 2;
  req.microbatches = 4;
  const ppsched::Schedule s = ppsched::make_schedule("1f1b", req);
  ppsched::CpuCluster cluster(2);
  Model model(2, 4, true);
  ppsched::World<ppsched::CpuBackend> world(ppsched_test::backends(cluster), s, model.functions, graph_options(true));
  REQUIRE_THROWS_WITH(world.set_gradient_reducer(0, [](auto&, auto&, std::int32_t, auto&, std::stop_token) {}),
                      Contains("a gradient reducer is a host callable"));
}

TEST_CASE("a batch in other memory or of another size is refused before a replayed step", "[graphs]") {
  ppsched::ScheduleRequest req;
  req.ranks = 2;
  req.microbatches = 4;
  const ppsched::Schedule s = ppsched::make_schedule("zb-h1", req);
  ppsched::CpuCluster cluster(2);
  Model model(2, 4, true);
  ppsched::World<ppsched::CpuBackend> world(ppsched_test::backends(cluster), s, model.functions, graph_options(true));
  std::vector<float> inputs(4 * model.rows * model.widths.front(), 0.5f);
  std::vector<float> targets(4 * model.rows * model.widths.back(), 0.25f);
  (void)world.run_step({inputs, targets});  // eager warm-up
  (void)world.run_step({inputs, targets});  // captured
  REQUIRE(world.executor(0).graph_captured());
  const std::vector<float> moved = inputs;
  REQUIRE_THROWS_WITH(world.run_step({moved, targets}),
                      Contains("Batch::inputs is not the memory the step was captured with") &&
                          Contains("static inputs"));
  // The refusal came before the step ran anything. The World recovered every rank (a new
  // communicator, as after any failed step), so the graph goes: one eager step, a capture,
  // then replays again.
  (void)world.run_step({inputs, targets});
  CHECK_FALSE(world.executor(0).graph_captured());
  (void)world.run_step({inputs, targets});
  CHECK(world.executor(0).graph_captured());
  const std::vector<float> shorter(inputs.begin(), inputs.end() - 1);
  REQUIRE_THROWS_WITH(world.run_step({shorter, targets}), Contains("Batch::inputs"));
  // Variable-length sizes (Batch::sizes) are baked into the captured transfers.
  (void)world.run_step({inputs, targets});
  (void)world.run_step({inputs, targets});
  REQUIRE(world.executor(1).graph_captured());
  std::vector<ppsched::MicrobatchSize> sizes;
  for (const auto& f : model.functions) {
    for (int mb = 0; mb < 4; ++mb) sizes.push_back({f.input_size, f.output_size});
  }
  REQUIRE_THROWS_WITH(world.run_step({inputs, targets, {}, sizes}),
                      Contains("Batch::sizes differ from the step the graph was captured at") &&
                          Contains("stage 0, micro-batch 0"));
}

TEST_CASE("a fault in a replayed step ends it cleanly; the next steps warm up, capture and match eager", "[graphs]") {
  ppsched::ScheduleRequest req;
  req.ranks = 2;
  req.microbatches = 4;
  const ppsched::Schedule s = ppsched::make_schedule("1f1b", req);
  std::atomic<bool> fail{false};
  auto run = [&](bool graphs, int fail_at) {
    Model model(2, 4, graphs);
    model.functions[1].forward = [fw = model.functions[1].forward, &fail](const ppsched::StageContext& c,
                                                                            std::span<const float> in,
                                                                            std::span<float> out) {
      if (fail && c.microbatch == 2) throw std::runtime_error("injected");
      fw(c, in, out);
    };
    ppsched::CpuCluster cluster(2);
    ppsched::World<ppsched::CpuBackend> world(ppsched_test::backends(cluster), s, model.functions,
                                              graph_options(graphs));
    std::vector<float> inputs(4 * model.rows * model.widths.front());
    std::vector<float> targets(4 * model.rows * model.widths.back());
    std::vector<std::vector<float>> losses;
    for (int step = 0; step < 7; ++step) {
      fill(inputs, 10u + static_cast<std::uint32_t>(step), 1.0f);
      fill(targets, 20u + static_cast<std::uint32_t>(step), 0.8f);
      fail = step == fail_at;
      if (step == fail_at) {
        REQUIRE_THROWS_WITH(world.run_step({inputs, targets}),
                            Contains("rank 1, stage 1, micro-batch 2") && Contains("injected"));
        CHECK_FALSE(world.executor(1).graph_captured());
        continue;
      }
      losses.push_back(world.run_step({inputs, targets}).losses);
    }
    CHECK(world.executor(0).graph_captured() == graphs);
    return losses;
  };
  // Step 3 fails in a replay (no rank reaches its optimizer_step: rank 0's last backward
  // needs the gradient of the micro-batch that failed); compared with an eager run failing at
  // the same step.
  CHECK(run(true, 3) == run(false, 3));
}

TEST_CASE("the CPU model records a capture once and replays it, running nothing at capture", "[graphs][cpu_model]") {
  ppsched::CpuCluster cluster(2);
  auto& a = cluster.rank(0);
  auto& b = cluster.rank(1);
  auto sa = a.create_stream();
  auto comm_a = a.create_stream();
  auto sb = b.create_stream();
  auto fork = a.create_event();
  auto done = a.create_event();
  auto buf_a = a.allocate(4);
  auto buf_b = b.allocate(4);
  int runs = 0;
  auto bump = [&] {
    ++runs;
    for (float& x : a.span(buf_a)) x += 1.0f;
  };
  const ppsched::BufferUse<ppsched::CpuBuffer> use{&buf_a, ppsched::Access::read_write};
  a.begin_capture(sa);
  a.launch(sa, ppsched::host_task(bump, "bump"), std::span(&use, 1));
  a.record(fork, sa);
  a.wait(comm_a, fork);  // comm_a joins the capture
  a.send(buf_a, 4, 1, comm_a, {7, "send"});
  a.record(done, comm_a);
  a.wait(sa, done);  // and is joined back
  ppsched::CpuBackend::graph g = a.end_capture(sa);
  CHECK(runs == 0);
  CHECK(g.nodes() == 6);
  CHECK(g.count(ppsched::detail::cpu::CaptureOp::send) == 1);
  for (int k = 1; k <= 3; ++k) {
    b.recv(buf_b, 4, 0, sb, {7, "send"});
    a.replay(g, sa);
    REQUIRE(a.synchronize(sa, ppsched::HostWait::within(std::chrono::seconds(10))) == ppsched::WaitResult::done);
    REQUIRE(b.synchronize(sb, ppsched::HostWait::within(std::chrono::seconds(10))) == ppsched::WaitResult::done);
    CHECK(runs == k);
    CHECK(b.span(buf_b)[0] == static_cast<float>(k));
  }
}

TEST_CASE("the CPU model refuses inside a capture what CUDA refuses", "[graphs][cpu_model]") {
  ppsched::CpuCluster cluster(2);
  auto& a = cluster.rank(0);
  auto s = a.create_stream();
  auto other = a.create_stream();
  auto e = a.create_event();
  auto outside = a.create_event();
  auto buffer = a.allocate(4);
  const auto wait = ppsched::HostWait::within(std::chrono::seconds(5));

  SECTION("synchronising a capturing stream invalidates the capture") {
    a.begin_capture(s);
    a.record(e, s);
    REQUIRE_THROWS_WITH((void)a.synchronize(s, wait), Contains("synchronize") && Contains("capturing"));
    REQUIRE_THROWS_WITH((void)a.end_capture(s), Contains("invalidated"));
  }
  SECTION("querying an event recorded in the capture") {
    a.begin_capture(s);
    a.record(e, s);
    REQUIRE_THROWS_WITH((void)a.query(e), Contains("recorded in a capture"));
    REQUIRE_THROWS_WITH((void)a.end_capture(s), Contains("invalidated"));
  }
  SECTION("a stream left unjoined") {
    a.begin_capture(s);
    a.record(e, s);
    a.wait(other, e);
    a.zero(other, buffer);
    REQUIRE_THROWS_WITH((void)a.end_capture(s), Contains("not joined back"));
  }
  SECTION("a captured wait on an event recorded outside the capture") {
    a.record(outside, other);
    a.begin_capture(s);
    REQUIRE_THROWS_WITH(a.wait(s, outside), Contains("recorded outside"));
    REQUIRE_THROWS_WITH((void)a.end_capture(s), Contains("invalidated"));
  }
  SECTION("an allocation by the capturing thread") {
    a.begin_capture(s);
    REQUIRE_THROWS_WITH((void)a.allocate(4), Contains("allocate") && Contains("capture"));
    REQUIRE_THROWS_WITH((void)a.end_capture(s), Contains("invalidated"));
  }
  SECTION("a replay after recover(): its transfers used the aborted communicator") {
    a.begin_capture(s);
    a.record(e, s);
    ppsched::CpuBackend::graph g = a.end_capture(s);
    a.abort("test");
    a.recover();
    REQUIRE_THROWS_WITH(a.replay(g, s), Contains("recover()"));
  }
  // After each refusal the rank captures again normally.
  a.begin_capture(s);
  a.record(e, s);
  ppsched::CpuBackend::graph g = a.end_capture(s);
  a.replay(g, s);
  CHECK(a.synchronize(s, wait) == ppsched::WaitResult::done);
  // An event recorded inside a graph orders the graph's work; the host cannot query it.
  REQUIRE_THROWS_WITH((void)a.query(e), Contains("recorded in a capture"));
  a.record(e, s);  // recorded outside, it is an ordinary event again
  CHECK(a.synchronize(e, wait) == ppsched::WaitResult::done);
}
