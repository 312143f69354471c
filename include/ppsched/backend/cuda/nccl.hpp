// The NCCL side of the CUDA backend: checked NCCL calls, the unique id that lets processes
// find each other, and `NcclCommunicator`, a move-only owner of one rank's communicator with
// the point-to-point operations the executor needs (send, receive, posted together inside
// an `NcclGroup`, i.e. ncclGroupStart/End).
//
// Two ways to build communicators, as NCCL offers them:
// - one process drives every GPU: `NcclCommunicator::init_all(devices)` (ncclCommInitAll), or
//   `init_all_nonblocking` (the same, with non-blocking communicators, which the backend
//   uses), then one host thread per GPU uses its own communicator;
// - one process per GPU: each calls `NcclCommunicator::init_rank(...)` with a unique id that
//   rank 0 made and shared, through a file the user names (`share_unique_id_through_file`,
//   written atomically by rename, read by polling with a deadline) or through an environment
//   variable the launcher sets (`unique_id_from_env`, the id as hex text).
//
// No rank hangs: per-rank communicators are created non-blocking and every wait polls
// `ncclCommGetAsyncError` under a `HostWait`; when NCCL reports an error, the deadline
// passes or another rank requested a stop, the communicator is ended with `ncclCommAbort`
// (which also stops its kernels still on the GPU) and the caller gets a `nccl_error` or
// `ppsched::error` that says which wait gave up and why.
//
// Host-only: usable from .cpp files compiled by a plain C++ compiler that link cudart and nccl.
#pragma once

#include "ppsched/config.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "ppsched/backend/cuda/check.hpp"
#include "ppsched/backend/cuda/device.hpp"
#include "ppsched/backend/cuda/stream.hpp"
#include "ppsched/backend/cuda/wait.hpp"
#include "ppsched/error.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace cuda {

// A failed NCCL call, or an asynchronous NCCL error found while waiting.
class nccl_error : public error {
 public:
  nccl_error(ncclResult_t code, const std::string& message) : error(message), code_(code) {}
  [[nodiscard]] ncclResult_t code() const noexcept { return code_; }

 private:
  ncclResult_t code_;
};

}  // namespace cuda
namespace detail {

[[nodiscard]] inline std::string nccl_error_fix(ncclResult_t code) {
  switch (code) {
    case ncclUnhandledCudaError:
      return "A CUDA call inside NCCL failed; rerun with NCCL_DEBUG=WARN to see which";
    case ncclSystemError:
      return "A system call failed (sockets, shared memory: in containers enlarge /dev/shm); rerun with "
             "NCCL_DEBUG=INFO";
    case ncclInvalidUsage:
      return "Each rank of a communicator needs its own GPU, and every rank must issue matching calls; rerun with "
             "NCCL_DEBUG=WARN";
    case ncclRemoteError:
      return "A peer rank failed or went away; its own log names the cause";
    case ncclInvalidArgument:
      return "Check the rank, peer and count arguments against the communicator's size";
    default:
      return "Rerun with NCCL_DEBUG=WARN for NCCL's own account";
  }
}

[[nodiscard]] inline std::string describe_nccl_failure(ncclResult_t code, const char* call, const char* file, int line,
                                                       ncclComm_t comm) {
  std::string problem = detail::concat("returned ", ncclGetErrorString(code));
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') problem += detail::concat(": ", last);
  return format_error({detail::concat("NCCL call '", call, "'"), problem, detail::concat(file, ':', line), nccl_error_fix(code)});
}

[[noreturn]] inline void throw_nccl_failure(ncclResult_t code, const char* call, const char* file, int line,
                                            ncclComm_t comm = nullptr) {
  // NCCL reports failed CUDA calls as ncclUnhandledCudaError; clear CUDA's last-error slot too.
  (void)cudaGetLastError();
  throw cuda::nccl_error(code, describe_nccl_failure(code, call, file, line, comm));
}

inline void check_nccl(ncclResult_t code, const char* call, const char* file, int line) {
  if (code != ncclSuccess) throw_nccl_failure(code, call, file, line);
}

// Non-blocking communicators answer ncclInProgress for work that continues in the background;
// that is not a failure. Returns true when the caller must wait for the communicator to settle.
[[nodiscard]] inline bool check_nccl_may_progress(ncclResult_t code, const char* call, const char* file, int line,
                                                  ncclComm_t comm) {
  if (code == ncclInProgress) return true;
  if (code != ncclSuccess) throw_nccl_failure(code, call, file, line, comm);
  return false;
}

inline bool log_nccl(ncclResult_t code, const char* call, const char* file, int line) noexcept {
  if (code == ncclSuccess || code == ncclInProgress) return true;
  std::fprintf(stderr, "ppsched: NCCL call '%s' returned %s at %s:%d\n", call, ncclGetErrorString(code), file, line);
  return false;
}

}  // namespace detail
}  // namespace ppsched

