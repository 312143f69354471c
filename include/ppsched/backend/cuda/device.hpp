// Which GPUs exist and which one the calling thread talks to. CUDA keeps a "current device"
// per host thread and creates streams, events and allocations on it, so every owner in the
// backend sets the device it belongs to through `ScopedDevice`, which restores the previous
// one on exit. `probe_devices()` is the non-throwing question a test or a benchmark asks at
// start-up to decide whether to run or to skip with a reason.
//
// Host-only: usable from .cpp files compiled by a plain C++ compiler that link cudart.
#pragma once

#include "ppsched/config.hpp"

#include <cuda_runtime_api.h>

#include <string>

#include "ppsched/backend/cuda/check.hpp"
#include "ppsched/error.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace cuda {

// The answer to "can this process use a GPU?", without throwing.
struct DeviceProbe {
  int count = 0;       // visible devices; 0 when none or when the runtime failed
  std::string reason;  // why none is usable; empty when count > 0

  [[nodiscard]] bool usable() const noexcept { return count > 0; }
};

[[nodiscard]] inline DeviceProbe probe_devices() {
  int count = 0;
  const cudaError_t code = cudaGetDeviceCount(&count);
  if (code != cudaSuccess) {
    (void)cudaGetLastError();
    return {
        0, detail::concat("cudaGetDeviceCount returned ", cudaGetErrorName(code), " (", cudaGetErrorString(code), ")")};
  }
  if (count == 0) return {0, "cudaGetDeviceCount reports 0 devices (check CUDA_VISIBLE_DEVICES)"};
  return {count, {}};
}

// Visible devices; throws when the runtime cannot be initialised.
[[nodiscard]] inline int device_count() {
  int count = 0;
  PPSCHED_CUDA_CHECK(cudaGetDeviceCount(&count));
  return count;
}

[[nodiscard]] inline int current_device() {
  int device = 0;
  PPSCHED_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

// Throws unless `device` names a visible GPU; `subject` says who asked ("placement", ...).
inline void require_device(int device, const std::string& subject) {
  const int count = device_count();
  if (device < 0 || device >= count) {
    detail::fail({subject, detail::concat("device ", device, " does not exist"), detail::concat(count, " visible device(s)"),
          "Use a device index in [0, cudaGetDeviceCount()) (mind CUDA_VISIBLE_DEVICES)"});
  }
}

// Makes `device` current for the calling thread for the guard's lifetime.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) : previous_(current_device()) {
    if (device != previous_) PPSCHED_CUDA_CHECK(cudaSetDevice(device));
  }
  ~ScopedDevice() {
    int now = previous_;
    if (PPSCHED_CUDA_LOG(cudaGetDevice(&now)) && now != previous_) PPSCHED_CUDA_LOG(cudaSetDevice(previous_));
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  ScopedDevice(ScopedDevice&&) = delete;
  ScopedDevice& operator=(ScopedDevice&&) = delete;

  [[nodiscard]] int previous() const noexcept { return previous_; }

 private:
  int previous_;
};

}  // namespace cuda
}  // namespace ppsched
