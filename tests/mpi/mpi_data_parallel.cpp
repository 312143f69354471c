// Data x pipeline parallelism across processes (MpiOptions::replicas), under `mpirun -np 4`.
//
//   mpi_data_parallel train   The MLP of tests/mpi/mpi_training.cpp trained for three steps on
//                             d x p = 2 x 2 (1F1B, ZB-H1, ZB-V; ZB-V also with each process's
//                             streams in deterministic mode, where the sum holds the one engine
//                             thread), 4 x 1 (1F1B) and 1 x 4 (1F1B, ZB-H1), each replica on its share of a global batch of d x m
//                             micro-batches. Against the reference of tests/test_data_parallel.cpp:
//                             the model trained unpipelined, each share's gradient alone, the
//                             shares' gradients summed in replica order from zero, then one SGD
//                             step. Losses and every applied gradient must match bit for bit; at
//                             d = 4 the test also checks the data tells replica order from the
//                             reverse order (so a sum in another order could not pass). Bad
//                             input (d not dividing the job, a batch not splitting into d
//                             shares, schedule-order accumulation) throws, naming it.
//   mpi_data_parallel fault   d = 2, p = 2, 1F1B. Step 1: replica 1's rank 1 throws in a forward;
//                             step 3: replica 1's rank 0 throws in its last backward, while
//                             replica 0's rank 0 waits in the gradient sum for it. Every process
//                             must end both steps with the thrower's error, the same text,
//                             naming its replica; steps 0, 2 and 4 must succeed.
// Each process checks its own part; the exit code is 0 only when every process agrees.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <ppsched/backend/mpi.hpp>
#include <ppsched/schedule/generators.hpp>
#include <string>
#include <vector>

#include "../../examples/mlp/mlp.hpp"
#include "../../examples/mlp/mlp_stage.hpp"

