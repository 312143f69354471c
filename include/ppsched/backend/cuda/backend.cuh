// `CudaBackend`: the runtime's Backend concept on one GPU, one rank per object. Each
// operation is the CUDA or NCCL call the concept names, and nothing else: every ordering and
// scheduling decision stays in the shared executor, which the CPU backend proves on any
// machine. What this layer adds is only what CUDA needs to be used safely:
//
// - streams are non-blocking and registered with the rank, so that a buffer is released
//   (`cudaFreeAsync`) only after the work already issued on every one of the rank's streams;
// - buffers come from the device's stream-ordered pool, which `reserve` grows once to the
//   schedule's peak so the steady state never calls the driver's allocator;
// - a `HostTask` runs on the issuing thread with the rank's device current and its stream
//   available as `launch_stream()`, so user code launches its kernels there;
// - peers are reached through NCCL (`NcclCommunicator`, one GPU per rank) or, when ranks
//   share a GPU, through device-to-device copies (`LocalExchange`), both posted per group;
// - host waits are bounded and watch NCCL's asynchronous error; a failure is sticky, as in
//   CUDA, until `recover()`, which rebuilds the communicator from the next unique id.
//
// One backend is used by one host thread (its rank's), like a CUDA context with one thread
// per GPU. Device code: include from .cu files compiled by nvcc (accumulate is a kernel).
#pragma once

#include "ppsched/config.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "ppsched/backend/cuda/check.hpp"
#include "ppsched/backend/cuda/graph.hpp"
#include "ppsched/backend/cuda/device.hpp"
#include "ppsched/backend/cuda/local_exchange.hpp"
#include "ppsched/backend/cuda/memory.hpp"
#include "ppsched/backend/cuda/nccl.hpp"
#include "ppsched/backend/cuda/stream.hpp"
#include "ppsched/backend/cuda/wait.hpp"
#include "ppsched/error.hpp"
#include "ppsched/runtime/backend.hpp"
#include "ppsched/backend/cuda/detail/backend.cuh"

namespace ppsched::inline PPSCHED_MODE {
namespace cuda {

// Where each generation of a rank's NCCL communicator gets its unique id: generation 0 is the
// first communicator, each recover() after a failure builds the next one.
using UniqueIdSource = std::function<ncclUniqueId(std::uint64_t generation, const HostWait& wait)>;

// Ids through files: generation g lives at `base` (g = 0) or `base.<g>`; rank 0 writes, the
// other ranks wait for the file.
[[nodiscard]] inline UniqueIdSource unique_ids_through_file(std::filesystem::path base, int rank) {
  return [base = std::move(base), rank](std::uint64_t generation, const HostWait& wait) {
    std::filesystem::path path = base;
    if (generation != 0) path += detail::concat('.', generation);
    return share_unique_id_through_file(path, rank, wait);
  };
}

// Ids for ranks that all live in this process: the first rank to ask for a generation makes
// its id, the others get the same one.
[[nodiscard]] inline UniqueIdSource unique_ids_in_process() {
  struct Shared {
    std::mutex mutex;
    std::map<std::uint64_t, ncclUniqueId> ids;
  };
  auto shared = std::make_shared<Shared>();
  return [shared](std::uint64_t generation, const HostWait&) {
    const std::scoped_lock lock(shared->mutex);
    auto [it, inserted] = shared->ids.try_emplace(generation);
    if (inserted) it->second = new_unique_id();
    return it->second;
  };
}

struct CudaBackendOptions {
  // Bound of every host wait inside an operation that has no HostWait of its own: matching a
  // group with the peers, NCCL settling, allocation. The executor's waits carry their own.
  std::chrono::nanoseconds timeout = std::chrono::seconds(60);
  // create_event() makes timing events (elapsed_ms works on any event). Off: the cheaper
  // cudaEventDisableTiming events, and elapsed_ms throws.
  bool timing_events = true;
};

// The stream a HostTask launched by CudaBackend must enqueue its kernels on.
[[nodiscard]] inline CudaStreamRef launch_stream() {
  if (detail::launch_stream_handle == nullptr) {
    detail::fail({"launch_stream()", "called outside a task launched by CudaBackend", "",
          "Call it from a stage callable while the executor runs it"});
  }
  return CudaStreamRef(detail::launch_stream_handle);
}

// A stream of one rank (CudaBackend::stream).
class CudaRankStream {
 public:
  CudaRankStream() noexcept = default;
  CudaRankStream(int device, std::shared_ptr<detail::RankStreams> registry)
      : stream_(device), registry_(std::move(registry)) {
    registry_->add(stream_.handle());
  }
  ~CudaRankStream() {
    if (registry_ && stream_.owns()) registry_->remove(stream_.handle());
  }
  CudaRankStream(CudaRankStream&&) noexcept = default;
  CudaRankStream& operator=(CudaRankStream&& other) noexcept {
    if (this != &other) {
      if (registry_ && stream_.owns()) registry_->remove(stream_.handle());
      stream_ = std::move(other.stream_);
      registry_ = std::move(other.registry_);
    }
    return *this;
  }
  CudaRankStream(const CudaRankStream&) = delete;
  CudaRankStream& operator=(const CudaRankStream&) = delete;

