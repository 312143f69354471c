// A kernel that occupies its stream for a given number of microseconds: the synthetic stage
// of the bubble benchmarks. It spins on `clock64()` (the SM's cycle counter) in one thread of
// one block, so several ranks' spin kernels run side by side on one GPU without competing,
// and a whole pipeline can be measured on a single device. Cycles per microsecond are not a
// fixed property of the card (boost clocks move), so `calibrate_spin` measures them at
// start-up with timing events, as the median over a few runs of known cycle counts.
//
// Device code: include from .cu files compiled by nvcc.
#pragma once

#include "ppsched/config.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>

#include "ppsched/backend/cuda/check.hpp"
#include "ppsched/backend/cuda/device.hpp"
#include "ppsched/backend/cuda/stream.hpp"
#include "ppsched/error.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace detail {

// A template so that every translation unit may include this header (one definition per
// instantiation, merged by the linker).
template <int Unused = 0>
__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

}  // namespace detail
namespace cuda {

struct SpinCalibration {
  double cycles_per_microsecond = 0.0;

  [[nodiscard]] constexpr long long cycles_for(double microseconds) const noexcept {
    return static_cast<long long>(microseconds * cycles_per_microsecond + 0.5);
  }
};

// Enqueues a spin of `microseconds` on `stream`. 0 enqueues nothing (an empty stage).
inline void launch_spin(CudaStreamRef stream, double microseconds, const SpinCalibration& calibration) {
  if (!(microseconds >= 0.0) || !std::isfinite(microseconds)) {
    detail::fail({"spin kernel", detail::concat("duration ", microseconds, " us is not a finite, non-negative number"), "",
          "Give synthetic stages durations >= 0"});
  }
  if (!(calibration.cycles_per_microsecond > 0.0)) {
    detail::fail({"spin kernel", "is not calibrated", "", "Call calibrate_spin(device) once and pass its result"});
  }
  if (microseconds == 0.0) return;
  detail::spin_kernel<<<1, 1, 0, stream.handle()>>>(calibration.cycles_for(microseconds));
  PPSCHED_CUDA_CHECK_LAUNCH();
}

// Measures the device's cycles per microsecond: a warm-up spin, then `runs` spins of a known
// cycle count timed by event pairs; the median ratio is kept (it ignores a run that a clock
// change or a preemption disturbed).
[[nodiscard]] inline SpinCalibration calibrate_spin(int device, long long cycles_per_run = 20'000'000) {
  if (cycles_per_run <= 0) {
    detail::fail({"calibrate_spin", detail::concat("cycles per run ", cycles_per_run, " is not positive"), "",
          "Use a count worth a few milliseconds, e.g. 20'000'000"});
  }
  const ScopedDevice on(device);
  const CudaStream stream(device);
  const CudaEvent start(device, EventTiming::enabled);
  const CudaEvent stop(device, EventTiming::enabled);
  detail::spin_kernel<<<1, 1, 0, stream.handle()>>>(cycles_per_run);  // warm-up: clocks ramp, module loads
  PPSCHED_CUDA_CHECK_LAUNCH();
  constexpr std::size_t runs = 5;
  std::array<double, runs> ratios{};
  for (double& ratio : ratios) {
    start.ref().record(stream.ref());
    detail::spin_kernel<<<1, 1, 0, stream.handle()>>>(cycles_per_run);
    PPSCHED_CUDA_CHECK_LAUNCH();
    stop.ref().record(stream.ref());
    stop.ref().synchronize();
    const double microseconds = 1000.0 * static_cast<double>(elapsed_ms(start.ref(), stop.ref()));
    if (!(microseconds > 0.0)) {
      detail::fail({"calibrate_spin", "a timed spin took no measurable time", detail::concat("device ", device),
            "Raise cycles_per_run"});
    }
    ratio = static_cast<double>(cycles_per_run) / microseconds;
  }
  std::sort(ratios.begin(), ratios.end());
  return {ratios[runs / 2]};
}

}  // namespace cuda
}  // namespace ppsched