namespace {

std::vector<float> data(std::size_t n, std::uint32_t seed, float scale) {
  mlp::Random random(seed);
  std::vector<float> out(n);
  for (float& x : out) x = scale * random.next();
  return out;
}

struct Setup {
  const char* family;
  int chunks;
  int replicas;
  ppsched::CpuMode mode = ppsched::CpuMode::threaded;
};

// Trains three steps; returns the number of failed checks. `orders_differ` is set when the
// reference's replica-order sum and the reverse-order sum differed somewhere.
int train_and_compare(const Setup& setup, bool& orders_differ) {
  ppsched::MpiOptions options;
  options.replicas = setup.replicas;
  options.streams.mode = setup.mode;
  ppsched::MpiBackend backend(MPI_COMM_WORLD, options);
  const int p = backend.ranks();
  const int d = backend.replicas();
  const int me = backend.rank();
  ppsched::ScheduleRequest req;
  req.ranks = p;
  req.microbatches = 2 * p;
  req.chunks = setup.chunks;
  const ppsched::Schedule schedule = ppsched::make_schedule(setup.family, req);
  const int stages = schedule.stages();
  const int m = schedule.microbatches;
  const std::size_t rows = 2;
  const std::size_t layers = static_cast<std::size_t>(std::max(4, stages) + 1);
  std::vector<std::size_t> widths{3};
  for (std::size_t l = 1; l < layers; ++l) widths.push_back(4 + l % 3);
  widths.push_back(2);
  const float loss_scale = 1.0f / static_cast<float>(rows * static_cast<std::size_t>(m * d));
  const float learning_rate = 0.5f;

  mlp::Mlp pipelined(widths, 7);
  mlp::Mlp reference(widths, 7);
  std::vector<std::unique_ptr<mlp::MlpStage>> adapters;
  std::vector<ppsched::StageFunctions> functions;
  std::vector<std::vector<float>> applied(static_cast<std::size_t>(stages));
  std::vector<std::size_t> first_parameter(static_cast<std::size_t>(stages) + 1, 0);
  for (int s = 0; s < stages; ++s) {
    const std::size_t first = layers * static_cast<std::size_t>(s) / static_cast<std::size_t>(stages);
    const std::size_t last = layers * static_cast<std::size_t>(s + 1) / static_cast<std::size_t>(stages);
    std::size_t count = 0;
    for (std::size_t l = first; l < last; ++l) count += pipelined.layers[l].parameter_count();
    first_parameter[static_cast<std::size_t>(s) + 1] = first_parameter[static_cast<std::size_t>(s)] + count;
    adapters.push_back(std::make_unique<mlp::MlpStage>(pipelined, first, last, rows, m));
    ppsched::StageFunctions f = adapters.back()->functions(s + 1 == stages, loss_scale, learning_rate);
    f.optimizer_step = [apply = f.optimizer_step, &applied, s](std::span<const float> g) {
      applied[static_cast<std::size_t>(s)].assign(g.begin(), g.end());
      apply(g);
    };
    functions.push_back(std::move(f));
  }
  ppsched::MpiExecutor executor(backend, schedule, functions);

  char layout[64];
  std::snprintf(layout, sizeof layout, "d=%d x p=%d %s%s", d, p, setup.family,
                setup.mode == ppsched::CpuMode::deterministic ? " deterministic" : "");
  int failures = 0;
  auto check = [&](bool ok, const std::string& what) {
    if (ok) return;
    ++failures;
    std::printf("FAIL %s replica %d rank %d: %s\n", layout, backend.replica(), me, what.c_str());
  };
  const std::size_t in_floats = static_cast<std::size_t>(m) * rows * widths.front();
  const std::size_t out_floats = static_cast<std::size_t>(m) * rows * widths.back();
  for (int step = 0; step < 3; ++step) {
    const auto inputs = data(in_floats * static_cast<std::size_t>(d), 100u + static_cast<std::uint32_t>(step), 1.0f);
    const auto targets = data(out_floats * static_cast<std::size_t>(d), 200u + static_cast<std::uint32_t>(step), 0.8f);
    const ppsched::Batch global{inputs, targets};
    const ppsched::RankStep& result = executor.run_step(ppsched::mpi::replica_share(global, backend));

    // The reference (tests/test_data_parallel.cpp): each share's gradient alone (a learning
    // rate of 0 leaves the weights), summed in replica order from zero, then one SGD step.
    std::vector<float> total;
    std::vector<float> reversed;
    std::vector<std::vector<float>> shares;
    std::vector<float> my_losses;
    for (int r = 0; r < d; ++r) {
      const ppsched::Batch share = ppsched::mpi::replica_share(global, d, r);
      std::vector<float> g;
      const auto l = mlp::train_step_unpipelined(reference, share.inputs, share.targets, rows, m, loss_scale, 0.0f, &g);
      if (r == backend.replica()) my_losses = l;
      shares.push_back(std::move(g));
    }
    total.assign(shares.front().size(), 0.0f);
    reversed.assign(shares.front().size(), 0.0f);
    for (int r = 0; r < d; ++r) {
      for (std::size_t i = 0; i < total.size(); ++i) total[i] += shares[static_cast<std::size_t>(r)][i];
    }
    for (int r = d; r-- > 0;) {
      for (std::size_t i = 0; i < reversed.size(); ++i) reversed[i] += shares[static_cast<std::size_t>(r)][i];
    }
    orders_differ = orders_differ || total != reversed;
    std::size_t offset = 0;
    for (auto& layer : reference.layers) {
      layer.step(std::span<const float>(total).subspan(offset, layer.parameter_count()), learning_rate);
      offset += layer.parameter_count();
    }

    if (schedule.rank_of(stages - 1) == me) {
      check(result.losses == my_losses, "losses differ from the reference at step " + std::to_string(step));
    }
    int mine = 0;
    for (int s = 0; s < stages; ++s) {
      if (schedule.rank_of(s) != me) continue;
      ++mine;
      const auto from = total.begin() + static_cast<std::ptrdiff_t>(first_parameter[static_cast<std::size_t>(s)]);
      const auto to = total.begin() + static_cast<std::ptrdiff_t>(first_parameter[static_cast<std::size_t>(s) + 1]);
      check(applied[static_cast<std::size_t>(s)] == std::vector<float>(from, to),
            "stage " + std::to_string(s) + "'s applied gradient differs from the replica-order sum at step " +
                std::to_string(step));
    }
    check(mine > 0, "no stage placed on this rank");
  }
  return failures;
}

std::vector<ppsched::StageFunctions> fault_stages(int count, const int& step, int replica) {
  constexpr std::size_t width = 4;
  std::vector<ppsched::StageFunctions> out;
  for (int s = 0; s < count; ++s) {
    ppsched::StageFunctions f;
    f.input_size = width;
    f.output_size = width;
    f.target_size = s + 1 == count ? width : 0;
    f.weight_grad_size = 3;
    f.forward = [s, &step, replica](std::int32_t mb, std::span<const float> in, std::span<float> o) {
      if (step == 1 && replica == 1 && s == 1 && mb == 1) throw std::runtime_error("boom in the forward");
      for (std::size_t i = 0; i < o.size(); ++i) o[i] = 0.5f * in[i] + 1.0f;
    };
    f.backward = [s, &step, replica](std::int32_t mb, std::span<const float>, std::span<const float> g,
                                     std::span<float> gi, std::span<float> gw) {
      if (step == 3 && replica == 1 && s == 0 && mb == 7) throw std::runtime_error("boom in the last backward");
      for (std::size_t i = 0; i < gi.size(); ++i) gi[i] = 0.5f * g[i];
      for (float& w : gw) w = g[0];
    };
    f.optimizer_step = [](std::span<const float>) {};
    if (s + 1 == count) {
      f.loss = [](std::int32_t, std::span<const float> o, std::span<const float> t, std::span<float> g) {
        float loss = 0.0f;
        for (std::size_t i = 0; i < o.size(); ++i) {
          g[i] = o[i] - t[i];
          loss += g[i] * g[i];
        }
        return loss;
      };
    }
    out.push_back(std::move(f));
  }
  return out;
}

// Bad input names what is wrong and where: a replica count that does not divide the job, a
// batch that does not split into d shares, schedule-order accumulation with replicas.
int bad_input() {
  int failures = 0;
  auto expect_error = [&](const char* what, const std::string& needle, auto&& call) {
    std::string message;
    try {
      call();
    } catch (const ppsched::error& e) {
      message = e.what();
    }
    if (message.find(needle) == std::string::npos) {
      std::printf("FAIL bad input, %s: '%s' lacks '%s'\n", what, message.c_str(), needle.c_str());
      ++failures;
    }
  };
  expect_error("3 replicas of 4 processes", "3 replicas of a 4-process job (at MpiOptions::replicas)", [] {
    ppsched::MpiOptions options;
    options.replicas = 3;
    ppsched::MpiBackend backend(MPI_COMM_WORLD, options);
  });
  const std::vector<float> five(5, 0.0f);
  expect_error("a batch of 5 floats in 2 shares", "5 input and 5 target floats for 2 replicas",
               [&] { (void)ppsched::mpi::replica_share({five, five}, 2, 0); });
  const std::vector<float> four(4, 0.0f);
  const std::vector<ppsched::MicrobatchSize> sizes(4, {1, 1});
  expect_error("a batch with sizes in 2 shares", "a batch with variable-length micro-batches (at Batch::sizes)",
               [&] { (void)ppsched::mpi::replica_share({four, four, {}, sizes}, 2, 0); });
  ppsched::MpiOptions options;
  options.replicas = 2;
  ppsched::MpiBackend backend(MPI_COMM_WORLD, options);
  ppsched::ScheduleRequest req;
  req.ranks = 2;
  req.microbatches = 4;
  const ppsched::Schedule schedule = ppsched::make_schedule("1f1b", req);
  int step = 0;
  const auto functions = fault_stages(schedule.stages(), step, -1);
  ppsched::ExecutorOptions eo;
  eo.accumulation = ppsched::GradAccumulation::schedule_order;
  expect_error("schedule-order accumulation", "(at ExecutorOptions::accumulation)",
               [&] { ppsched::MpiExecutor executor(backend, schedule, functions, eo); });
  return failures;
}

int train() {
  int failures = bad_input();
  bool orders_differ = false;
  for (const Setup& s : {Setup{"1f1b", 1, 2}, Setup{"zb-h1", 1, 2}, Setup{"zb-v", 2, 2}, Setup{"1f1b", 1, 4},
                         Setup{"zb-v", 2, 2, ppsched::CpuMode::deterministic},
                         Setup{"1f1b", 1, 1}, Setup{"zb-h1", 1, 1}}) {
    bool differ = false;
    failures += train_and_compare(s, differ);
    if (s.replicas > 2) orders_differ = orders_differ || differ;
  }
  if (!orders_differ) {
    std::printf("FAIL: at d = 4 the reverse replica order gave the same bits: the data cannot tell the orders apart\n");
    ++failures;
  }
  return failures;
}

int fault() {
  ppsched::MpiOptions options;
  options.replicas = 2;
  ppsched::MpiBackend backend(MPI_COMM_WORLD, options);
  ppsched::ScheduleRequest req;
  req.ranks = 2;
  req.microbatches = 8;
  const ppsched::Schedule schedule = ppsched::make_schedule("1f1b", req);
  int step = 0;
  const auto functions = fault_stages(schedule.stages(), step, backend.replica());
  ppsched::ExecutorOptions eo;
  eo.watchdog = std::chrono::milliseconds(30'000);  // a backstop: the abort notes end the step
  ppsched::MpiExecutor executor(backend, schedule, functions, eo);
  const std::vector<float> inputs(16 * 4, 1.0f);
  const std::vector<float> targets(16 * 4, 0.0f);
  const ppsched::Batch global{inputs, targets};
  int failures = 0;
  // "pipeline rank R of replica D (process K)": a bare "rank" would not say which (issue 24).
  const char* expected[] = {"", "pipeline rank 1 of replica 1 (process 3): rank 1, stage 1, micro-batch 1", "",
                            "pipeline rank 0 of replica 1 (process 2): rank 0, stage 0, micro-batch 7", ""};
  const char* boom[] = {"", "boom in the forward", "", "boom in the last backward", ""};
  for (step = 0; step < 5; ++step) {
    std::string message;
    try {
      (void)executor.run_step(ppsched::mpi::replica_share(global, backend));
    } catch (const ppsched::error& e) {
      message = e.what();
    }
    const bool ok = std::strlen(expected[step]) == 0
                        ? message.empty()
                        : message.find(expected[step]) != std::string::npos && message.find(boom[step]) != std::string::npos;
    if (!ok) std::printf("FAIL replica %d rank %d step %d: '%s'\n", backend.replica(), backend.rank(), step, message.c_str());
    failures += ok ? 0 : 1;
    // Every process holds the same text: compare with process 0's.
    std::vector<char> first(4096, '\0');
    int world = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world);
    if (world == 0) std::strncpy(first.data(), message.c_str(), first.size() - 1);
    MPI_Bcast(first.data(), static_cast<int>(first.size()), MPI_CHAR, 0, MPI_COMM_WORLD);
    if (message != first.data()) {
      std::printf("FAIL replica %d rank %d step %d: '%s' differs from process 0's\n", backend.replica(), backend.rank(),
                  step, message.c_str());
      ++failures;
    }
    if (world == 0 && !message.empty()) std::printf("every process ended step %d with: %s\n", step, message.c_str());
  }
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  const bool fault_mode = argc > 1 && std::strcmp(argv[1], "fault") == 0;
  ppsched::mpi::MpiSession session(&argc, &argv);
  int world_rank = 0;
  int world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (world_size != 4) {
    if (world_rank == 0) std::printf("FAIL: run with mpirun -np 4 (got %d processes)\n", world_size);
    return 1;
  }
  int failures = 0;
  try {
    failures = fault_mode ? fault() : train();
  } catch (const std::exception& e) {
    std::printf("FAIL process %d: %s\n", world_rank, e.what());
    ++failures;
  }
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank == 0) std::printf("%s: %d failed checks\n", total == 0 ? "PASS" : "FAIL", total);
  return total == 0 ? 0 : 1;
}
