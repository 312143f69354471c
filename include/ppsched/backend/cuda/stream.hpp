// Owners and non-owning references for CUDA streams and events, the two objects that carry
// every ordering the executor expresses: work on one stream runs in order, and order across
// streams exists only through an event recorded on one stream and waited on by another.
// `CudaStream` and `CudaEvent` own their handle (move-only, destroyed exactly once);
// `CudaStreamRef` and `CudaEventRef` are cheap copies that never destroy anything. The refs
// cannot be built from `0` or `nullptr`: in CUDA those mean the legacy default stream, which
// synchronises with every other stream and would silently serialise the pipeline.
//
// Streams are created non-blocking (no implicit synchronisation with the legacy stream).
// Events are created with `cudaEventDisableTiming` — the cheap kind — unless they are asked
// for as timing events, which only the per-action timestamps use.
//
// Host-only: usable from .cpp files compiled by a plain C++ compiler that link cudart.
#pragma once

#include "ppsched/config.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "ppsched/backend/cuda/check.hpp"
#include "ppsched/backend/cuda/device.hpp"
#include "ppsched/error.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace cuda {

class CudaEventRef;

class CudaStreamRef {
 public:
  explicit constexpr CudaStreamRef(cudaStream_t handle) noexcept : handle_(handle) {}
  CudaStreamRef(int) = delete;
  CudaStreamRef(std::nullptr_t) = delete;

  [[nodiscard]] constexpr cudaStream_t handle() const noexcept { return handle_; }
  [[nodiscard]] int device() const {
    int device = 0;
    PPSCHED_CUDA_CHECK(cudaStreamGetDevice(handle_, &device));
    return device;
  }
  // True when all work issued so far has completed.
  [[nodiscard]] bool ready() const {
    const cudaError_t code = cudaStreamQuery(handle_);
    if (code == cudaErrorNotReady) return false;
    PPSCHED_CUDA_CHECK(code);
    return true;
  }
  void synchronize() const { PPSCHED_CUDA_CHECK(cudaStreamSynchronize(handle_)); }
  // Later work on this stream starts after the work captured by `event`'s last record.
  inline void wait(CudaEventRef event) const;

  friend constexpr bool operator==(CudaStreamRef, CudaStreamRef) noexcept = default;

 private:
  cudaStream_t handle_;
};

class CudaEventRef {
 public:
  explicit constexpr CudaEventRef(cudaEvent_t handle) noexcept : handle_(handle) {}
  CudaEventRef(int) = delete;
  CudaEventRef(std::nullptr_t) = delete;

  [[nodiscard]] constexpr cudaEvent_t handle() const noexcept { return handle_; }
  // Captures the work issued to `stream` so far.
  void record(CudaStreamRef stream) const { PPSCHED_CUDA_CHECK(cudaEventRecord(handle_, stream.handle())); }
  // True when the captured work has completed (or the event was never recorded, as in CUDA).
  [[nodiscard]] bool ready() const {
    const cudaError_t code = cudaEventQuery(handle_);
    if (code == cudaErrorNotReady) return false;
    PPSCHED_CUDA_CHECK(code);
    return true;
  }
  void synchronize() const { PPSCHED_CUDA_CHECK(cudaEventSynchronize(handle_)); }

  friend constexpr bool operator==(CudaEventRef, CudaEventRef) noexcept = default;

 private:
  cudaEvent_t handle_;
};

inline void CudaStreamRef::wait(CudaEventRef event) const {
  PPSCHED_CUDA_CHECK(cudaStreamWaitEvent(handle_, event.handle(), 0));
}

// Milliseconds between two completed timing events (both created with EventTiming::enabled).
[[nodiscard]] inline float elapsed_ms(CudaEventRef start, CudaEventRef end) {
  float ms = 0.0f;
  PPSCHED_CUDA_CHECK(cudaEventElapsedTime(&ms, start.handle(), end.handle()));
  return ms;
}

enum class StreamPriority : int { normal, high };

// An owned, non-blocking stream on one device. Default-constructed or moved from, it owns
// nothing, and ref() throws rather than hand out the legacy stream.
class CudaStream {
 public:
  CudaStream() noexcept = default;
  explicit CudaStream(int device, StreamPriority priority = StreamPriority::normal) : device_(device) {
    const ScopedDevice on(device);
    int least = 0;
    int greatest = 0;
    PPSCHED_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    const int value = priority == StreamPriority::high ? greatest : least;
    PPSCHED_CUDA_CHECK(cudaStreamCreateWithPriority(&handle_, cudaStreamNonBlocking, value));
  }
  ~CudaStream() { reset(); }
  CudaStream(CudaStream&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)), device_(other.device_) {}
  CudaStream& operator=(CudaStream&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
      device_ = other.device_;
    }
    return *this;
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  // A moved-from stream owns nothing; using it is an error rather than the legacy stream.
  [[nodiscard]] CudaStreamRef ref() const {
    if (handle_ == nullptr) detail::fail({"CudaStream", "used after being moved from", "", "Use the stream it was moved into"});
    return CudaStreamRef(handle_);
  }
  [[nodiscard]] cudaStream_t handle() const noexcept { return handle_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] bool owns() const noexcept { return handle_ != nullptr; }

 private:
  void reset() noexcept {
    if (handle_ != nullptr) PPSCHED_CUDA_LOG(cudaStreamDestroy(std::exchange(handle_, nullptr)));
  }

  cudaStream_t handle_ = nullptr;
  int device_ = 0;
};

enum class EventTiming : bool { disabled, enabled };

// An owned event on one device. Timing is off unless asked for: timing events cost more to
// record and are only needed for the per-action timestamps. Default-constructed or moved
// from, it owns nothing.
class CudaEvent {
 public:
  CudaEvent() noexcept = default;
  explicit CudaEvent(int device, EventTiming timing = EventTiming::disabled) : device_(device) {
    const ScopedDevice on(device);
    const unsigned flags = timing == EventTiming::enabled ? cudaEventDefault : cudaEventDisableTiming;
    PPSCHED_CUDA_CHECK(cudaEventCreateWithFlags(&handle_, flags));
  }
  ~CudaEvent() { reset(); }
  CudaEvent(CudaEvent&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)), device_(other.device_) {}
  CudaEvent& operator=(CudaEvent&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
      device_ = other.device_;
    }
    return *this;
  }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  [[nodiscard]] CudaEventRef ref() const {
    if (handle_ == nullptr) detail::fail({"CudaEvent", "used after being moved from", "", "Use the event it was moved into"});
    return CudaEventRef(handle_);
  }
  [[nodiscard]] cudaEvent_t handle() const noexcept { return handle_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] bool owns() const noexcept { return handle_ != nullptr; }

 private:
  void reset() noexcept {
    if (handle_ != nullptr) PPSCHED_CUDA_LOG(cudaEventDestroy(std::exchange(handle_, nullptr)));
  }

  cudaEvent_t handle_ = nullptr;
  int device_ = 0;
};

}  // namespace cuda
}  // namespace ppsched