// Throws ppsched::cuda::nccl_error when the call does not return ncclSuccess.
#define PPSCHED_NCCL_CHECK(call) ::ppsched::detail::check_nccl((call), #call, __FILE__, __LINE__)
// Logs to stderr instead of throwing; evaluates to true on success. For destructors.
#define PPSCHED_NCCL_LOG(call) ::ppsched::detail::log_nccl((call), #call, __FILE__, __LINE__)

namespace ppsched::inline PPSCHED_MODE {
namespace detail {

// Ends a communicator (ncclCommAbort, or ncclCommDestroy when it is healthy) on a thread of its
// own, joined before returning. NCCL runs both as a group job that marks the calling thread's
// group as blocking and, in NCCL 2.28.3 at least, leaves that thread-local mark behind: the
// thread's next non-blocking ncclCommInitRankConfig then fails with "Blocking and nonblocking
// communicators are not allowed in the same group" (seen on an H100, 2026-11-27, in recover()).
// A thread that ends with the call takes the mark with it.
inline void end_communicator(ncclComm_t handle, bool destroy) noexcept {
  if (handle == nullptr) return;
  try {
    std::thread([handle, destroy] {
      if (destroy) {
        PPSCHED_NCCL_LOG(ncclCommDestroy(handle));
      } else {
        PPSCHED_NCCL_LOG(ncclCommAbort(handle));
      }
    }).join();
  } catch (const std::system_error&) {  // no thread to be had: end it here, mark and all
    if (destroy) {
      PPSCHED_NCCL_LOG(ncclCommDestroy(handle));
    } else {
      PPSCHED_NCCL_LOG(ncclCommAbort(handle));
    }
  }
}

}  // namespace detail
namespace cuda {

// ---------------------------------------------------------------- unique id

[[nodiscard]] inline ncclUniqueId new_unique_id() {
  ncclUniqueId id{};
  PPSCHED_NCCL_CHECK(ncclGetUniqueId(&id));
  return id;
}

// The id as 256 lowercase hex digits: safe in a file, an environment variable or a command line.
[[nodiscard]] inline std::string to_hex(const ncclUniqueId& id) {
  constexpr char digits[] = "0123456789abcdef";
  std::string text;
  text.reserve(2 * sizeof(id.internal));
  for (const char c : id.internal) {
    const auto byte = static_cast<unsigned char>(c);
    text += digits[byte >> 4];
    text += digits[byte & 0xF];
  }
  return text;
}

// Parses what to_hex wrote; `origin` names where the text came from for the error message.
[[nodiscard]] inline ncclUniqueId unique_id_from_hex(std::string_view text, const std::string& origin) {
  ncclUniqueId id{};
  const std::size_t expected = 2 * sizeof(id.internal);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.remove_suffix(1);
  if (text.size() != expected) {
    detail::fail({origin,
          detail::concat("an NCCL unique id must be ", expected, " hex digits, found ", text.size(), " characters"), "",
          "Pass the text written by ppsched::cuda::to_hex(ncclUniqueId) unchanged"});
  }
  auto nibble = [&](std::size_t at) {
    const char c = text[at];
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    detail::fail({origin, detail::concat("'", c, "' is not a hex digit"), detail::concat("character ", at + 1),
          "Pass the text written by ppsched::cuda::to_hex(ncclUniqueId) unchanged"});
  };
  for (std::size_t i = 0; i < sizeof(id.internal); ++i) {
    id.internal[i] = static_cast<char>((nibble(2 * i) << 4) | nibble(2 * i + 1));
  }
  return id;
}

// Reads the id a launcher put in an environment variable (as hex text).
[[nodiscard]] inline ncclUniqueId unique_id_from_env(const char* variable) {
  const char* value = std::getenv(variable);
  if (value == nullptr) {
    detail::fail({detail::concat("environment variable ", variable), "is not set", "",
          "Have rank 0 print ppsched::cuda::to_hex(ppsched::cuda::new_unique_id()) and export it to every rank"});
  }
  return unique_id_from_hex(value, detail::concat("environment variable ", variable));
}

// Writes the id so that a reader sees either no file or the whole id: the text goes to a
// temporary file beside `path`, which is then renamed over it (rename is atomic in a directory).
inline void publish_unique_id(const ncclUniqueId& id, const std::filesystem::path& path) {
  std::filesystem::path temporary = path;
  temporary += ".partial";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << to_hex(id) << '\n';
    out.close();
    if (!out) {
      detail::fail({detail::concat("NCCL unique id file '", temporary.string(), "'"), "cannot be written", "",
            "Name a file in a directory every rank can write and read (a shared file system for several nodes)"});
    }
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    detail::fail({detail::concat("NCCL unique id file '", path.string(), "'"), detail::concat("rename failed: ", ec.message()),
          "", "Name a file in a directory every rank can write"});
  }
}

// Waits for `path` to appear (polling) and reads the id from it.
[[nodiscard]] inline ncclUniqueId await_unique_id(const std::filesystem::path& path, const HostWait& limit) {
  std::error_code ec;
  const WaitResult outcome = poll_until([&] { return std::filesystem::exists(path, ec); }, limit);
  const std::string subject = detail::concat("NCCL unique id file '", path.string(), "'");
  if (outcome != WaitResult::done) {
    detail::fail({subject, detail::concat("did not appear (", to_string(outcome), ")"), "",
          "Start rank 0 with the same path, or give the other ranks a longer timeout"});
  }
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) detail::fail({subject, "cannot be read", "", "Check the file's permissions"});
  return unique_id_from_hex(text, subject);
}

