// The CUDA backend of ppsched-bubbles (declared in cli/bubbles_cuda.hpp): each schedule runs
// through the real executor on `CudaBackend`s, one per rank, with `synthetic_gpu_stages`
// spinning a calibrated kernel for every action's cost. The ranks are spread round-robin
// over the visible GPUs; a spin kernel holds one thread of one block, so ranks that share a
// GPU (and exchange through device-to-device copies) do not slow each other down, and a
// whole pipeline measures faithfully on one device. The timeline comes from CUDA events.
//
// Only this file is compiled by nvcc; the rest of the tool is the CPU build's C++.
#include <cuda_runtime.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cli/bubbles_backend.hpp"
#include "cli/bubbles_cuda.hpp"
#include "cli/text.hpp"
#include "ppsched/backend/cuda.hpp"
#include "ppsched/error.hpp"
#include "ppsched/runtime/world.hpp"

namespace ppsched::cli {
using namespace ppsched::cuda;  // streams, devices, spin kernels

namespace {

// `count` floats of device memory on `device`, filled with `value`: one side of a Batch.
class DeviceFloats {
 public:
  DeviceFloats(int device, std::size_t count, float value) : device_(device), count_(count) {
    if (count_ == 0) return;
    const ScopedDevice on(device_);
    void* data = nullptr;
    PPSCHED_CUDA_CHECK(cudaMalloc(&data, count_ * sizeof(float)));
    data_ = static_cast<float*>(data);
    const std::vector<float> host(count_, value);
    PPSCHED_CUDA_CHECK(cudaMemcpy(data_, host.data(), count_ * sizeof(float), cudaMemcpyHostToDevice));
  }
  ~DeviceFloats() {
    if (data_ == nullptr) return;
    const ScopedDevice on(device_);
    PPSCHED_CUDA_LOG(cudaFree(data_));
  }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  DeviceFloats(DeviceFloats&&) = delete;
  DeviceFloats& operator=(DeviceFloats&&) = delete;

  [[nodiscard]] std::span<const float> span() const noexcept { return {data_, count_}; }

 private:
  int device_;
  std::size_t count_;
  float* data_ = nullptr;
};

// Set up once by prepare() and used by every schedule's run: the ranks keep their backends
// (and NCCL communicators) from one schedule to the next.
struct CudaBubblesState {
  int gpus = 0;
  SpinCalibration calibration;
  std::vector<CudaBackend> backends;
};

std::string describe(const CudaBubblesState& state) {
  const bool nccl = !state.backends.empty() && state.backends.front().uses_nccl();
  return concat("CUDA backend (", state.gpus, " GPU", state.gpus == 1 ? "" : "s", ", ",
                                 nccl ? "NCCL" : "device-to-device copies", ", spin kernels at ",
                                 static_cast<long long>(state.calibration.cycles_per_microsecond + 0.5),
                                 " cycles/us)");
}

}  // namespace

BubblesBackend cuda_bubbles_backend() {
  auto state = std::make_shared<CudaBubblesState>();
  BubblesBackend backend;
  backend.name = "cuda";
  backend.prepare = [state](std::int32_t ranks) {
    const DeviceProbe probe = probe_devices();
    if (!probe.usable()) {
      throw BackendUnavailable(
          concat("--backend cuda found no usable GPU: ", probe.reason,
                                  ". Run on a machine with a CUDA GPU and its driver, or use --backend cpu"));
    }
    try {
      state->gpus = probe.count;
      // One calibration for every rank: the spin kernel counts cycles, and the GPUs of one
      // machine are normally of one kind.
      state->calibration = calibrate_spin(0);
      state->backends = make_cuda_backends(spread_ranks_over_devices(ranks, probe.count));
    } catch (const error& e) {
      throw BackendUnavailable(
          concat("the CUDA backend could not start on ", probe.count, " GPU(s): ", e.what()));
    }
    return describe(*state);
  };
  backend.run = [state](const Schedule& lowered, const CostModel& cost_ms, std::int32_t warmup, std::int32_t steps) {
    // The batch lives where the stages read it — inputs on stage 0's GPU, targets on the
    // last stage's — and outlives the World, whose streams may still read it until torn down.
    const auto m = static_cast<std::size_t>(lowered.microbatches);
    const auto device_of_stage = [&](std::int32_t stage) {
      return state->backends[static_cast<std::size_t>(lowered.rank_of(stage))].device();
    };
    const DeviceFloats inputs(device_of_stage(0), m, 1.0f);
    const DeviceFloats targets(device_of_stage(lowered.stages() - 1), m, 0.0f);
    const Batch batch{inputs.span(), targets.span()};
    std::vector<CudaBackend*> ranks;
    for (CudaBackend& b : state->backends) ranks.push_back(&b);
    World<CudaBackend> world(std::move(ranks), lowered,
                             synthetic_gpu_stages(cost_ms, lowered.stages(), lowered.microbatches,
                                                  std::chrono::milliseconds(1), state->calibration));
    std::vector<Timeline> measured;
    for (std::int32_t i = 0; i < warmup; ++i) (void)world.run_step(batch);
    for (std::int32_t i = 0; i < steps; ++i) measured.push_back(world.run_step(batch).timeline);
    return measured;
  };
  return backend;
}

}  // namespace ppsched::cli
