// The CPU backend's internal state: streams with their fixed-capacity task queues, events,
// point-to-point operations and the rendezvous channels between ranks, and the per-rank and
// per-cluster records that hold them. Everything here is allocated when a stream, event or
// buffer is created, never while work is issued or run, so a training step allocates
// nothing. Users see only the handles of backend.hpp.
//
// Locking: each rank has one mutex guarding its streams, events and buffers' access history.
// A channel has its own mutex. A thread may take a channel's mutex and then a rank's (to wake
// the owner of a matched operation), never the reverse; the deterministic engine's mutex comes
// before both.
#pragma once

#include "ppsched/config.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "ppsched/backend/cpu/options.hpp"
#include "ppsched/error.hpp"
#include "ppsched/runtime/backend.hpp"

namespace ppsched::inline PPSCHED_MODE::detail::cpu {

using Clock = std::chrono::steady_clock;

// A queue of fixed capacity whose slots never move, so a reference to the front stays valid
// while the host appends behind it.
template <class T>
class Ring {
 public:
  explicit Ring(std::size_t capacity) : slots_(capacity == 0 ? 1 : capacity) {}

  [[nodiscard]] std::size_t capacity() const noexcept { return slots_.size(); }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] bool full() const noexcept { return size_ == slots_.size(); }
  [[nodiscard]] T& front() noexcept { return slots_[head_]; }
  [[nodiscard]] const T& front() const noexcept { return slots_[head_]; }
  [[nodiscard]] T& at(std::size_t i) noexcept { return slots_[(head_ + i) % slots_.size()]; }
  // The slot the next push fills; valid until push().
  [[nodiscard]] T& back_slot() noexcept { return slots_[(head_ + size_) % slots_.size()]; }
  [[nodiscard]] std::size_t back_index() const noexcept { return (head_ + size_) % slots_.size(); }
  [[nodiscard]] T& slot(std::size_t index) noexcept { return slots_[index % slots_.size()]; }
  void push() noexcept { ++size_; }
  void pop() noexcept {
    head_ = (head_ + 1) % slots_.size();
    --size_;
  }
  void pop_n(std::size_t n) noexcept {
    head_ = (head_ + n) % slots_.size();
    size_ -= n;
  }
  void clear() noexcept {
    head_ = 0;
    size_ = 0;
  }

 private:
  std::vector<T> slots_;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

// A condition wait with a deadline that may be time_point::max() (no watchdog): waits without
// one then, rather than handing the library's clock conversion a deadline at the clock's end.
inline std::cv_status wait_until_or_forever(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                                            Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) {
    cv.wait(lock);
    return std::cv_status::no_timeout;
  }
  return cv.wait_until(lock, deadline);
}

struct StreamState;
struct RankState;
struct ClusterState;

// The kind of work a task is, and of an access to a buffer in the race checker's messages.
enum class TaskKind : std::uint8_t { launch, record, wait, zero, accumulate, group };

[[nodiscard]] constexpr std::string_view task_kind_name(TaskKind k) noexcept {
  switch (k) {
    case TaskKind::launch:
      return "task";
    case TaskKind::record:
      return "event record";
    case TaskKind::wait:
      return "event wait";
    case TaskKind::zero:
      return "zero";
    case TaskKind::accumulate:
      return "accumulate";
    case TaskKind::group:
      return "transfer group";
  }
  return "?";
}

enum class OpState : std::uint8_t { pending, done, failed };

// One send or receive of a posted group. Its state is written by whichever thread matches it
// (under the channel's mutex) and read by its owner, hence atomic.
struct P2POp {
  bool is_send = false;
  int peer = 0;
  float* data = nullptr;  // receive: destination; send: source (never written through)
  std::size_t count = 0;
  PeerTag tag{};
  StreamState* owner = nullptr;
  std::atomic<OpState> state{OpState::pending};
  bool in_channel = false;  // guarded by the channel's mutex
};

struct EventState;

struct Task {
  TaskKind kind = TaskKind::launch;
  std::uint64_t seq = 0;  // position on its stream, from 1
  HostTask host{};
  EventState* event = nullptr;    // record, wait
  StreamState* target = nullptr;  // wait: the stream whose progress is awaited
  std::uint64_t target_seq = 0;   // wait: ... up to this task
  float* to = nullptr;            // zero, accumulate
  const float* from = nullptr;    // accumulate
  std::size_t count = 0;          // zero, accumulate
  std::size_t first_op = 0;       // group: index of its first op in the stream's op ring
  std::size_t op_count = 0;       // group
  bool posted = false;            // group: its ops are in the channels
};

// An event points at the task that recorded it last: it has completed when that stream's
// completed count reaches the record's position. This is CUDA's rule (a wait or a query uses
// the record current at the time of the call), with no allocation per record.
struct EventState {
  RankState* rank = nullptr;
  std::uint64_t id = 0;
  bool recorded = false;
  StreamState* stream = nullptr;
  std::uint64_t seq = 0;
  Clock::time_point time{};  // when the last record ran
  std::uint64_t time_seq = 0;
  std::vector<std::uint64_t> clock;  // checking: the recording stream's vector clock
};