// Rank 0 makes the id and publishes it at `path`; every other rank waits for it. Use a path
// that is new for each run (e.g. with the job id in it): a file left by an earlier run would
// hand the other ranks a stale id, and their initialisation would then time out.
[[nodiscard]] inline ncclUniqueId share_unique_id_through_file(const std::filesystem::path& path, int rank,
                                                               const HostWait& limit) {
  if (rank == 0) {
    const ncclUniqueId id = new_unique_id();
    publish_unique_id(id, path);
    return id;
  }
  return await_unique_id(path, limit);
}

// ---------------------------------------------------------------- communicator

class NcclCommunicator {
 public:
  // One communicator per device, all in this process, as ncclCommInitAll makes them
  // (blocking communicators). Devices must be distinct: NCCL does not support two ranks of
  // one communicator on the same GPU.
  [[nodiscard]] static std::vector<NcclCommunicator> init_all(std::span<const int> devices,
                                                              std::chrono::nanoseconds timeout) {
    require_distinct_devices(devices);
    std::vector<ncclComm_t> handles(devices.size(), nullptr);
    PPSCHED_NCCL_CHECK(ncclCommInitAll(handles.data(), static_cast<int>(devices.size()), devices.data()));
    return adopt(handles, devices, timeout, false);
  }

  // The same communicators, made non-blocking: what ncclCommInitAll does (one unique id,
  // ncclCommInitRankConfig per device inside one group), with `blocking = 0`. With blocking
  // communicators, the first ncclGroupEnd between two ranks also sets up their connection and
  // blocks the host until the peer takes part; non-blocking ones return and are polled, so
  // every wait, that one included, is bounded.
  [[nodiscard]] static std::vector<NcclCommunicator> init_all_nonblocking(std::span<const int> devices,
                                                                          std::chrono::nanoseconds timeout) {
    require_distinct_devices(devices);
    const ncclUniqueId id = new_unique_id();
    const int ranks = static_cast<int>(devices.size());
    std::vector<ncclComm_t> handles(devices.size(), nullptr);
    {
      const ScopedDevice restore(current_device());
      PPSCHED_NCCL_CHECK(ncclGroupStart());
      ncclResult_t failed = ncclSuccess;
      for (int r = 0; r < ranks && failed == ncclSuccess; ++r) {
        if (cudaSetDevice(devices[static_cast<std::size_t>(r)]) != cudaSuccess) {
          (void)cudaGetLastError();
          failed = ncclUnhandledCudaError;
          break;
        }
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        const ncclResult_t code = ncclCommInitRankConfig(&handles[static_cast<std::size_t>(r)], ranks, id, r, &config);
        if (code != ncclSuccess && code != ncclInProgress) failed = code;
      }
      const ncclResult_t ended = ncclGroupEnd();
      if (failed == ncclSuccess && ended != ncclSuccess && ended != ncclInProgress) failed = ended;
      if (failed != ncclSuccess) {
        for (ncclComm_t h : handles) {
          detail::end_communicator(h, false);
        }
        detail::throw_nccl_failure(failed, "ncclCommInitRankConfig (one per device, grouped)", __FILE__, __LINE__);
      }
    }
    std::vector<NcclCommunicator> comms = adopt(handles, devices, timeout, true);
    for (NcclCommunicator& c : comms) c.ensure_ready();
    return comms;
  }

