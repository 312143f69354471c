// Synthetic stages on a GPU, for measuring a schedule's real bubbles against the simulator:
// the GPU counterpart of runtime/synthetic.hpp. Each F, B, BI and BW enqueues the calibrated
// spin kernel for the time the cost model gives that (stage, micro-batch), then moves its
// `floats` floats along (forward input to output, output gradient to input gradient) with
// one device-to-device copy, so real bytes cross every stage boundary. A spin kernel holds
// one thread of one block, so the ranks of a whole pipeline can share one GPU without
// slowing each other down.
//
// The loss writes a zero gradient and returns 0 without reading the device: a host read
// would make the last rank's host wait for its GPU at every micro-batch, which is exactly
// the overhead these stages exist to measure without.
//
// Device code: include from .cu files compiled by nvcc. Batches given to these stages are
// device memory (stage 0's input on its rank's device).
#pragma once

#include "ppsched/config.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "ppsched/backend/cuda/backend.cuh"
#include "ppsched/backend/cuda/check.hpp"
#include "ppsched/backend/cuda/spin.cuh"
#include "ppsched/error.hpp"
#include "ppsched/runtime/stage.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/costs/cost_model.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace detail {

inline void copy_on_launch_stream(std::span<float> to, std::span<const float> from) {
  const std::size_t n = std::min(to.size(), from.size());
  if (n == 0) return;
  PPSCHED_CUDA_CHECK(
      cudaMemcpyAsync(to.data(), from.data(), n * sizeof(float), cudaMemcpyDeviceToDevice, cuda::launch_stream().handle()));
}

}  // namespace detail
namespace cuda {

// One StageFunctions per stage whose F, B, BI and BW spin for the model's time of that
// (stage, micro-batch), `per_unit` being one unit of the model's time (e.g. 1 ms).
[[nodiscard]] inline std::vector<StageFunctions> synthetic_gpu_stages(const CostModel& cost, std::int32_t stages,
                                                                      std::int32_t microbatches,
                                                                      std::chrono::nanoseconds per_unit,
                                                                      const SpinCalibration& calibration,
                                                                      std::size_t floats = 1) {
  check_cost_model(cost, stages, microbatches);
  if (per_unit.count() <= 0) {
    detail::fail({"synthetic_gpu_stages", detail::concat("per_unit is ", per_unit.count(), " ns"), "",
          "Give the duration of one unit of the cost model, e.g. 1 ms"});
  }
  if (!(calibration.cycles_per_microsecond > 0.0)) {
    detail::fail({"synthetic_gpu_stages", "the spin kernel is not calibrated", "",
          "Pass calibrate_spin(device) for the device the stages run on"});
  }
  auto model = std::make_shared<const CostModel>(cost);
  const double us_per_unit = static_cast<double>(per_unit.count()) / 1000.0;
  std::vector<StageFunctions> out;
  for (std::int32_t s = 0; s < stages; ++s) {
    // Spins for the model's time of `op` on (s, mb) on the task's stream.
    auto spin = [model, s, microbatches, us_per_unit, calibration](Op op, std::int32_t mb) {
      const double units = compute_time(*model, Action{op, s, mb, 0}, microbatches);
      launch_spin(launch_stream(), units * us_per_unit, calibration);
    };
    StageFunctions f;
    f.input_size = floats;
    f.output_size = floats;
    f.target_size = s + 1 == stages ? floats : 0;
    f.forward = [spin](std::int32_t mb, std::span<const float> in, std::span<float> output) {
      spin(Op::F, mb);
      detail::copy_on_launch_stream(output, in);
    };
    f.backward = [spin](std::int32_t mb, std::span<const float>, std::span<const float> grad_output,
                        std::span<float> grad_input, std::span<float>) {
      spin(Op::B, mb);
      detail::copy_on_launch_stream(grad_input, grad_output);
    };
    f.backward_input = [spin](std::int32_t mb, std::span<const float>, std::span<const float> grad_output,
                              std::span<float> grad_input) {
      spin(Op::BI, mb);
      detail::copy_on_launch_stream(grad_input, grad_output);
    };
    f.backward_weight = [spin](std::int32_t mb, std::span<const float>, std::span<const float>, std::span<float>) {
      spin(Op::BW, mb);
    };
    if (s + 1 == stages) {
      f.loss = [](std::int32_t, std::span<const float>, std::span<const float>, std::span<float> grad_output) {
        if (!grad_output.empty()) {
          PPSCHED_CUDA_CHECK(
              cudaMemsetAsync(grad_output.data(), 0, grad_output.size_bytes(), launch_stream().handle()));
        }
        return 0.0f;
      };
    }
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace cuda
}  // namespace ppsched