// An access in the race checker's history: which stream, at which position, doing what.
struct AccessRecord {
  int stream = -1;  // local stream index on the rank; -1: none
  std::uint64_t seq = 0;
  TaskKind kind = TaskKind::launch;
  bool is_send = false;  // for groups: which side the access came from
  std::string_view label{};
};

struct BufferState {
  RankState* rank = nullptr;
  std::uint64_t id = 0;
  std::size_t size = 0;
  AccessRecord last_write{};
  std::vector<AccessRecord> reads;  // at most one per stream
};

struct StreamState {
  StreamState(RankState* r, int local_index, int global_index, std::size_t capacity)
      : rank(r),
        local(local_index),
        global(global_index),
        tasks(capacity),
        ops(new P2POp[capacity]),
        op_capacity(capacity) {}

  RankState* rank;
  int local;   // index among its rank's streams
  int global;  // index among the cluster's streams: the deterministic engine's order
  Ring<Task> tasks;
  std::unique_ptr<P2POp[]> ops;
  std::size_t op_capacity;
  std::size_t op_head = 0;
  std::size_t op_size = 0;
  std::uint64_t issued = 0;     // tasks pushed by the host
  std::uint64_t completed = 0;  // tasks finished (run, or discarded after a failure)
  bool running = false;         // a task runs outside the rank's lock
  bool closing = false;         // the handle was destroyed: finish what is queued, then stop
  bool closed = false;
  bool blocked = false;  // the head task waits; since when
  Clock::time_point blocked_since{};
  std::thread worker;
  // The worker sleeps here while its queue is empty, its head waits, or a helper runs its
  // head. Wakeups are targeted: a push, a matched transfer, a head a helper could not run.
  std::condition_variable wake;
  bool worker_waiting = false;
  // A host waits until `completed` reaches host_target, or for room in the queue.
  std::uint64_t host_target = std::numeric_limits<std::uint64_t>::max();
  bool host_wants_room = false;
  std::vector<std::uint64_t> clock;  // checking: vector clock of the next task issued

  [[nodiscard]] P2POp& op(std::size_t index) noexcept { return ops[index % op_capacity]; }
};

// What a host thread waits for in deterministic mode; the engine evaluates it after each step.
enum class HostWaitKind : std::uint8_t { stream_done, queue_room };

enum class HostState : std::uint8_t { idle, active, waiting };

struct RankState {
  ClusterState* cluster = nullptr;
  int rank = 0;
  std::mutex mutex;
  std::condition_variable host_wake;  // a host's condition holds, a failure, an abort, a stop
  std::vector<std::unique_ptr<StreamState>> streams;
  std::vector<std::unique_ptr<EventState>> events;
  std::uint64_t next_buffer_id = 1;

  bool failed = false;  // sticky, as CUDA's errors
  std::exception_ptr error;
  std::atomic<bool> aborted{false};  // the communicator was aborted (by this rank's host)

  // Host side of ncclGroupStart/End.
  int group_depth = 0;
  StreamState* group_stream = nullptr;
  struct Staged {
    bool is_send = false;
    int peer = 0;
    float* data = nullptr;
    std::size_t count = 0;
    PeerTag tag{};
    BufferState* buffer = nullptr;
  };
  std::vector<Staged> staged;

  std::vector<std::uint64_t> host_clock;  // checking: what the host has observed complete
  std::uint64_t queue_full_waits = 0;     // times the host waited for room in a stream's queue

  // Deterministic mode, guarded by the cluster's engine mutex.
  HostState host = HostState::idle;
  std::thread::id host_thread{};  // the thread that last issued work on this rank
  bool stalled = false;           // the engine ended this host's wait: nothing could move
  HostWaitKind wait_kind = HostWaitKind::stream_done;
  StreamState* wait_stream = nullptr;
  std::uint64_t wait_seq = 0;  // stream_done: the task to reach; queue_room: transfer slots needed
};

// Rendezvous between a sender and a receiver rank: posted operations wait here, in posting
// order, until the other side posts its counterpart.
struct Channel {
  std::mutex mutex;
  std::vector<P2POp*> sends;
  std::vector<P2POp*> recvs;
};

struct ClusterState {
  CpuOptions options;
  int ranks = 0;
  std::vector<std::unique_ptr<RankState>> rank_states;
  std::vector<std::unique_ptr<Channel>> channels;  // [sender * ranks + receiver]

  // Deterministic engine.
  std::mutex engine_mutex;
  std::condition_variable engine_wake;  // the engine and waiting hosts sleep here
  std::thread engine;
  bool shutdown = false;
  std::vector<StreamState*> all_streams;  // in creation order
  std::size_t next_stream = 0;            // round-robin position
  std::string stall_report;               // what every stream waited for at the last stall

  [[nodiscard]] Channel& channel(int sender, int receiver) {
    return *channels[static_cast<std::size_t>(sender * ranks + receiver)];
  }
  [[nodiscard]] bool deterministic() const noexcept { return options.mode == CpuMode::deterministic; }
};

[[nodiscard]] inline std::string stream_name(const StreamState& s) {
  return detail::concat("rank ", s.rank->rank, " stream ", s.local);
}

}  // namespace ppsched::detail::cpu