  // This process's rank of `ranks`, on `device`, joined through `id`. Created non-blocking and
  // polled, so a rank whose peers never arrive gives up at the deadline instead of hanging.
  // With `wait = false` it returns at once and the first operation waits for the peers: one
  // thread can then start the communicators of several ranks (as the World's recovery does).
  [[nodiscard]] static NcclCommunicator init_rank(int ranks, int rank, int device, const ncclUniqueId& id,
                                                  std::chrono::nanoseconds timeout, std::stop_token stop = {},
                                                  bool wait = true) {
    if (ranks <= 0 || rank < 0 || rank >= ranks) {
      detail::fail({"NCCL communicator", detail::concat("rank ", rank, " of ", ranks, " ranks is out of range"), "",
            "Give each process a distinct rank in [0, ranks)"});
    }
    require_device(device, "NCCL communicator");
    const ScopedDevice on(device);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t handle = nullptr;
    const bool pending = detail::check_nccl_may_progress(ncclCommInitRankConfig(&handle, ranks, id, rank, &config),
                                                         "ncclCommInitRankConfig", __FILE__, __LINE__, nullptr);
    NcclCommunicator comm(handle, rank, ranks, device, timeout);
    comm.watch(std::move(stop));
    comm.pending_ = pending;
    if (wait) comm.ensure_ready();
    return comm;
  }

