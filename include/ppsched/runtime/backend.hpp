// The Backend concept: the one seam between the executor and a device. It holds the
// operations the executor needs and nothing more, and each of them is one CUDA or NCCL call,
// so that a backend is a thin layer and the CPU backend can model CUDA exactly:
//
//   create_stream()               cudaStreamCreateWithFlags(non-blocking)
//   create_event()                cudaEventCreate (timing enabled)
//   record(event, stream)         cudaEventRecord
//   wait(stream, event)           cudaStreamWaitEvent
//   query(event)                  cudaEventQuery
//   synchronize(event, limit)     cudaEventSynchronize, bounded (cudaEventQuery polled)
//   synchronize(stream, limit)    cudaStreamSynchronize, bounded (cudaStreamQuery polled)
//   elapsed_ms(start, end)        cudaEventElapsedTime
//   allocate(count)               cudaMalloc of `count` floats; span(buffer) is its memory
//   zero(stream, buffer)          cudaMemsetAsync
//   accumulate(stream, to, from)  to += from on the stream (cublasSaxpy / one kernel)
//   launch(stream, task, uses)    the task enqueues its work (kernels) on the stream
//   group_start(), group_end()    ncclGroupStart, ncclGroupEnd
//   send(buffer, n, peer, stream, tag), recv(...)   ncclSend, ncclRecv
//   rank(), ranks()               ncclCommUserRank, ncclCommCount
//   abort(reason)                 ncclCommAbort
//   recover()                     after a failed step: clear the sticky error, new communicator
//
// One backend object is one rank (one device and its communicator). The extra arguments
// that CUDA does not need — the buffer uses of a task, the tag of a send — carry what the
// CPU backend's checking mode verifies; a CUDA backend may ignore them. A type that lacks an
// operation fails `check_backend<B>()` with a message naming the operation and its CUDA call.
//
// Errors behave as CUDA's sticky errors: once a task on a rank fails (a user callable threw,
// a transfer was aborted or timed out), every later operation on that rank throws that
// error, as `ppsched::error`, until `recover()`. `abort()` makes the rank failed too: the CPU
// backend then drops the work queued behind a task still running; CUDA runs its queued
// kernels, and the executor's tasks of a failed step call no user code. Host waits are
// always bounded: they return `timed_out` at the deadline or `stopped` when the stop token is
// requested, and the caller decides (the executor then aborts the communicator, which ends
// every pending transfer).
#pragma once

#include "ppsched/config.hpp"
#include "ppsched/runtime/detail/backend.hpp"

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stop_token>
#include <string_view>
#include <utility>

namespace ppsched::inline PPSCHED_MODE {

// How a task or a transfer touches a buffer; the CPU backend's race checker needs it.
enum class Access : std::uint8_t { read, write, read_write };

namespace detail {
[[nodiscard]] constexpr bool reads(Access a) noexcept { return a != Access::write; }
[[nodiscard]] constexpr bool writes(Access a) noexcept { return a != Access::read; }
}  // namespace detail

template <class Buffer>
struct BufferUse {
  const Buffer* buffer = nullptr;
  Access access = Access::read;
};

// Work the host issues onto a stream. On the CPU backend `run(context)` executes on the
// stream's worker, in stream order. On CUDA it is called on the issuing thread with the stream
// made current, and enqueues its kernels there (a kernel launch). A plain function pointer and
// a context keep launching free of allocation. `label` names the work in error messages.
struct HostTask {
  void (*run)(void* context) = nullptr;
  void* context = nullptr;
  std::string_view label{};
};

// Makes a HostTask that calls `f()`. `f` must outlive the task's execution.
template <class F>
[[nodiscard]] HostTask host_task(F& f, std::string_view label = {}) noexcept {
  return {[](void* c) { (*static_cast<F*>(c))(); }, static_cast<void*>(&f), label};
}

// Names one point-to-point transfer. NCCL matches sends and receives between two ranks in
// posting order and ignores the tag; the CPU backend checks in checking mode that the matched
// pair carries the same nonzero `match`, so a pair of programs that post in different orders
// is reported instead of silently exchanging the wrong tensors. `label` is for messages.
struct PeerTag {
  std::uint64_t match = 0;
  std::string_view label{};
};

// A watchdog or timeout that never fires (ExecutorOptions::watchdog, CpuOptions::watchdog).
inline constexpr std::chrono::milliseconds no_timeout = std::chrono::milliseconds::max();

// How long a host wait may block, and the request that stops it early (another rank failed).
struct HostWait {
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  std::stop_token stop{};

