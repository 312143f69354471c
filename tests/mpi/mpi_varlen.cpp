// Variable-length batches and a new schedule every step with one process per rank (issue 42),
// run under `mpirun -np 4`.
//
//   mpi_varlen train   a 4-rank pipeline of small tanh stages whose micro-batches have their
//                      own lengths (Batch::sizes), each step on another schedule (family,
//                      micro-batch count and, with 8 stages, placement) through
//                      MpiExecutor::set_schedule. In every process a World of 4 threads runs
//                      the same schedules on the same batches; each process checks its own
//                      stages against it: losses, gradients and weights bit for bit, the
//                      floats its transfers moved (exactly the sizes, fewer than the capacity)
//                      and its pools (the same growth as the World's executor of its rank,
//                      none once every schedule was seen).
//   mpi_varlen faults  what the processes must agree on, each followed by a step that must
//                      run: Batch::sizes that differ between the two processes of a boundary,
//                      sizes one process refuses, set_schedule with another schedule on one
//                      process (or lowered with other times), run_step on one process while the
//                      others call set_schedule,
//                      and a schedule one process's executor refuses (every other goes back to
//                      the previous one). Every process must throw, naming what differs. Then
//                      2 replicas of 2 ranks: each replica's own sizes are no difference, a
//                      difference within one is.
//
// Each process prints its failed checks; the job passes only when every process agrees.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <ppsched/backend/mpi.hpp>
#include <ppsched/costs/cost_model.hpp>
#include <ppsched/runtime/world.hpp>
#include <ppsched/schedule/generators.hpp>
#include <string>
#include <vector>

namespace {

constexpr std::size_t hidden = 3;
constexpr std::size_t longest = 5;                // tokens
constexpr std::size_t capacity = longest * hidden;  // floats at every boundary

// Tokens of micro-batch k at step t: 1..longest, varying with both.
std::size_t tokens(std::size_t k, int t) { return 1 + (k * 3 + static_cast<std::size_t>(t) * 2) % longest; }

// y = tanh(x * w[i % hidden]) over the micro-batch's own floats; the loss 0.5 (y - target)^2.
struct Model {
  std::vector<std::vector<float>> weights;
  std::vector<std::vector<float>> totals;  // the last optimizer step's gradient, per stage
  int wrong_span = 0;                      // a callable saw a span not of its micro-batch's size
  const std::vector<std::size_t>* expected = nullptr;  // floats per micro-batch

