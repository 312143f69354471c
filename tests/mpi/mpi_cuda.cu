// One process per GPU under mpirun -np 2: the NCCL unique id goes from rank 0 to the other
// process through MPI (cuda_backend_through_mpi), and a 1F1B step of two stages moves its
// activations and gradients over NCCL. The stages compute nothing (the transfers are what is
// tested); the step must finish, and a second one after it. Without a GPU per process every
// process prints "SKIPPED: <reason>" and exits 77.
#include <cstdio>
#include <ppsched/backend/cuda/mpi_bootstrap.cuh>
#include <ppsched/backend/cuda/check.hpp>
#include <ppsched/backend/cuda/device.hpp>
#include <ppsched/backend/mpi/launch.hpp>
#include <ppsched/backend/mpi/session.hpp>
#include <ppsched/runtime/executor.hpp>
#include <ppsched/schedule/generators.hpp>
#include <vector>

int main(int argc, char** argv) {
  ppsched::mpi::MpiSession session(&argc, &argv);
  int rank = 0;
  int ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const ppsched::mpi::ProcessRank place = ppsched::mpi::process_rank_from_env();
  const int local = place.local_rank >= 0 ? place.local_rank : rank;
  const ppsched::cuda::DeviceProbe probe = ppsched::cuda::probe_devices();
  // Every process decides alone, and alike: the processes of one node see the same devices.
  if (!probe.usable() || probe.count <= local) {
    std::printf("SKIPPED: rank %d needs its own CUDA device (local rank %d): %s\n", rank, local,
                probe.usable() ? "too few devices on this node" : probe.reason.c_str());
    return 77;
  }
  try {
    ppsched::CudaBackend backend = ppsched::cuda::cuda_backend_through_mpi(MPI_COMM_WORLD, local);
    ppsched::ScheduleRequest req;
    req.ranks = ranks;
    req.microbatches = 2 * ranks;
    const ppsched::Schedule schedule = ppsched::make_schedule("1f1b", req);
    std::vector<ppsched::StageFunctions> stages(static_cast<std::size_t>(schedule.stages()));
    for (std::size_t s = 0; s < stages.size(); ++s) {
      auto& f = stages[s];
      f.input_size = 16;
      f.output_size = 16;
      f.target_size = s + 1 == stages.size() ? 16 : 0;
      f.forward = [](std::int32_t, std::span<const float>, std::span<float>) {};
      f.backward = [](std::int32_t, std::span<const float>, std::span<const float>, std::span<float>,
                      std::span<float>) {};
      if (s + 1 == stages.size()) {
        f.loss = [](std::int32_t, std::span<const float>, std::span<const float>, std::span<float>) { return 0.0f; };
      }
    }
    ppsched::Executor<ppsched::CudaBackend> executor(backend, schedule, stages);
    const std::size_t n = 16 * static_cast<std::size_t>(req.microbatches);
    float* data = nullptr;  // inputs, then targets
    PPSCHED_CUDA_CHECK(cudaSetDevice(local));
    PPSCHED_CUDA_CHECK(cudaMalloc(&data, 2 * n * sizeof(float)));
    PPSCHED_CUDA_CHECK(cudaMemset(data, 0, 2 * n * sizeof(float)));
    for (int step = 0; step < 2; ++step) {
      (void)executor.run_step({std::span<const float>(data, n), std::span<const float>(data + n, n)});
    }
    PPSCHED_CUDA_CHECK(cudaFree(data));
  } catch (const std::exception& e) {
    std::printf("FAIL rank %d: %s\n", rank, e.what());
    return 1;
  }
  if (rank == 0) std::printf("PASS: %d processes, one GPU each, two 1F1B steps over NCCL\n", ranks);
  return 0;
}