  ~NcclCommunicator() { reset(); }
  NcclCommunicator(NcclCommunicator&& other) noexcept
      : handle_(std::exchange(other.handle_, nullptr)),
        rank_(other.rank_),
        size_(other.size_),
        device_(other.device_),
        timeout_(other.timeout_),
        stop_(std::move(other.stop_)),
        healthy_(other.healthy_),
        pending_(other.pending_) {}
  NcclCommunicator& operator=(NcclCommunicator&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
      rank_ = other.rank_;
      size_ = other.size_;
      device_ = other.device_;
      timeout_ = other.timeout_;
      stop_ = std::move(other.stop_);
      healthy_ = other.healthy_;
      pending_ = other.pending_;
    }
    return *this;
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  [[nodiscard]] ncclComm_t handle() const noexcept { return handle_; }
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] std::chrono::nanoseconds timeout() const noexcept { return timeout_; }
  // False once a call failed, a wait gave up, or the communicator was aborted.
  [[nodiscard]] bool healthy() const noexcept { return healthy_ && handle_ != nullptr; }

  // Waits from now on also give up when `stop` is requested (another rank failed).
  void watch(std::stop_token stop) noexcept { stop_ = std::move(stop); }
  [[nodiscard]] HostWait limit() const { return HostWait::within(timeout_, stop_); }

  // Enqueues a send of `bytes` bytes to `peer` on `stream`. Inside an NcclGroup it is posted
  // with the group's other operations at NcclGroup::end().
  void send(const void* data, std::size_t bytes, int peer, CudaStreamRef stream) {
    require_peer(peer, "ncclSend");
    ensure_ready();
    issue(ncclSend(data, bytes, ncclUint8, peer, live(), stream.handle()), "ncclSend", __LINE__);
  }
  void recv(void* data, std::size_t bytes, int peer, CudaStreamRef stream) {
    require_peer(peer, "ncclRecv");
    ensure_ready();
    issue(ncclRecv(data, bytes, ncclUint8, peer, live(), stream.handle()), "ncclRecv", __LINE__);
  }

  // Enqueues the in-place sum of `count` floats over every rank of the communicator on
  // `stream` (ncclAllReduce): data parallelism's gradient sum (backend/cuda/all_reduce.hpp).
  void all_reduce_sum(float* data, std::size_t count, CudaStreamRef stream) {
    ensure_ready();
    issue(ncclAllReduce(data, data, count, ncclFloat, ncclSum, live(), stream.handle()), "ncclAllReduce", __LINE__);
  }

  // ncclGroupStart / ncclGroupEnd. Between them, send and recv are collected and posted
  // together at group_end(), which waits (bounded) for a non-blocking communicator to settle.
  void group_start() {
    ensure_ready();
    PPSCHED_NCCL_CHECK(ncclGroupStart());
  }
  void group_end() { issue(ncclGroupEnd(), "ncclGroupEnd", __LINE__); }

  // The communicator's asynchronous error: ncclSuccess, ncclInProgress (non-blocking work
  // still settling) or the error a background operation hit.
  [[nodiscard]] ncclResult_t async_error() const {
    ncclResult_t async = ncclSuccess;
    PPSCHED_NCCL_CHECK(ncclCommGetAsyncError(live(), &async));
    return async;
  }

  // A communicator created with init_rank(..., wait = false) finishes joining its peers here.
  void ensure_ready() {
    if (!pending_) return;
    settle("ncclCommInitRankConfig (waiting for every rank to join)");
    pending_ = false;
  }

  // Waits for non-blocking work (initialisation, a group) to settle.
  void settle(std::string_view what) {
    ncclResult_t async = ncclSuccess;
    const WaitResult outcome = poll_until(
        [&] {
          async = async_error();
          return async != ncclInProgress;
        },
        limit());
    give_up_unless(outcome, async, what);
  }

  // Waits for `event` on the host while watching this communicator. Use it instead of
  // cudaEventSynchronize whenever NCCL work is in flight: a NCCL kernel waiting for a dead
  // peer never completes, and this wait then aborts the communicator, which ends it.
  void wait(CudaEventRef event, std::string_view what) {
    ncclResult_t async = ncclSuccess;
    WaitResult outcome = WaitResult::done;
    try {
      outcome = poll_until(
          [&] {
            if (event.ready()) return true;
            async = async_error();
            return async != ncclSuccess && async != ncclInProgress;
          },
          limit());
    } catch (...) {
      abort();
      throw;
    }
    give_up_unless(outcome, async, what);
  }

  // Ends the communicator now, stopping its operations on the GPU. Safe to call twice.
  void abort() noexcept {
    healthy_ = false;
    detail::end_communicator(std::exchange(handle_, nullptr), false);
  }

 private:
  NcclCommunicator(ncclComm_t handle, int rank, int size, int device, std::chrono::nanoseconds timeout) noexcept
      : handle_(handle), rank_(rank), size_(size), device_(device), timeout_(timeout) {}

  [[nodiscard]] static std::vector<NcclCommunicator> adopt(std::span<const ncclComm_t> handles,
                                                           std::span<const int> devices,
                                                           std::chrono::nanoseconds timeout, bool pending) {
    std::vector<NcclCommunicator> comms;
    comms.reserve(devices.size());
    for (std::size_t i = 0; i < devices.size(); ++i) {
      comms.push_back(
          NcclCommunicator(handles[i], static_cast<int>(i), static_cast<int>(devices.size()), devices[i], timeout));
      comms.back().pending_ = pending;
    }
    return comms;
  }

  static void require_distinct_devices(std::span<const int> devices) {
    if (devices.empty()) detail::fail({"NCCL communicator", "no devices", "", "Give one device per rank"});
    for (std::size_t i = 0; i < devices.size(); ++i) {
      require_device(devices[i], "NCCL communicator");
      for (std::size_t j = 0; j < i; ++j) {
        if (devices[i] == devices[j]) {
          detail::fail({"NCCL communicator", detail::concat("ranks ", j, " and ", i, " are both on device ", devices[i]),
                "device list",
                "Give each rank its own GPU, or run ranks that share a GPU in one process "
                "with the in-process copy transport"});
        }
      }
    }
  }

  [[nodiscard]] ncclComm_t live() const {
    if (handle_ == nullptr) {
      detail::fail({"NCCL communicator", detail::concat("rank ", rank_, " is used after it was aborted or moved from"), "",
            "Build a new communicator after a failed step"});
    }
    return handle_;
  }

  void require_peer(int peer, const char* call) const {
    if (peer < 0 || peer >= size_) {
      detail::fail({"NCCL communicator", detail::concat(call, " to peer ", peer, " of a ", size_, "-rank communicator"),
            detail::concat("rank ", rank_), "Use a peer rank in [0, size)"});
    }
  }

  void issue(ncclResult_t code, const char* call, int line) {
    bool pending = false;
    try {
      pending = detail::check_nccl_may_progress(code, call, __FILE__, line, handle_);
    } catch (...) {
      healthy_ = false;
      throw;
    }
    if (pending) settle(call);
  }

  // After a wait: success, or abort and say why not.
  void give_up_unless(WaitResult outcome, ncclResult_t async, std::string_view what) {
    if (outcome == WaitResult::done && (async == ncclSuccess || async == ncclInProgress)) return;
    const ncclComm_t comm = handle_;
    std::string detail_text;
    if (async != ncclSuccess && async != ncclInProgress) {
      const char* last = comm != nullptr ? ncclGetLastError(comm) : nullptr;
      detail_text = (last != nullptr && *last != '\0') ? detail::concat(": ", last) : std::string{};
    }
    abort();
    const std::string subject =
        detail::concat("NCCL communicator (rank ", rank_, " of ", size_, ", device ", device_, ")");
    if (outcome == WaitResult::done) {
      throw nccl_error(async, format_error({subject,
                                            detail::concat("asynchronous error ", ncclGetErrorString(async),
                                                           detail_text, "; communicator aborted"),
                                            std::string(what), detail::nccl_error_fix(async)}));
    }
    detail::fail({subject,
          detail::concat(to_string(outcome), " after ",
                         std::chrono::duration_cast<std::chrono::milliseconds>(timeout_).count(),
                         " ms; communicator aborted"),
          std::string(what),
          outcome == WaitResult::timed_out
              ? "A peer rank did not post the matching operation: check that every rank runs the same schedule, "
                "or raise the timeout"
              : "See the error of the rank that failed first"});
  }

  void reset() noexcept {
    if (handle_ == nullptr) return;
    if (healthy_) {
      detail::end_communicator(std::exchange(handle_, nullptr), true);
    } else {
      abort();
    }
  }

  ncclComm_t handle_ = nullptr;
  int rank_ = 0;
  int size_ = 0;
  int device_ = 0;
  std::chrono::nanoseconds timeout_{};
  std::stop_token stop_{};
  bool healthy_ = true;
  bool pending_ = false;  // non-blocking initialisation not yet settled
};

// Operations issued between construction and end() are posted together (ncclGroupStart/End):
// NCCL matches them as one unit, which is what lets a send and a receive between the same two
// ranks proceed without deadlock. A group left by an exception is still closed.
class NcclGroup {
 public:
  explicit NcclGroup(NcclCommunicator& comm) : comm_(&comm) { comm.group_start(); }
  ~NcclGroup() {
    if (open_) PPSCHED_NCCL_LOG(ncclGroupEnd());
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  NcclGroup(NcclGroup&&) = delete;
  NcclGroup& operator=(NcclGroup&&) = delete;

  void end() {
    if (!open_) detail::fail({"NcclGroup", "ended twice", "", "Call end() once per group"});
    open_ = false;
    comm_->group_end();
  }

 private:
  NcclCommunicator* comm_;
  bool open_ = true;
};

}  // namespace cuda
}  // namespace ppsched