  explicit Model(int stages) : weights(static_cast<std::size_t>(stages)), totals(static_cast<std::size_t>(stages)) {
    for (std::size_t s = 0; s < weights.size(); ++s) {
      for (std::size_t j = 0; j < hidden; ++j) weights[s].push_back(0.5f + 0.1f * static_cast<float>((s * 5 + j * 3) % 7));
    }
  }
  void check(std::size_t n, int mb) {
    if (expected != nullptr && n != (*expected)[static_cast<std::size_t>(mb)]) ++wrong_span;
  }
  std::vector<ppsched::StageFunctions> functions() {
    std::vector<ppsched::StageFunctions> out(weights.size());
    for (std::size_t s = 0; s < out.size(); ++s) {
      ppsched::StageFunctions& f = out[s];
      std::vector<float>& w = weights[s];
      f.input_size = capacity;
      f.output_size = capacity;
      f.weight_grad_size = hidden;
      f.forward = [this, &w](const ppsched::StageContext& c, std::span<const float> x, std::span<float> y) {
        check(x.size(), c.microbatch);
        check(y.size(), c.microbatch);
        for (std::size_t i = 0; i < x.size(); ++i) y[i] = std::tanh(x[i] * w[i % hidden]);
      };
      f.backward = [this, &w, s](const ppsched::StageContext& c, std::span<const float> x, std::span<const float> g,
                                 std::span<float> gi, std::span<float> wg) {
        check(g.size(), c.microbatch);
        for (std::size_t i = 0; i < x.size(); ++i) {
          const float y = std::tanh(x[i] * w[i % hidden]);
          const float d = g[i] * (1.0f - y * y);
          if (s > 0) gi[i] = d * w[i % hidden];
          wg[i % hidden] += d * x[i];
        }
      };
      f.backward_input = [this, &w, s](const ppsched::StageContext& c, std::span<const float> x, std::span<const float> g,
                                       std::span<float> gi) {
        check(g.size(), c.microbatch);
        if (s == 0) return;
        for (std::size_t i = 0; i < x.size(); ++i) {
          const float y = std::tanh(x[i] * w[i % hidden]);
          gi[i] = g[i] * (1.0f - y * y) * w[i % hidden];
        }
      };
      f.backward_weight = [&w](const ppsched::StageContext&, std::span<const float> x, std::span<const float> g,
                               std::span<float> wg) {
        for (std::size_t i = 0; i < x.size(); ++i) {
          const float y = std::tanh(x[i] * w[i % hidden]);
          wg[i % hidden] += g[i] * (1.0f - y * y) * x[i];
        }
      };
      f.optimizer_step = [this, &w, s](std::span<const float> total) {
        totals[s].assign(total.begin(), total.end());
        for (std::size_t j = 0; j < hidden; ++j) w[j] -= 0.05f * total[j];
      };
    }
    out.back().target_size = capacity;
    out.back().loss = [this](const ppsched::StageContext& c, std::span<const float> y, std::span<const float> t,
                             std::span<float> g) {
      check(y.size(), c.microbatch);
      float loss = 0.0f;
      for (std::size_t i = 0; i < y.size(); ++i) {
        loss += 0.5f * (y[i] - t[i]) * (y[i] - t[i]);
        g[i] = y[i] - t[i];
      }
      return loss;
    };
    return out;
  }
};

// m micro-batches of their own lengths at step t: inputs and targets at the capacity each,
// and every stage's size.
struct Data {
  std::vector<float> inputs, targets;
  std::vector<std::size_t> floats;
  std::vector<ppsched::MicrobatchSize> sizes;
  Data(int stages, int m, int t) {
    inputs.assign(static_cast<std::size_t>(m) * capacity, 0.0f);
    targets.assign(static_cast<std::size_t>(m) * capacity, 0.0f);
    for (std::size_t k = 0; k < static_cast<std::size_t>(m); ++k) {
      const std::size_t n = tokens(k, t) * hidden;
      floats.push_back(n);
      for (std::size_t i = 0; i < n; ++i) {
        inputs[k * capacity + i] = 0.01f * static_cast<float>((k * 31 + i * 7 + static_cast<std::size_t>(t)) % 97) - 0.4f;
        targets[k * capacity + i] = 0.02f * static_cast<float>((k * 13 + i * 5) % 29) - 0.3f;
      }
    }
    for (int s = 0; s < stages; ++s) {
      for (std::size_t n : floats) sizes.push_back({n, n});
    }
  }
  [[nodiscard]] ppsched::Batch batch() const { return {inputs, targets, {}, sizes}; }
};

ppsched::Schedule make(const char* family, int chunks, int m, int ranks = 4) {
  ppsched::ScheduleRequest req;
  req.ranks = ranks;
  req.microbatches = m;
  req.chunks = chunks;
  return ppsched::make_schedule(family, req);
}

struct Plan {
  const char* family;
  int chunks;
  int m;
};

int failures = 0;
int me = 0;
void check(bool ok, const std::string& what) {
  if (ok) return;
  ++failures;
  std::printf("FAIL rank %d: %s\n", me, what.c_str());
  std::fflush(stdout);
}

// Runs `plans` round after round (every step another schedule) on one MpiExecutor and, in
// this process, one World; compares what this rank computed and moved with the World's.
void train(const std::vector<Plan>& plans, int stages, const char* name) {
  ppsched::MpiOptions mo;
  ppsched::MpiBackend backend(MPI_COMM_WORLD, mo);
  Model mpi_model(stages), world_model(stages);
  const auto mpi_functions = mpi_model.functions();
  const auto world_functions = world_model.functions();
  const Plan& first = plans.front();
  ppsched::MpiExecutor executor(backend, make(first.family, first.chunks, first.m), mpi_functions);
  ppsched::CpuCluster cluster(4);
  std::vector<ppsched::CpuBackend*> ranks;
  for (int r = 0; r < 4; ++r) ranks.push_back(&cluster.rank(r));
  ppsched::World<ppsched::CpuBackend> world(ranks, make(first.family, first.chunks, first.m), world_functions);
  int step = 0;
  std::size_t seen_growths = 0;
  for (int round = 0; round < 3; ++round) {
    for (const Plan& plan : plans) {
      const std::string at = ppsched::detail::concat(name, " ", plan.family, " m=", plan.m, " round ", round);
      const ppsched::Schedule schedule = make(plan.family, plan.chunks, plan.m);
      const ppsched::PoolGrowth grew = executor.set_schedule(schedule);
      (void)world.set_schedule(schedule);
      // This rank's pools as the World's executor of the same rank holds them.
      const ppsched::ExecutorPools& mine = executor.pools();
      const ppsched::ExecutorPools& reference = world.executor(me).pools();
      check(mine.buffers == reference.buffers && mine.floats == reference.floats && mine.events == reference.events &&
                mine.growths == reference.growths,
            at + ": the pools differ from the World's executor of this rank");
      if (round > 0) check(!grew.grew(), at + ": the pools grew though every schedule was seen");
      seen_growths += grew.grew() ? 1 : 0;
      check(executor.schedule().microbatches == plan.m && executor.schedule() == world.schedule(),
            at + ": the schedule is not the World's");

      const Data data(stages, plan.m, step);
      mpi_model.expected = &data.floats;
      world_model.expected = &data.floats;
      const std::size_t sent = backend.floats_sent(), received = backend.floats_received();
      const std::size_t world_sent = cluster.rank(me).floats_sent(), world_received = cluster.rank(me).floats_received();
      const ppsched::RankStep& result = executor.run_step(data.batch());
      const ppsched::StepResult& reference_step = world.run_step(data.batch());
      const std::size_t moved = backend.floats_sent() - sent;
      check(moved == cluster.rank(me).floats_sent() - world_sent &&
                backend.floats_received() - received == cluster.rank(me).floats_received() - world_received,
            at + ": the floats moved differ from the World's rank");
      // What the padded batch would move: every transfer at the capacity.
      std::size_t transfers = 0;
      for (const ppsched::Action& a : executor.schedule().programs[static_cast<std::size_t>(me)]) {
        transfers += a.op == ppsched::Op::SEND_F || a.op == ppsched::Op::SEND_B ? 1 : 0;
      }
      check(transfers == 0 || moved < transfers * capacity, at + ": sent the capacity, not the sizes");
      if (executor.schedule().rank_of(stages - 1) == me) {
        check(result.losses == reference_step.losses, at + ": losses differ from the World's");
      }
      for (int s = 0; s < stages; ++s) {
        if (executor.schedule().rank_of(s) != me) continue;
        const auto i = static_cast<std::size_t>(s);
        check(mpi_model.totals[i] == world_model.totals[i], at + ": stage " + std::to_string(s) + "'s gradient differs");
        check(mpi_model.weights[i] == world_model.weights[i], at + ": stage " + std::to_string(s) + "'s weights differ");
      }
      // A new placement moves a stage to another process, with the state of its callables:
      // the executor moves activations and gradients only, so the weights go from each
      // stage's process to every other here.
      for (int s = 0; s < stages; ++s) {
        MPI_Bcast(mpi_model.weights[static_cast<std::size_t>(s)].data(), static_cast<int>(hidden), MPI_FLOAT,
                  executor.schedule().rank_of(s), MPI_COMM_WORLD);
      }
      ++step;
    }
  }
  check(mpi_model.wrong_span == 0, std::string(name) + ": a callable saw a span not of its micro-batch's size");
  check(executor.pools().growths == seen_growths, std::string(name) + ": growths miscounted");
}

// `call` must throw on this process with a message holding every one of `want`.
void expect_error(const std::string& what, const std::function<void()>& call, const std::vector<std::string>& want) {
  std::string message;
  try {
    call();
  } catch (const ppsched::error& e) {
    message = e.what();
  }
  if (message.empty()) {
    check(false, what + ": did not throw");
    return;
  }
  for (const std::string& w : want) check(message.find(w) != std::string::npos, what + ": '" + message + "' lacks '" + w + "'");
}

void faults() {
  using namespace std::chrono_literals;
  ppsched::MpiOptions mo;
  mo.watchdog = 20'000ms;
  ppsched::MpiBackend backend(MPI_COMM_WORLD, mo);
  Model model(4);
  auto functions = model.functions();
  // Process 2 holds stage 2 without the split backward: a schedule that splits it is refused there.
  functions[2].backward_input = nullptr;
  functions[2].backward_weight = nullptr;
  ppsched::MpiExecutor executor(backend, make("1f1b", 1, 4), functions);
  int step = 0;
  const auto works = [&](const std::string& after) {
    const Data data(4, executor.schedule().microbatches, step++);
    std::string message;
    try {
      (void)executor.run_step(data.batch());
    } catch (const ppsched::error& e) {
      message = e.what();
    }
    check(message.empty(), "the step after " + after + " failed: " + message);
  };
  works("nothing");

  // Rank 2 says micro-batch 3 enters stage 2 (and leaves it, and stage 1) with one token
  // more: consistent on its own, but not what rank 1 sends.
  {
    Data data(4, 4, step);
    const std::size_t other = data.sizes[3].output == capacity ? hidden : data.sizes[3].output + hidden;
    const std::string sent = std::to_string(data.sizes[1 * 4 + 3].output);
    if (me == 2) {
      for (int s = 0; s < 4; ++s) data.sizes[static_cast<std::size_t>(s) * 4 + 3] = {other, other};
    }
    expect_error("sizes that differ", [&] { (void)executor.run_step(data.batch()); },
                 {"Batch::sizes differ", "stage 1 sends micro-batch 3 as " + sent + " floats on rank 1 but stage 2 receives " +
                                             std::to_string(other) + " on rank 2",
                  "micro-batch 3 (Batch::sizes[7].output and [11].input)"});
    works("sizes that differ");
  }
  // Rank 3 gives no sizes, which is the declared capacity: its neighbour's smaller sizes differ.
  {
    const Data data(4, 4, step);
    ppsched::Batch batch = data.batch();
    if (me == 3) batch.sizes = {};
    std::size_t k = 0;
    while (data.floats[k] == capacity) ++k;
    expect_error("sizes on one side only", [&] { (void)executor.run_step(batch); },
                 {"stage 2 sends micro-batch " + std::to_string(k) + " as " + std::to_string(data.floats[k]) +
                  " floats on rank 2 but stage 3 receives 15 on rank 3 (the declared size: its Batch::sizes is empty)"});
    works("sizes on one side only");
  }
  // Rank 1's sizes are above the capacity: it refuses them, and every process stops before the step.
  {
    Data data(4, 4, step);
    if (me == 1) data.sizes[2].output = data.sizes[4 + 2].input = capacity + 1;
    expect_error("sizes one process refuses", [&] { (void)executor.run_step(data.batch()); },
                 {me == 1 ? "above the 15 the stage declares"
                          : "rank 1 refused its batch: batch: Batch::sizes gives stage 0's output of micro-batch 2 16 floats"});
    works("sizes one process refuses");
  }
  // Rank 1 is given another schedule.
  expect_error("another schedule on one process",
               [&] { (void)executor.set_schedule(me == 1 ? make("gpipe", 1, 8) : make("1f1b", 1, 8)); },
               {"the processes were given different schedules",
                "rank 1's schedule is 'gpipe' (4 ranks, 8 micro-batches, 4 stages) and rank 0's '1f1b' (4 ranks, 8 "
                "micro-batches, 4 stages)"});
  check(executor.schedule().name == "1f1b" && executor.schedule().microbatches == 4,
        "a refused set_schedule changed the schedule");
  works("another schedule on one process");
  // Rank 2 lowers the same schedule with other times: its transfers come in another order.
  {
    const ppsched::CostModel unit = ppsched::uniform_costs(1, 1, 1), slow = ppsched::uniform_costs(1, 50, 0.01);
    expect_error("another lowering on one process",
                 [&] { (void)executor.set_schedule(make("1f1b", 1, 8), me == 2 ? slow : unit); },
                 {"the processes lowered the schedule differently: schedule '1f1b' was lowered to other transfers on "
                  "rank 2 than on rank 0"});
    check(executor.schedule().microbatches == 4, "a set_schedule lowered differently changed the schedule");
    works("another lowering on one process");
  }
  // Rank 3 runs a step while the others change schedule.
  {
    const Data data(4, 4, step);
    expect_error("another call on one process",
                 [&] {
                   if (me == 3) {
                     (void)executor.run_step(data.batch());
                   } else {
                     (void)executor.set_schedule(make("gpipe", 1, 4));
                   }
                 },
                 {"rank 3 called run_step while rank 0 called set_schedule"});
    works("another call on one process");
  }
  // ZB-H1 splits the backward, which stage 2 (rank 2) cannot: every process keeps 1F1B.
  expect_error("a schedule one executor refuses", [&] { (void)executor.set_schedule(make("zb-h1", 1, 8)); },
               {me == 2 ? "splits backward into BI and BW" : "rank 2 refused the new schedule: ", "stage 2"});
  check(executor.schedule().name == "1f1b", "a schedule one executor refused was kept");
  check(executor.executor().schedule().name == "1f1b", "an executor kept a schedule another refused");
  works("a schedule one executor refuses");
  // And a good one still goes.
  (void)executor.set_schedule(make("gpipe", 1, 6));
  check(executor.schedule().microbatches == 6, "set_schedule after the faults did not take");
  works("a new schedule after the faults");
}

// 2 replicas of a 2-rank pipeline: each replica's micro-batches have their own sizes, which
// is no difference; one within a replica is, named by its processes.
void replicas() {
  ppsched::MpiOptions mo;
  mo.replicas = 2;
  ppsched::MpiBackend backend(MPI_COMM_WORLD, mo);
  Model model(2);
  const auto functions = model.functions();
  ppsched::MpiExecutor executor(backend, make("1f1b", 1, 4, 2), functions);
  const int replica = backend.replica();
  for (int step = 0; step < 2; ++step) {
    const Data data(2, 4, 2 * step + replica);
    std::string message;
    try {
      (void)executor.run_step(data.batch());
    } catch (const ppsched::error& e) {
      message = e.what();
    }
    check(message.empty(), "replicas with their own sizes: " + message);
  }
  Data data(2, 4, 7 + replica);
  const Data replica1(2, 4, 8);  // what the message names, on every process
  const std::string sent = std::to_string(replica1.floats[1]);
  const std::size_t other = replica1.floats[1] == capacity ? hidden : replica1.floats[1] + hidden;
  if (me == 3) data.sizes[1] = data.sizes[4 + 1] = {other, other};
  expect_error("sizes that differ within replica 1", [&] { (void)executor.run_step(data.batch()); },
               {"stage 0 sends micro-batch 1 as " + sent + " floats on pipeline rank 0 of replica 1 (process 2) but "
                "stage 1 receives " + std::to_string(other) + " on pipeline rank 1 of replica 1 (process 3)"});
  const Data again(2, 4, 9 + replica);
  std::string message;
  try {
    (void)executor.run_step(again.batch());
  } catch (const ppsched::error& e) {
    message = e.what();
  }
  check(message.empty(), "the step after sizes that differ within a replica failed: " + message);
}

}  // namespace

int main(int argc, char** argv) {
  ppsched::mpi::MpiSession session(&argc, &argv);
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 4 || argc < 2) {
    if (me == 0) std::printf("FAIL: run with mpirun -np 4 and a mode (train or faults)\n");
    return 1;
  }
  const std::string mode = argv[1];
  try {
    if (mode == "train") {
      train({{"gpipe", 1, 8}, {"1f1b", 1, 4}, {"zb-h1", 1, 6}, {"gpipe", 1, 3}, {"zb-h2", 1, 8}}, 4, "4 stages");
      // 8 stages: the looped placement and the V of ZB-V alternate.
      train({{"interleaved-1f1b", 2, 8}, {"zb-v", 2, 4}, {"looped-bfs", 2, 8}, {"zb-v", 2, 8}, {"interleaved-1f1b", 2, 4}}, 8,
            "8 stages");
    } else if (mode == "faults") {
      faults();
      replicas();
    } else {
      check(false, "unknown mode " + mode);
    }
  } catch (const std::exception& e) {
    check(false, e.what());
  }
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (me == 0) std::printf("%s: mpi_varlen %s, %d failed checks\n", total == 0 ? "PASS" : "FAIL", mode.c_str(), total);
  return total == 0 ? 0 : 1;
}