  // Any duration type, so that milliseconds::max() ("no timeout") is not first converted to
  // nanoseconds, which overflows.
  template <class Rep, class Period>
  [[nodiscard]] static HostWait within(std::chrono::duration<Rep, Period> timeout, std::stop_token stop = {}) {
    return {detail::saturating_deadline(std::chrono::steady_clock::now(), timeout), std::move(stop)};
  }
};

enum class WaitResult : std::uint8_t { done, timed_out, stopped };

[[nodiscard]] constexpr std::string_view to_string(WaitResult r) noexcept {
  switch (r) {
    case WaitResult::done:
      return "done";
    case WaitResult::timed_out:
      return "timed out";
    case WaitResult::stopped:
      return "stopped";
  }
  return "?";
}

// One requirement per operation, so that a failed constraint names what is missing.
namespace backend_ops {

template <class B>
concept has_handle_types = requires {
  typename B::stream;
  typename B::event;
  typename B::buffer;
};

template <class B>
concept has_create_stream = has_handle_types<B> && requires(B& b) {
  { b.create_stream() } -> std::same_as<typename B::stream>;
};
template <class B>
concept has_create_event = has_handle_types<B> && requires(B& b) {
  { b.create_event() } -> std::same_as<typename B::event>;
};
template <class B>
concept has_record = has_handle_types<B> && requires(B& b, typename B::event& e, typename B::stream& s) {
  b.record(e, s);
};
template <class B>
concept has_wait = has_handle_types<B> && requires(B& b, typename B::stream& s, const typename B::event& e) {
  b.wait(s, e);
};
template <class B>
concept has_query = has_handle_types<B> && requires(B& b, const typename B::event& e) {
  { b.query(e) } -> std::same_as<bool>;
};
template <class B>
concept has_synchronize_event = has_handle_types<B> && requires(B& b, const typename B::event& e, const HostWait& w) {
  { b.synchronize(e, w) } -> std::same_as<WaitResult>;
};
template <class B>
concept has_synchronize_stream = has_handle_types<B> && requires(B& b, typename B::stream& s, const HostWait& w) {
  { b.synchronize(s, w) } -> std::same_as<WaitResult>;
};
template <class B>
concept has_elapsed_ms = has_handle_types<B> && requires(B& b, const typename B::event& e) {
  { b.elapsed_ms(e, e) } -> std::convertible_to<double>;
};
template <class B>
concept has_allocate = has_handle_types<B> && requires(B& b, std::size_t n) {
  { b.allocate(n) } -> std::same_as<typename B::buffer>;
};
template <class B>
concept has_span = has_handle_types<B> && requires(B& b, const typename B::buffer& buf) {
  { b.span(buf) } -> std::same_as<std::span<float>>;
};
template <class B>
concept has_zero = has_handle_types<B> && requires(B& b, typename B::stream& s, typename B::buffer& buf) {
  b.zero(s, buf);
};
template <class B>
concept has_accumulate = has_handle_types<B> &&
    requires(B& b, typename B::stream& s, typename B::buffer& to, const typename B::buffer& from) {
  b.accumulate(s, to, from);
};
template <class B>
concept has_launch = has_handle_types<B> &&
    requires(B& b, typename B::stream& s, HostTask t, std::span<const BufferUse<typename B::buffer>> uses) {
  b.launch(s, t, uses);
};
template <class B>
concept has_group = requires(B& b) {
  b.group_start();
  b.group_end();
};
template <class B>
concept has_send = has_handle_types<B> &&
    requires(B& b, const typename B::buffer& buf, std::size_t n, int peer, typename B::stream& s, PeerTag tag) {
  b.send(buf, n, peer, s, tag);
};
template <class B>
concept has_recv = has_handle_types<B> &&
    requires(B& b, typename B::buffer& buf, std::size_t n, int peer, typename B::stream& s, PeerTag tag) {
  b.recv(buf, n, peer, s, tag);
};
template <class B>
concept has_rank = requires(const B& b) {
  { b.rank() } -> std::convertible_to<int>;
  { b.ranks() } -> std::convertible_to<int>;
};
template <class B>
concept has_abort = requires(B& b, std::string_view reason) {
  b.abort(reason);
};
template <class B>
concept has_recover = requires(B& b) {
  b.recover();
};

}  // namespace backend_ops

template <class B>
concept Backend = backend_ops::has_handle_types<B> && backend_ops::has_create_stream<B> &&
    backend_ops::has_create_event<B> && backend_ops::has_record<B> && backend_ops::has_wait<B> &&
    backend_ops::has_query<B> && backend_ops::has_synchronize_event<B> && backend_ops::has_synchronize_stream<B> &&
    backend_ops::has_elapsed_ms<B> && backend_ops::has_allocate<B> && backend_ops::has_span<B> &&
    backend_ops::has_zero<B> && backend_ops::has_accumulate<B> && backend_ops::has_launch<B> &&
    backend_ops::has_group<B> && backend_ops::has_send<B> && backend_ops::has_recv<B> && backend_ops::has_rank<B> &&
    backend_ops::has_abort<B> && backend_ops::has_recover<B>;

// Names every missing operation at compile time, one static_assert each. The executor calls
// it first, so a backend that is not complete yet fails with these lines rather than with a
// page of template errors.
template <class B>
consteval bool check_backend() {
  static_assert(backend_ops::has_handle_types<B>,
                "ppsched Backend: needs member types `stream`, `event` and `buffer` (cudaStream_t, cudaEvent_t, "
                "device memory owners)");
  static_assert(backend_ops::has_create_stream<B>,
                "ppsched Backend: missing `stream create_stream()` (cudaStreamCreate)");
  static_assert(backend_ops::has_create_event<B>, "ppsched Backend: missing `event create_event()` (cudaEventCreate)");
  static_assert(backend_ops::has_record<B>, "ppsched Backend: missing `record(event&, stream&)` (cudaEventRecord)");
  static_assert(backend_ops::has_wait<B>,
                "ppsched Backend: missing `wait(stream&, const event&)` (cudaStreamWaitEvent)");
  static_assert(backend_ops::has_query<B>, "ppsched Backend: missing `bool query(const event&)` (cudaEventQuery)");
  static_assert(backend_ops::has_synchronize_event<B>,
                "ppsched Backend: missing `WaitResult synchronize(const event&, const HostWait&)` "
                "(cudaEventSynchronize, bounded)");
  static_assert(backend_ops::has_synchronize_stream<B>,
                "ppsched Backend: missing `WaitResult synchronize(stream&, const HostWait&)` "
                "(cudaStreamSynchronize, bounded)");
  static_assert(backend_ops::has_elapsed_ms<B>,
                "ppsched Backend: missing `double elapsed_ms(const event&, const event&)` (cudaEventElapsedTime)");
  static_assert(backend_ops::has_allocate<B>,
                "ppsched Backend: missing `buffer allocate(std::size_t floats)` (cudaMalloc)");
  static_assert(backend_ops::has_span<B>,
                "ppsched Backend: missing `std::span<float> span(const buffer&)` (the device pointer and size)");
  static_assert(backend_ops::has_zero<B>, "ppsched Backend: missing `zero(stream&, buffer&)` (cudaMemsetAsync)");
  static_assert(backend_ops::has_accumulate<B>,
                "ppsched Backend: missing `accumulate(stream&, buffer& to, const buffer& from)` (cublasSaxpy)");
  static_assert(backend_ops::has_launch<B>,
                "ppsched Backend: missing `launch(stream&, HostTask, std::span<const BufferUse<buffer>>)` "
                "(a kernel launch)");
  static_assert(backend_ops::has_group<B>,
                "ppsched Backend: missing `group_start()` / `group_end()` (ncclGroupStart/End)");
  static_assert(backend_ops::has_send<B>,
                "ppsched Backend: missing `send(const buffer&, std::size_t, int peer, stream&, PeerTag)` (ncclSend)");
  static_assert(backend_ops::has_recv<B>,
                "ppsched Backend: missing `recv(buffer&, std::size_t, int peer, stream&, PeerTag)` (ncclRecv)");
  static_assert(backend_ops::has_rank<B>,
                "ppsched Backend: missing `int rank() const` / `int ranks() const` (ncclCommUserRank/Count)");
  static_assert(backend_ops::has_abort<B>, "ppsched Backend: missing `abort(std::string_view reason)` (ncclCommAbort)");
  static_assert(backend_ops::has_recover<B>,
                "ppsched Backend: missing `recover()` (after a failed step: clear the error, new communicator)");
  return Backend<B>;
}

}  // namespace ppsched
