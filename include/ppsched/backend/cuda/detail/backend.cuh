// Internals of <ppsched/backend/cuda/backend.cuh>, which includes this file: the stream a running
// HostTask launches on, the accumulate kernel, and the rank's live streams and the stream that
// releases its memory. They are in ppsched::detail and not part of the API: no example or page
// uses them, and they may change in any release (docs/architecture.md).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cuda_runtime.h>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nccl.h>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "ppsched/backend/cuda/check.hpp"
#include "ppsched/backend/cuda/device.hpp"
#include "ppsched/backend/cuda/local_exchange.hpp"
#include "ppsched/backend/cuda/memory.hpp"
#include "ppsched/backend/cuda/nccl.hpp"
#include "ppsched/backend/cuda/stream.hpp"
#include "ppsched/backend/cuda/wait.hpp"
#include "ppsched/config.hpp"
#include "ppsched/error.hpp"
#include "ppsched/runtime/backend.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

// Set while a HostTask runs, so that the user's code finds the stream to launch on.
inline thread_local cudaStream_t launch_stream_handle = nullptr;

template <int Unused = 0>
__global__ void accumulate_kernel(float* to, const float* from, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    to[i] += from[i];
  }
}

// The rank's live streams and the stream that releases its memory. A release first orders the
// memory stream after everything already issued on each live stream (an event per stream),
// so a buffer is never returned to the pool while queued work still reads or writes it.
class RankStreams {
 public:
  explicit RankStreams(int device) : memory_(device), fence_(device) {}

  void add(cudaStream_t stream) {
    const std::scoped_lock lock(mutex_);
    live_.push_back(stream);
  }
  // A stream about to be destroyed: its queued work is fenced first, then it is forgotten.
  void remove(cudaStream_t stream) noexcept {
    const std::scoped_lock lock(mutex_);
    fence(stream);
    std::erase(live_, stream);
  }
  void fence_all() noexcept {
    const std::scoped_lock lock(mutex_);
    for (cudaStream_t s : live_) fence(s);
  }
  [[nodiscard]] cuda::CudaStreamRef memory_stream() const { return memory_.ref(); }

 private:
  void fence(cudaStream_t stream) noexcept {
    if (PPSCHED_CUDA_LOG(cudaEventRecord(fence_.handle(), stream))) {
      PPSCHED_CUDA_LOG(cudaStreamWaitEvent(memory_.handle(), fence_.handle(), 0));
    }
  }

  std::mutex mutex_;
  std::vector<cudaStream_t> live_;
  cuda::CudaStream memory_;
  cuda::CudaEvent fence_;
};

}  // namespace detail

namespace detail {

// Device memory of one rank (CudaBackend::buffer). Valid on every stream of the rank once
// allocate() returns; released in stream order after all work issued on them.
struct DeviceMemory {
  static float* allocate(std::size_t count, RankStreams& registry) {
    void* data = nullptr;
    PPSCHED_CUDA_CHECK(cudaMallocAsync(&data, count * sizeof(float), registry.memory_stream().handle()));
    return static_cast<float*>(data);
  }
  static void release(float* data, RankStreams& registry) noexcept {
    registry.fence_all();
    PPSCHED_CUDA_LOG(cudaFreeAsync(data, registry.memory_stream().handle()));
  }
};

// Pinned host memory of one rank (CudaBackend::host_buffer): the host pool that OFFLOAD
// writes and RELOAD reads. Pinned, because a copy from pageable memory is staged through a
// driver buffer and does not overlap compute, which is the point of offloading on a copy
// stream.
struct PinnedHostMemory {
  static float* allocate(std::size_t count, RankStreams&) {
    void* data = nullptr;
    PPSCHED_CUDA_CHECK(cudaMallocHost(&data, count * sizeof(float)));
    return static_cast<float*>(data);
  }
  // cudaFreeHost does not wait for copies still queued on a stream: fence them first, and
  // wait for the fence (host memory has no stream-ordered free).
  static void release(float* data, RankStreams& registry) noexcept {
    registry.fence_all();
    PPSCHED_CUDA_LOG(cudaStreamSynchronize(registry.memory_stream().handle()));
    PPSCHED_CUDA_LOG(cudaFreeHost(data));
  }
};

}  // namespace detail

}  // namespace ppsched
