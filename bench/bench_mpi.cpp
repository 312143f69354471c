// Per-step overhead of the MPI transport (one process per rank, MpiBackend + MpiExecutor)
// against the thread transport (one process, a World of CpuBackend ranks), at the same p.
// Run it under mpirun; the number of processes is p:
//
//   mpirun -np 4 ./bench_mpi          (add --oversubscribe where there are fewer cores)
//
// Both run 1F1B with m = 16 micro-batches of zero-cost synthetic stages, so a step's time is
// the runtime's own: issuing, events, stream workers and the transfers (1 float, or 16 Ki
// floats = 64 KiB per transfer). BM_Thread runs on rank 0 alone while the other processes
// sleep; every process runs BM_Mpi. Iteration counts are fixed (every process
// must run the same number of steps) and only rank 0 reports. Counters: `us_per_action`, the
// step's wall time over every action of every rank; the time column is one step.
#include <benchmark/benchmark.h>

#include <chrono>
#include <ppsched/backend/cpu.hpp>
#include <ppsched/backend/mpi.hpp>
#include <ppsched/lower/lower.hpp>
#include <ppsched/runtime/synthetic.hpp>
#include <ppsched/runtime/world.hpp>
#include <ppsched/schedule/generators.hpp>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int microbatches = 16;
constexpr int steps = 200;

ppsched::Schedule schedule_for(int p) {
  ppsched::ScheduleRequest req;
  req.ranks = p;
  req.microbatches = microbatches;
  return ppsched::lower(ppsched::make_schedule("1f1b", req));
}

void count(benchmark::State& state, const ppsched::Schedule& s) {
  std::size_t actions = 0;
  for (const auto& prog : s.programs) actions += prog.size();
  state.counters["p"] = static_cast<double>(s.ranks);
  state.counters["actions"] = static_cast<double>(actions);
  state.counters["us_per_action"] =
      benchmark::Counter(static_cast<double>(actions) * static_cast<double>(state.iterations()) * 1e-6,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// Waits for every process without spinning: the others sleep while rank 0 measures threads.
void quiet_barrier() {
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  for (int done = 0; done == 0;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// arg: floats per transfer
void BM_Thread(benchmark::State& state, int p) {
  const auto floats = static_cast<std::size_t>(state.range(0));
  const ppsched::Schedule schedule = schedule_for(p);
  ppsched::CpuCluster cluster(p);
  std::vector<ppsched::CpuBackend*> ranks;
  for (int r = 0; r < p; ++r) ranks.push_back(&cluster.rank(r));
  const auto stages = ppsched::synthetic_stages(ppsched::uniform_costs(0, 0, 0), p, microbatches,
                                                std::chrono::milliseconds(1), floats);
  ppsched::World<ppsched::CpuBackend> world(ranks, schedule, stages);
  const std::vector<float> inputs(floats * microbatches, 1.0f);
  const std::vector<float> targets(floats * microbatches, 0.0f);
  (void)world.run_step({inputs, targets});  // warm-up
  for (auto _ : state) benchmark::DoNotOptimize(world.run_step({inputs, targets}).losses.data());
  count(state, schedule);
}

void BM_Mpi(benchmark::State& state, ppsched::MpiBackend* backend) {
  const auto floats = static_cast<std::size_t>(state.range(0));
  const int p = backend->ranks();
  const ppsched::Schedule schedule = schedule_for(p);
  const auto stages = ppsched::synthetic_stages(ppsched::uniform_costs(0, 0, 0), p, microbatches,
                                                std::chrono::milliseconds(1), floats);
  ppsched::MpiExecutor executor(*backend, schedule, stages);
  quiet_barrier();  // rank 0 may still be measuring threads
  const std::vector<float> inputs(floats * microbatches, 1.0f);
  const std::vector<float> targets(floats * microbatches, 0.0f);
  (void)executor.run_step({inputs, targets});  // warm-up
  for (auto _ : state) benchmark::DoNotOptimize(executor.run_step({inputs, targets}).losses.data());
  count(state, schedule);
}

class Silent : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int main(int argc, char** argv) {
  ppsched::mpi::MpiSession mpi(&argc, &argv);
  ppsched::MpiBackend backend;
  const int p = backend.ranks();
  benchmark::Initialize(&argc, argv);
  for (const long floats : {1L, 16384L}) {
    benchmark::RegisterBenchmark(("BM_Thread/p:" + std::to_string(p)).c_str(), BM_Thread, p)
        ->ArgName("floats")
        ->Arg(floats)
        ->Iterations(steps)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("BM_Mpi/p:" + std::to_string(p)).c_str(), BM_Mpi, &backend)
        ->ArgName("floats")
        ->Arg(floats)
        ->Iterations(steps)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  }
  // One run per process (libbenchmark 1.7.1 crashed on a second RunSpecifiedBenchmarks):
  // rank 0 runs everything in registration order, the others only BM_Mpi, whose start waits
  // for all.
  Silent silent;
  if (backend.rank() == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    benchmark::RunSpecifiedBenchmarks(&silent, "BM_Mpi");
  }
  benchmark::Shutdown();
  return 0;
}