  [[nodiscard]] CudaStreamRef ref() const { return stream_.ref(); }
  [[nodiscard]] int device() const noexcept { return stream_.device(); }

 private:
  CudaStream stream_;
  std::shared_ptr<detail::RankStreams> registry_;
};

// One rank's floats in the memory `Memory` allocates and frees (detail::DeviceMemory,
// detail::PinnedHostMemory): owned, movable, freed after the work the rank's streams were
// given before the free.
template <class Memory>
class CudaBuffer {
 public:
  CudaBuffer() noexcept = default;
  CudaBuffer(std::size_t count, std::shared_ptr<detail::RankStreams> registry)
      : registry_(std::move(registry)), count_(count) {
    if (count_ != 0) data_ = Memory::allocate(count_, *registry_);
  }
  ~CudaBuffer() { release(); }
  CudaBuffer(CudaBuffer&& other) noexcept
      : registry_(std::move(other.registry_)),
        data_(std::exchange(other.data_, nullptr)),
        count_(std::exchange(other.count_, 0)) {}
  CudaBuffer& operator=(CudaBuffer&& other) noexcept {
    if (this != &other) {
      release();
      registry_ = std::move(other.registry_);
      data_ = std::exchange(other.data_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;

  [[nodiscard]] float* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return count_ * sizeof(float); }

 private:
  void release() noexcept {
    if (data_ == nullptr) return;
    Memory::release(std::exchange(data_, nullptr), *registry_);
    count_ = 0;
  }

  std::shared_ptr<detail::RankStreams> registry_;
  float* data_ = nullptr;
  std::size_t count_ = 0;
};

using CudaRankBuffer = CudaBuffer<detail::DeviceMemory>;
using CudaPinnedBuffer = CudaBuffer<detail::PinnedHostMemory>;

class CudaBackend {
 public:
  using stream = CudaRankStream;
  using event = CudaEvent;
  using buffer = CudaRankBuffer;
  using host_buffer = CudaPinnedBuffer;

  // A rank that reaches its peers through NCCL. `ids` gives the unique id of each later
  // communicator generation (recover() after a failure); generation 0 is `comm` itself.
  CudaBackend(NcclCommunicator comm, UniqueIdSource ids, CudaBackendOptions options = {})
      : rank_(comm.rank()),
        ranks_(comm.size()),
        device_(comm.device()),
        options_(options),
        streams_(make_registry(device_)),
        nccl_(std::move(comm)),
        ids_(std::move(ids)) {}

  // A rank that reaches in-process peers through device-to-device copies.
  CudaBackend(int rank, int device, std::shared_ptr<LocalExchange> exchange, CudaBackendOptions options = {})
      : rank_(rank),
        ranks_(exchange ? exchange->ranks() : 0),
        device_(device),
        options_(options),
        streams_(make_registry(device)),
        exchange_(std::move(exchange)) {
    if (!exchange_)
      detail::fail({"CudaBackend", "built without an exchange", "", "Pass the LocalExchange shared by the ranks"});
    if (rank < 0 || rank >= ranks_) {
      detail::fail({"CudaBackend", detail::concat("rank ", rank, " of ", ranks_, " ranks"), "", "Use a rank in [0, ranks)"});
    }
    epoch_ = exchange_->epoch();
  }

  // One process per GPU: joins `ranks` ranks through a unique id file (rank 0 writes it).
  [[nodiscard]] static CudaBackend join_through_file(int ranks, int rank, int device,
                                                     const std::filesystem::path& id_file,
                                                     CudaBackendOptions options = {}, std::stop_token stop = {}) {
    UniqueIdSource ids = unique_ids_through_file(id_file, rank);
    const ncclUniqueId id = ids(0, HostWait::within(options.timeout, stop));
    return CudaBackend(NcclCommunicator::init_rank(ranks, rank, device, id, options.timeout, stop), std::move(ids),
                       options);
  }

  CudaBackend(CudaBackend&&) noexcept = default;
  CudaBackend& operator=(CudaBackend&&) noexcept = default;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;
  ~CudaBackend() = default;

  // ---------------------------------------------------------------- streams and events
  [[nodiscard]] stream create_stream() {
    return guarded([&] { return stream(device_, streams_); });
  }
  [[nodiscard]] event create_event() {
    return guarded(
        [&] { return event(device_, options_.timing_events ? EventTiming::enabled : EventTiming::disabled); });
  }
  void record(event& e, stream& s) {
    guarded([&] { e.ref().record(s.ref()); });
  }
  void wait(stream& s, const event& e) {
    guarded([&] { s.ref().wait(e.ref()); });
  }
  [[nodiscard]] bool query(const event& e) {
    return guarded([&] { return e.ref().ready(); });
  }
  // On a failed rank these still wait (bounded) for the work already queued — the executor
  // drains its streams this way after a failure — and then throw the rank's error.
  [[nodiscard]] WaitResult synchronize(const event& e, const HostWait& limit) {
    drain_if_failed([&] { return e.ref().ready(); }, limit);
    return guarded([&] { return watched_wait([&] { return e.ref().ready(); }, limit, "cudaEventQuery"); });
  }
  [[nodiscard]] WaitResult synchronize(stream& s, const HostWait& limit) {
    drain_if_failed([&] { return s.ref().ready(); }, limit);
    return guarded([&] { return watched_wait([&] { return s.ref().ready(); }, limit, "cudaStreamQuery"); });
  }
  [[nodiscard]] double elapsed_ms(const event& start, const event& end) {
    if (!options_.timing_events) {
      detail::fail({"CudaBackend::elapsed_ms", "events were created without timing", detail::concat("rank ", rank_),
            "Set CudaBackendOptions::timing_events to measure a timeline"});
    }
    return guarded([&] { return static_cast<double>(cuda::elapsed_ms(start.ref(), end.ref())); });
  }

  // ---------------------------------------------------------------- memory
  // `count` floats, usable on every stream of this rank when the call returns.
  [[nodiscard]] buffer allocate(std::size_t count) {
    return guarded([&] {
      buffer b(count, streams_);
      const CudaStreamRef memory = streams_->memory_stream();
      const WaitResult r = poll_until([&] { return memory.ready(); }, HostWait::within(options_.timeout));
      if (r != WaitResult::done) {
        detail::fail({detail::concat("CudaBackend rank ", rank_),
              detail::concat("allocation of ", count, " floats ", to_string(r)), "cudaMallocAsync",
              "Raise CudaBackendOptions::timeout"});
      }
      return b;
    });
  }
  [[nodiscard]] std::span<float> span(const buffer& b) const noexcept { return {b.data(), b.size()}; }
  // The host pool of offloaded activations: `count` floats of pinned memory.
  [[nodiscard]] host_buffer allocate_host(std::size_t count) {
    return guarded([&] { return host_buffer(count, streams_); });
  }
  [[nodiscard]] std::span<float> span(const host_buffer& b) const noexcept { return {b.data(), b.size()}; }
  // ExecutorOptions::keep_outputs: the first to.size() floats of `from` into host memory, in
  // stream order (a micro-batch of Batch::sizes fills a prefix of its buffer). `to` is pageable,
  // so the call returns once the copy is done.
  void copy_to_host(stream& s, const buffer& from, std::span<float> to) {
    guarded([&] {
      if (to.size() > from.size()) {
        detail::fail({"CudaBackend::copy_to_host", detail::concat("copies ", to.size(), " floats out of a buffer of ", from.size()),
              detail::concat("rank ", rank_), "Copy at most the buffer's size"});
      }
      if (to.empty()) return;
      PPSCHED_CUDA_CHECK(cudaMemcpyAsync(to.data(), from.data(), to.size_bytes(), cudaMemcpyDeviceToHost, s.ref().handle()));
    });
  }
  // `count` floats from `from` at `from_offset` into `to` at `to_offset`, in stream order
  // (ExecutorOptions::tied_weights: a stage's slice of its gradient).
  void copy(stream& s, buffer& to, std::size_t to_offset, const buffer& from, std::size_t from_offset,
            std::size_t count) {
    guarded([&] {
      if (to_offset > to.size() || count > to.size() - to_offset || from_offset > from.size() ||
          count > from.size() - from_offset) {
        detail::fail({"CudaBackend::copy", detail::concat("copies ", count, " floats from offset ", from_offset, " of ",
                                                  from.size(), " to offset ", to_offset, " of ", to.size()),
              detail::concat("rank ", rank_), "Copy within both buffers"});
      }
      if (count == 0) return;
      PPSCHED_CUDA_CHECK(cudaMemcpyAsync(to.data() + to_offset, from.data() + from_offset, count * sizeof(float),
                                         cudaMemcpyDeviceToDevice, s.ref().handle()));
    });
  }
  // StageContext::stream: the cudaStream_t a stage's kernels go to.
  [[nodiscard]] const void* native_handle(const stream& s) const { return static_cast<const void*>(s.ref().handle()); }
  void zero(stream& s, buffer& b) {
    guarded([&] {
      if (b.size() != 0) PPSCHED_CUDA_CHECK(cudaMemsetAsync(b.data(), 0, b.bytes(), s.ref().handle()));
    });
  }
  void accumulate(stream& s, buffer& to, const buffer& from) {
    guarded([&] {
      if (to.size() != from.size()) {
        detail::fail({"CudaBackend::accumulate", detail::concat("adds ", from.size(), " floats into ", to.size()),
              detail::concat("rank ", rank_), "Accumulate buffers of the same size"});
      }
      if (to.size() == 0) return;
      constexpr unsigned threads = 256;
      const std::size_t blocks = std::min<std::size_t>((to.size() + threads - 1) / threads, 4096);
      detail::accumulate_kernel<<<static_cast<unsigned>(blocks), threads, 0, s.ref().handle()>>>(to.data(), from.data(),
                                                                                                 to.size());
      PPSCHED_CUDA_CHECK_LAUNCH();
    });
  }
  // Grows the device's pool once to `bytes` and keeps what is freed (see reserve_pool).
  void reserve(std::size_t bytes) {
    guarded([&] { reserve_pool(device_, bytes); });
  }

  // ---------------------------------------------------------------- work
  // Runs the task now, on this thread, with the rank's device current and `s` as
  // launch_stream(). The buffer uses are for the CPU backend's checker; CUDA needs none.
  void launch(stream& s, HostTask task, std::span<const BufferUse<buffer>> /*uses*/) {
    ensure_ok();
    if (task.run == nullptr) {
      detail::fail({"CudaBackend::launch", "task has no function", std::string(task.label), "Build tasks with host_task(f)"});
    }
    const cudaStream_t previous = std::exchange(detail::launch_stream_handle, s.ref().handle());
    try {
      make_current();
      task.run(task.context);
      detail::launch_stream_handle = previous;
      const cudaError_t launched = cudaPeekAtLastError();
      if (launched != cudaSuccess) {
        const std::string call = detail::concat("kernel launch in task '", task.label, "'");
        detail::throw_cuda_failure(launched, call.c_str(), __FILE__, __LINE__);
      }
    } catch (const std::exception& e) {
      detail::launch_stream_handle = previous;
      remember(e.what());
      throw;
    } catch (...) {
      detail::launch_stream_handle = previous;
      remember(detail::concat("task '", task.label, "' threw a non-standard exception"));
      throw;
    }
  }

  // ---------------------------------------------------------------- communication
  void group_start() {
    guarded([&] {
      if (group_depth_++ == 0 && nccl_) nccl_->group_start();
    });
  }
  void group_end() {
    guarded([&] {
      if (group_depth_ == 0) {
        detail::fail({"CudaBackend::group_end", "without group_start", detail::concat("rank ", rank_),
              "Pair every group_end with a group_start"});
      }
      if (--group_depth_ != 0) return;
      if (nccl_) {
        nccl_->group_end();
      } else {
        post_local_group();
      }
    });
  }
  void send(const buffer& b, std::size_t count, int peer, stream& s, PeerTag tag) {
    guarded([&] {
      require_count(b, count, "send");
      if (nccl_) {
        nccl_->send(b.data(), count * sizeof(float), peer, s.ref());
        return;
      }
      local_sends_.push_back({peer, b.data(), count * sizeof(float), device_, s.ref(), tag});
      if (group_depth_ == 0) post_local_group();
    });
  }
  void recv(buffer& b, std::size_t count, int peer, stream& s, PeerTag tag) {
    guarded([&] {
      require_count(b, count, "recv");
      if (nccl_) {
        nccl_->recv(b.data(), count * sizeof(float), peer, s.ref());
        return;
      }
      local_recvs_.push_back({peer, b.data(), count * sizeof(float), device_, s.ref(), tag});
      if (group_depth_ == 0) post_local_group();
    });
  }

  // ---------------------------------------------------------------- graphs (cuda/graph.hpp)
  // ExecutorOptions::graphs: the step's work captured once (cudaStreamBeginCapture in
  // thread-local mode, NCCL's sends and receives captured with it) and launched each step.
  using graph = CudaGraph;
  void begin_capture(stream& s) {
    guarded([&] { CudaGraph::begin(s.ref()); });
  }
  // Ends the capture even on a failed rank (a stream left capturing refuses every later
  // call), then throws the rank's error if it has one.
  [[nodiscard]] graph end_capture(stream& s) {
    try {
      make_current();
      graph g = CudaGraph::end(s.ref());
      ensure_ok();
      return g;
    } catch (const std::exception& e) {
      remember(e.what());
      throw;
    }
  }
  void replay(graph& g, stream& s) {
    guarded([&] { g.launch(s.ref()); });
  }
  // Ranks that share a GPU exchange through device copies ordered by events between two
  // ranks' streams: one rank's graph cannot hold that order.
  [[nodiscard]] std::string capture_unsupported() const {
    if (nccl_ || ranks_ <= 1) return {};
    return "ranks that share a GPU exchange through device copies ordered by events between two ranks' streams, "
           "which one rank's graph cannot hold (CudaTransport::device_copy); capture needs NCCL, one GPU per rank";
  }

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int ranks() const noexcept { return ranks_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] bool uses_nccl() const noexcept { return nccl_.has_value(); }

  // Internal waits (group matching, NCCL settling) also give up when `stop` is requested.
  void watch(std::stop_token stop) {
    stop_ = stop;
    if (nccl_) nccl_->watch(std::move(stop));
  }

  // ---------------------------------------------------------------- failure
  // Ends this rank's transfers now (ncclCommAbort, or the exchange's epoch) and makes the
  // failure sticky. Call it from the rank's own thread; other ranks learn through the stop
  // token their waits watch.
  void abort(std::string_view reason) {
    remember(std::string(reason));
    group_depth_ = 0;
    local_sends_.clear();
    local_recvs_.clear();
    if (nccl_) nccl_->abort();
    if (exchange_) exchange_->abort(epoch_, reason);
  }

  // After a failed step, on every rank: clears CUDA's last error and the sticky failure and
  // rejoins the peers — a new NCCL communicator from the next unique id (the old one is aborted,
  // which ends transfers the failed step left posted), or the exchange's next epoch. Every rank
  // must call it, since a new communicator needs all of them. Internal waits stop watching the
  // old stop token; call watch() again for the next step. A sticky CUDA error (a faulting
  // kernel) cannot be cleared in-process and throws.
  void recover() {
    const cudaError_t last = cudaGetLastError();
    if (is_sticky_cuda_error(last)) {
      throw cuda_error(last, format_error({detail::concat("CudaBackend rank ", rank_),
                                           detail::concat("cannot recover from ", cudaGetErrorName(last)), "",
                                           detail::cuda_error_fix(last)}));
    }
    group_depth_ = 0;
    local_sends_.clear();
    local_recvs_.clear();
    stop_ = {};
    if (nccl_) {
      if (!ids_) {
        detail::fail({detail::concat("CudaBackend rank ", rank_), "cannot rebuild its NCCL communicator", "",
              "Build the backend with a UniqueIdSource"});
      }
      nccl_->abort();
      ++generation_;
      const ncclUniqueId id = ids_(generation_, HostWait::within(options_.timeout));
      // Not waiting for the peers here: the World recovers its ranks one after another on one
      // thread, so the new communicator finishes joining at its first operation.
      nccl_ = NcclCommunicator::init_rank(ranks_, rank_, device_, id, options_.timeout, {}, false);
    }
    if (exchange_) epoch_ = exchange_->enter(epoch_ + 1);
    failure_.reset();
  }
  [[nodiscard]] bool failed() const noexcept { return failure_.has_value(); }

 private:
  [[nodiscard]] static std::shared_ptr<detail::RankStreams> make_registry(int device) {
    require_device(device, "CudaBackend");
    return std::make_shared<detail::RankStreams>(device);
  }

  void ensure_ok() const {
    if (failure_) throw error(*failure_);
  }
  void remember(std::string message) {
    if (!failure_) failure_ = detail::concat("rank ", rank_, " (device ", device_, "): ", message);
  }

  // The thread that drives this rank works on the rank's device: kernel launches, copies and
  // allocations go to the current device, so it is set here once and left set (one host thread
  // per GPU, as NCCL's model has it).
  void make_current() const {
    int current = -1;
    PPSCHED_CUDA_CHECK(cudaGetDevice(&current));
    if (current != device_) PPSCHED_CUDA_CHECK(cudaSetDevice(device_));
  }

  // Runs `f` unless the rank has failed; a failure inside becomes the rank's sticky error.
  template <class F>
  std::invoke_result_t<F&> guarded(F&& f) {
    ensure_ok();
    try {
      make_current();
      return f();
    } catch (const std::exception& e) {
      remember(e.what());
      throw;
    }
  }

  template <class Done>
  void drain_if_failed(Done&& done, const HostWait& limit) {
    if (!failure_) return;
    try {
      make_current();
      (void)poll_until(done, limit);
    } catch (const std::exception&) {  // a query failing too: the first error is what counts
    }
    throw error(*failure_);
  }

  template <class Done>
  [[nodiscard]] WaitResult watched_wait(Done&& done, const HostWait& limit, const char* call) {
    ncclResult_t async = ncclSuccess;
    const WaitResult r = poll_until(
        [&] {
          if (done()) return true;
          if (nccl_ && nccl_->healthy()) {  // after an abort there is nothing left to watch
            async = nccl_->async_error();
            return async != ncclSuccess && async != ncclInProgress;
          }
          return false;
        },
        limit);
    if (async != ncclSuccess && async != ncclInProgress) {
      const char* last = nccl_->handle() != nullptr ? ncclGetLastError(nccl_->handle()) : "";
      const std::string message = format_error(
          {detail::concat("NCCL communicator (rank ", rank_, ")"),
           detail::concat("asynchronous error ", ncclGetErrorString(async), ": ", last, "; communicator aborted"), call,
           detail::nccl_error_fix(async)});
      nccl_->abort();
      throw nccl_error(async, message);
    }
    return r;
  }

  void require_count(const buffer& b, std::size_t count, const char* op) const {
    if (count > b.size()) {
      detail::fail({detail::concat("CudaBackend::", op), detail::concat(count, " floats from a buffer of ", b.size()),
            detail::concat("rank ", rank_), "Transfer at most the buffer's size"});
    }
  }

  void post_local_group() {
    const HostWait wait = HostWait::within(options_.timeout, stop_);
    try {
      exchange_->post_group(rank_, epoch_, local_sends_, local_recvs_, wait);
    } catch (...) {
      local_sends_.clear();
      local_recvs_.clear();
      throw;
    }
    local_sends_.clear();
    local_recvs_.clear();
  }

  int rank_ = 0;
  int ranks_ = 0;
  int device_ = 0;
  CudaBackendOptions options_{};
  std::shared_ptr<detail::RankStreams> streams_;
  std::optional<NcclCommunicator> nccl_;
  UniqueIdSource ids_;
  std::uint64_t generation_ = 0;
  std::shared_ptr<LocalExchange> exchange_;
  std::uint64_t epoch_ = 0;
  std::vector<LocalExchange::Send> local_sends_;
  std::vector<LocalExchange::Recv> local_recvs_;
  int group_depth_ = 0;
  std::stop_token stop_{};
  std::optional<std::string> failure_;
};

static_assert(check_backend<CudaBackend>());

// ---------------------------------------------------------------- placement

enum class CudaTransport : std::uint8_t {
  automatic,    // NCCL when every rank has its own GPU, device copies otherwise
  nccl,         // NCCL; every rank needs its own GPU
  device_copy,  // in-process copies; any placement
};

// Rank r on device r % devices: several ranks share a GPU when ranks > devices.
[[nodiscard]] inline std::vector<int> spread_ranks_over_devices(int ranks, int devices) {
  if (ranks <= 0 || devices <= 0) {
    detail::fail({"spread_ranks_over_devices", detail::concat(ranks, " ranks over ", devices, " devices"), "",
          "Ask for at least one rank and one device"});
  }
  std::vector<int> device_of_rank(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) device_of_rank[static_cast<std::size_t>(r)] = r % devices;
  return device_of_rank;
}

// One backend per rank, all in this process (one host thread each drives its own).
// device_of_rank[r] is rank r's GPU.
[[nodiscard]] inline std::vector<CudaBackend> make_cuda_backends(std::span<const int> device_of_rank,
                                                                 CudaBackendOptions options = {},
                                                                 CudaTransport transport = CudaTransport::automatic) {
  const int ranks = static_cast<int>(device_of_rank.size());
  if (ranks == 0) detail::fail({"make_cuda_backends", "no ranks", "", "Place at least one rank"});
  for (const int d : device_of_rank) require_device(d, "make_cuda_backends");
  std::vector<int> sorted(device_of_rank.begin(), device_of_rank.end());
  std::sort(sorted.begin(), sorted.end());
  const bool shared_gpu = std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end();
  if (transport == CudaTransport::nccl && shared_gpu) {
    detail::fail({"make_cuda_backends", "NCCL needs a GPU per rank but ranks share one", "device_of_rank",
          "Use CudaTransport::device_copy (or automatic) to run several ranks on one GPU"});
  }
  const bool use_nccl = transport == CudaTransport::nccl || (transport == CudaTransport::automatic && !shared_gpu);
  std::vector<CudaBackend> backends;
  backends.reserve(device_of_rank.size());
  if (use_nccl) {
    std::vector<NcclCommunicator> comms = NcclCommunicator::init_all_nonblocking(device_of_rank, options.timeout);
    UniqueIdSource ids = unique_ids_in_process();
    for (NcclCommunicator& comm : comms) backends.emplace_back(std::move(comm), ids, options);
  } else {
    auto exchange = std::make_shared<LocalExchange>(ranks);
    for (int r = 0; r < ranks; ++r) {
      backends.emplace_back(r, device_of_rank[static_cast<std::size_t>(r)], exchange, options);
    }
  }
  return backends;
}

}  // namespace cuda

// The backend a World or Executor is instantiated with, beside CpuBackend at the top; the
// rest of the CUDA layer (streams, events, NCCL, devices, ids) is spelled ppsched::cuda::.
using cuda::CudaBackend;
using cuda::CudaBackendOptions;
}  // namespace ppsched
