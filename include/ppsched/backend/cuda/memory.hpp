// Device memory, stream-ordered. A `DeviceBuffer` is allocated with `cudaMallocAsync` on a
// stream and returned with `cudaFreeAsync` on that same stream, so allocation and release
// take their place in the stream's order like any other work and never synchronise the
// device. The allocations come from the device's default memory pool; `reserve_pool` tells
// that pool to keep freed memory (release threshold "never") and grows it once to the
// schedule's peak, so a training step's buffers are served from the pool with no call into
// the driver's allocator in steady state.
//
// The owner's rule, as for any stream-ordered allocation: every use of the buffer on another
// stream must be ordered (by an event) before the buffer is destroyed, because the release is
// ordered only after the work on its own stream. The executor's end-of-step synchronisation
// gives that for the buffers it holds.
//
// Host-only: usable from .cpp files compiled by a plain C++ compiler that link cudart.
#pragma once

#include "ppsched/config.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <utility>

#include "ppsched/backend/cuda/check.hpp"
#include "ppsched/backend/cuda/device.hpp"
#include "ppsched/backend/cuda/stream.hpp"
#include "ppsched/error.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() noexcept = default;
  // `bytes` may be 0 (a stage without an input): no allocation, data() is null.
  DeviceBuffer(std::size_t bytes, CudaStreamRef stream) : bytes_(bytes), stream_(stream.handle()) {
    if (bytes_ != 0) PPSCHED_CUDA_CHECK(cudaMallocAsync(&data_, bytes_, stream_));
  }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        bytes_(std::exchange(other.bytes_, 0)),
        stream_(std::exchange(other.stream_, nullptr)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
      stream_ = std::exchange(other.stream_, nullptr);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  [[nodiscard]] void* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  // The buffer as `count()` elements of T; throws when the size is not a multiple of T.
  template <class T>
  [[nodiscard]] std::span<T> as() const {
    static_assert(std::is_trivially_copyable_v<T>, "device buffers hold trivially copyable elements");
    if (bytes_ % sizeof(T) != 0) {
      detail::fail({"DeviceBuffer", detail::concat(bytes_, " bytes is not a whole number of ", sizeof(T), "-byte elements"), "",
            "Allocate a multiple of the element size"});
    }
    return {static_cast<T*>(data_), bytes_ / sizeof(T)};
  }

 private:
  void reset() noexcept {
    if (data_ != nullptr) PPSCHED_CUDA_LOG(cudaFreeAsync(std::exchange(data_, nullptr), stream_));
    bytes_ = 0;
  }

  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  cudaStream_t stream_ = nullptr;
};

// Makes `device`'s default memory pool keep what is freed and grows it to `peak_bytes` once,
// so allocations up to that total are served without the driver's allocator afterwards.
// `peak_bytes` is what the schedule needs at its peak (activations and gradients in flight).
inline void reserve_pool(int device, std::size_t peak_bytes) {
  const ScopedDevice on(device);
  cudaMemPool_t pool = nullptr;
  PPSCHED_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  std::uint64_t keep_everything = std::numeric_limits<std::uint64_t>::max();
  PPSCHED_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_everything));
  if (peak_bytes == 0) return;
  const CudaStream stream(device);
  { const DeviceBuffer warm(peak_bytes, stream.ref()); }
  stream.ref().synchronize();
}

// Bytes the device's default pool holds from the driver right now (in use or kept).
[[nodiscard]] inline std::size_t pool_reserved_bytes(int device) {
  cudaMemPool_t pool = nullptr;
  PPSCHED_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  std::uint64_t reserved = 0;
  PPSCHED_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  return static_cast<std::size_t>(reserved);
}

// Stream-ordered copies between host memory and a device buffer. The host memory must stay
// alive until the stream reaches the copy (pageable host memory makes the copy synchronous
// with respect to the host, pinned memory does not).
template <class T>
void copy_to_device(const DeviceBuffer& to, std::span<const T> from, CudaStreamRef stream) {
  if (from.size_bytes() > to.bytes()) {
    detail::fail({"copy_to_device", detail::concat(from.size_bytes(), " bytes do not fit a ", to.bytes(), "-byte buffer"), "",
          "Allocate the device buffer at least as large as the host data"});
  }
  if (from.empty()) return;
  PPSCHED_CUDA_CHECK(
      cudaMemcpyAsync(to.data(), from.data(), from.size_bytes(), cudaMemcpyHostToDevice, stream.handle()));
}

template <class T>
void copy_to_host(std::span<T> to, const DeviceBuffer& from, CudaStreamRef stream) {
  if (to.size_bytes() > from.bytes()) {
    detail::fail({"copy_to_host", detail::concat(to.size_bytes(), " bytes requested from a ", from.bytes(), "-byte buffer"), "",
          "Copy at most the device buffer's size"});
  }
  if (to.empty()) return;
  PPSCHED_CUDA_CHECK(cudaMemcpyAsync(to.data(), from.data(), to.size_bytes(), cudaMemcpyDeviceToHost, stream.handle()));
}

}  // namespace cuda
}  // namespace ppsched
