// The CPU backend: a model of CUDA streams and NCCL point-to-point on host threads, strict
// enough that every ordering bug, deadlock and race a pipeline schedule would hit on a GPU
// cluster shows up in a test on a laptop. A `CpuCluster` holds p ranks; `cluster.rank(r)` is
// rank r's `CpuBackend`, which satisfies the `Backend` concept.
//
// - Streams run their tasks in issue order (a worker thread each, or the deterministic
//   engine); order between streams exists only through events.
// - Events behave as CUDA's: a record captures the work issued so far; a wait or a query uses
//   the record current at the time of the call; a never-recorded event counts as complete
//   (and is an error in checking mode).
// - Send and receive are rendezvous: a transfer happens when both sides have posted, a group
//   (group_start/group_end) is posted as one unit, and sends and receives between two ranks
//   pair in posting order, as NCCL's do.
// - Failures are sticky per rank; abort() fails the rank (its queued work is dropped, a task
//   already running finishes) and ends every pending transfer that involves it.
//
// Handles (`CpuStream`, `CpuEvent`, `CpuBuffer`) are move-only and must be destroyed before
// their cluster. Nothing here allocates while work is issued or run, once each buffer's
// access history and each channel have seen their first step.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "ppsched/backend/cpu/detail/checking.hpp"
#include "ppsched/backend/cpu/graph.hpp"
#include "ppsched/backend/cpu/options.hpp"
#include "ppsched/backend/cpu/detail/progress.hpp"
#include "ppsched/backend/cpu/detail/state.hpp"
#include "ppsched/error.hpp"
#include "ppsched/runtime/backend.hpp"
#include "ppsched/runtime/threads.hpp"

namespace ppsched::inline PPSCHED_MODE {

class CpuBackend;
class CpuCluster;

// An in-order stream. Destroying it waits for its queued work (bounded by the watchdog).
class CpuStream {
 public:
  CpuStream() noexcept = default;
  CpuStream(CpuStream&& other) noexcept
      : backend_(std::exchange(other.backend_, nullptr)), state_(std::exchange(other.state_, nullptr)) {}
  CpuStream& operator=(CpuStream&& other) noexcept {
    if (this != &other) {
      close();
      backend_ = std::exchange(other.backend_, nullptr);
      state_ = std::exchange(other.state_, nullptr);
    }
    return *this;
  }
  CpuStream(const CpuStream&) = delete;
  CpuStream& operator=(const CpuStream&) = delete;
  ~CpuStream() { close(); }

  [[nodiscard]] bool valid() const noexcept { return state_ != nullptr; }
  // Index among its rank's streams, as error messages name it.
  [[nodiscard]] int index() const noexcept { return state_ == nullptr ? -1 : state_->local; }

 private:
  friend class CpuBackend;
  CpuStream(CpuBackend* b, detail::cpu::StreamState* s) noexcept : backend_(b), state_(s) {}
  inline void close() noexcept;

  CpuBackend* backend_ = nullptr;
  detail::cpu::StreamState* state_ = nullptr;
};

class CpuEvent {
 public:
  CpuEvent() noexcept = default;
  CpuEvent(CpuEvent&& other) noexcept : state_(std::exchange(other.state_, nullptr)) {}
  CpuEvent& operator=(CpuEvent&& other) noexcept {
    state_ = std::exchange(other.state_, nullptr);
    return *this;
  }
  CpuEvent(const CpuEvent&) = delete;
  CpuEvent& operator=(const CpuEvent&) = delete;
  ~CpuEvent() = default;

  [[nodiscard]] bool valid() const noexcept { return state_ != nullptr; }
  [[nodiscard]] std::uint64_t id() const noexcept { return state_ == nullptr ? 0 : state_->id; }

 private:
  friend class CpuBackend;
  explicit CpuEvent(detail::cpu::EventState* s) noexcept : state_(s) {}
  detail::cpu::EventState* state_ = nullptr;  // owned by the rank; lives as long as the cluster
};

// Host memory standing in for device memory, with the race checker's access history.
class CpuBuffer {
 public:
  CpuBuffer() noexcept = default;
  CpuBuffer(CpuBuffer&&) noexcept = default;
  CpuBuffer& operator=(CpuBuffer&&) noexcept = default;
  CpuBuffer(const CpuBuffer&) = delete;
  CpuBuffer& operator=(const CpuBuffer&) = delete;
  ~CpuBuffer() = default;

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::uint64_t id() const noexcept { return state_ == nullptr ? 0 : state_->id; }
  [[nodiscard]] std::span<float> span() const noexcept { return {data_.get(), size_}; }

 private:
  friend class CpuBackend;
  std::unique_ptr<float[]> data_;
  std::size_t size_ = 0;
  std::unique_ptr<detail::cpu::BufferState> state_;
};

// One rank of a CpuCluster: the Backend the executor drives.
class CpuBackend {
 public:
  using stream = CpuStream;
  using event = CpuEvent;
  using buffer = CpuBuffer;

  CpuBackend(const CpuBackend&) = delete;
  CpuBackend& operator=(const CpuBackend&) = delete;
  CpuBackend(CpuBackend&&) = delete;
  CpuBackend& operator=(CpuBackend&&) = delete;
  ~CpuBackend() = default;

  [[nodiscard]] int rank() const noexcept { return rank_->rank; }
  [[nodiscard]] int ranks() const noexcept { return cluster_->ranks; }
  [[nodiscard]] const CpuOptions& options() const noexcept { return cluster_->options; }
  // How many times this rank's host waited for room in a full stream queue (a step issuing
  // more operations than CpuOptions::queue_capacity). Each wait is a handover to the streams.
  [[nodiscard]] std::uint64_t queue_full_waits() const {
    const std::lock_guard<std::mutex> lock(rank_->mutex);
    return rank_->queue_full_waits;
  }

  // ------------------------------------------------------------------ streams and events
  [[nodiscard]] CpuStream create_stream() {
    using namespace detail::cpu;
    ensure_active();
    StreamState* s = nullptr;
    {
      const auto engine = engine_lock();
      const std::lock_guard<std::mutex> lock(rank_->mutex);
      const int local = static_cast<int>(rank_->streams.size());
      const int global = static_cast<int>(cluster_->all_streams.size());
      rank_->streams.push_back(std::make_unique<StreamState>(rank_, local, global, cluster_->options.queue_capacity));
      s = rank_->streams.back().get();
      // Every clock of the rank gets an entry for the new stream now, not while issuing.
      const auto n = rank_->streams.size();
      for (auto& other : rank_->streams) other->clock.resize(n, 0);
      rank_->host_clock.resize(n, 0);
      if (cluster_->deterministic()) cluster_->all_streams.push_back(s);
    }
    if (!cluster_->deterministic()) {
      s->worker = detail::start_thread([c = cluster_, s] { worker_loop(*c, *s); });
    }
    return CpuStream(this, s);
  }

  [[nodiscard]] CpuEvent create_event() {
    const std::lock_guard<std::mutex> lock(rank_->mutex);
    auto e = std::make_unique<detail::cpu::EventState>();
    e->rank = rank_;
    e->id = rank_->events.size() + 1;
    e->clock.resize(rank_->streams.size(), 0);
    rank_->events.push_back(std::move(e));
    return CpuEvent(rank_->events.back().get());
  }

  void record(CpuEvent& e, CpuStream& s) {
    using namespace detail::cpu;
    count_host_operation();
    if (capture_record(e, s)) return;
    auto lock = issue(s, 0);
    EventState& ev = own(e, "record");
    Task& t = begin_task(*s.state_, TaskKind::record);
    t.event = &ev;
    commit(*s.state_);
    ev.recorded = true;
    ev.stream = s.state_;
    ev.seq = t.seq;
    if (checking()) ev.clock = s.state_->clock;
    if (!replaying_) set_captured(ev, false);  // a graph's records stay the graph's
  }

  void wait(CpuStream& s, const CpuEvent& e) {
    using namespace detail::cpu;
    count_host_operation();
    if (capture_wait(s, e)) return;
    auto lock = issue(s, 0);
    EventState& ev = own(e, "wait");
    if (!ev.recorded) {
      if (checking()) {
        detail::fail({"CPU backend (checking)",
              detail::concat("waiting on an event never recorded: event #", ev.id,
                             " has no record, so on CUDA this wait does nothing and stream ", s.state_->local,
                             " would run ahead of the work it meant to wait for"),
              detail::concat("rank ", rank(), ", stream ", s.state_->local), "Record the event before waiting on it"});
      }
      return;  // CUDA: waiting on a never-recorded event is a no-op
    }
    Task& t = begin_task(*s.state_, TaskKind::wait);
    t.event = &ev;
    t.target = ev.stream;
    t.target_seq = ev.seq;
    commit(*s.state_);
    if (checking()) join(s.state_->clock, ev.clock);
  }

  [[nodiscard]] bool query(const CpuEvent& e) {
    using namespace detail::cpu;
    count_host_operation();
    const std::lock_guard<std::mutex> lock(rank_->mutex);
    throw_if_failed();
    EventState& ev = own(e, "query");
    if (is_captured(ev)) captured_event_read(ev, "query");
    if (!ev.recorded) {
      if (checking()) never_recorded(ev, "query");
      return true;
    }
    const bool done = ev.stream->completed >= ev.seq;
    if (done && checking()) host_observed(*rank_, ev.clock);
    return done;
  }

  // Waits until the event's last record has completed; throws the rank's error if it failed.
  [[nodiscard]] WaitResult synchronize(const CpuEvent& e, const HostWait& w) {
    using namespace detail::cpu;
    StreamState* recorded_on = nullptr;
    std::uint64_t seq = 0;
    count_host_operation();
    {
      const std::lock_guard<std::mutex> lock(rank_->mutex);
      throw_if_failed();
      EventState& ev = own(e, "synchronize");
      if (is_captured(ev)) captured_event_read(ev, "synchronize");
      if (!ev.recorded) {
        if (checking()) never_recorded(ev, "synchronize");
        return WaitResult::done;
      }
      recorded_on = ev.stream;
      seq = ev.seq;
    }
    const WaitResult r = host_wait(HostWaitKind::stream_done, recorded_on, seq, true, w);
    if (r == WaitResult::done) {
      const std::lock_guard<std::mutex> lock(rank_->mutex);
      throw_if_failed();
      if (checking()) host_observed(*rank_, e.state_->clock);
    }
    return r;
  }

  // Waits until all work issued to the stream has finished (run, or discarded after a
  // failure), then throws the rank's error if it failed. The executor relies on this to know
  // that no task still uses its memory.
  [[nodiscard]] WaitResult synchronize(CpuStream& s, const HostWait& w) {
    using namespace detail::cpu;
    std::uint64_t seq = 0;
    count_host_operation();
    {
      const std::lock_guard<std::mutex> lock(rank_->mutex);
      own(s);
      if (capturing(s)) {
        capture_violation(detail::concat("synchronize: stream ", s.state_->local,
                                         " is capturing, so its work has not run and never will until the graph is "
                                         "replayed"),
                          "Synchronise after end_capture and replay");
      }
      seq = s.state_->issued;
    }
    const WaitResult r = host_wait(HostWaitKind::stream_done, s.state_, seq, false, w);
    if (r == WaitResult::done) {
      const std::lock_guard<std::mutex> lock(rank_->mutex);
      throw_if_failed();
      if (checking()) host_observed(*rank_, s.state_->clock);
    }
    return r;
  }

  [[nodiscard]] double elapsed_ms(const CpuEvent& start, const CpuEvent& end) {
    const std::lock_guard<std::mutex> lock(rank_->mutex);
    const auto& a = own(start, "elapsed_ms");
    const auto& b = own(end, "elapsed_ms");
    for (const auto* ev : {&a, &b}) {
      if (is_captured(*ev)) captured_event_read(*ev, "elapsed_ms");
      if (!ev->recorded || ev->stream->completed < ev->seq || ev->time_seq != ev->seq) {
        detail::fail({"CPU backend", detail::concat("elapsed_ms: event #", ev->id, " has not completed its last record"),
              detail::concat("rank ", rank()), "Synchronize on both events before reading the time between them"});
      }
    }
    return std::chrono::duration<double, std::milli>(b.time - a.time).count();
  }

  // When the event's last record ran, on the host's steady clock (not a Backend operation:
  // CUDA has no such clock; the executor uses it, when a backend has it, to put the ranks of
  // a World on one time axis exactly).
  [[nodiscard]] std::chrono::steady_clock::time_point event_time(const CpuEvent& e) {
    const std::lock_guard<std::mutex> lock(rank_->mutex);
    const auto& ev = own(e, "event_time");
    if (is_captured(ev)) captured_event_read(ev, "event_time");
    if (!ev.recorded || ev.stream->completed < ev.seq || ev.time_seq != ev.seq) {
      detail::fail({"CPU backend", detail::concat("event_time: event #", ev.id, " has not completed its last record"),
            detail::concat("rank ", rank()), "Synchronize on the event first"});
    }
    return ev.time;
  }

  // ------------------------------------------------------------------ buffers
  [[nodiscard]] CpuBuffer allocate(std::size_t count) {
    if (capture_ && capture_thread_ == std::this_thread::get_id()) {
      capture_violation(detail::concat("allocate: ", count,
                                       " floats requested by the capturing thread (CUDA refuses cudaMalloc while the "
                                       "thread captures: a replay would not allocate again)"),
                        "Allocate before begin_capture");
    }
    CpuBuffer b;
    try {
      b.data_ = std::make_unique<float[]>(count);  // zero-filled
    } catch (const std::bad_alloc&) {  // bad_array_new_length too: a count past the address space
      detail::fail({"CPU backend", detail::concat("allocate: cannot allocate ", count, " floats"),
            detail::concat("rank ", rank()), "Check the stage's sizes (StageFunctions input/output/weight_grad_size)"});
    }
    b.size_ = count;
    b.state_ = std::make_unique<detail::cpu::BufferState>();
    b.state_->rank = rank_;
    b.state_->size = count;
    {
      const std::lock_guard<std::mutex> lock(rank_->mutex);
      b.state_->id = rank_->next_buffer_id++;
      b.state_->reads.reserve(rank_->streams.size() + 2);
    }
    return b;
  }

  [[nodiscard]] std::span<float> span(const CpuBuffer& b) const noexcept { return b.span(); }

  // The host pool of offloaded activations (a backend's optional `allocate_host`; CUDA:
  // pinned memory). Here device memory is host memory already, so a host buffer is a buffer
  // like any other — with the race checker's history, so an OFFLOAD and a RELOAD that are
  // not ordered against the tasks touching their slot are reported as on any buffer — and is
  // only counted apart, so that a test sees the pool's size.
  using host_buffer = CpuBuffer;
  [[nodiscard]] CpuBuffer allocate_host(std::size_t count) {
    CpuBuffer b = allocate(count);
    host_floats_.fetch_add(count, std::memory_order_relaxed);
    return b;
  }
  // Floats allocated with allocate_host on this rank so far.
  [[nodiscard]] std::size_t host_floats() const noexcept { return host_floats_.load(std::memory_order_relaxed); }
  // Floats this rank has posted to send, and to receive, so far (every send and recv): the
  // transfer accounting a test reads to see what a step moved (a variable-length batch moves
  // its micro-batches' sizes, Batch::sizes, not the buffers').
  [[nodiscard]] std::size_t floats_sent() const noexcept { return floats_sent_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::size_t floats_received() const noexcept { return floats_received_.load(std::memory_order_relaxed); }

  void zero(CpuStream& s, CpuBuffer& b) {
    using namespace detail::cpu;
    count_host_operation();
    if (capturing(s)) {
      own(b, "zero");
      capture_node(s, CaptureNode::make(CaptureOp::zero, &s, nullptr, &b));
      return;
    }
    auto lock = issue(s, 0);
    own(b, "zero");
    const AccessRecord access = next_access(*s.state_, TaskKind::zero, {});
    if (checking()) check_access(*b.state_, access, false, true, s.state_->clock);
    Task& t = begin_task(*s.state_, TaskKind::zero);
    t.to = b.data_.get();
    t.count = b.size_;
    commit(*s.state_);
    if (checking()) record_access(*b.state_, access, true);
  }

  void accumulate(CpuStream& s, CpuBuffer& to, const CpuBuffer& from) {
    using namespace detail::cpu;
    count_host_operation();
    if (capturing(s)) {
      own(to, "accumulate");
      own(from, "accumulate");
      capture_node(s, CaptureNode::make(CaptureOp::accumulate, &s, nullptr, &to, &from));
      return;
    }
    auto lock = issue(s, 0);
    own(to, "accumulate");
    own(from, "accumulate");
    if (to.size_ != from.size_) {
      detail::fail({"CPU backend",
            detail::concat("accumulate: buffer #", to.id(), " holds ", to.size_, " floats but buffer #", from.id(),
                           " holds ", from.size_),
            detail::concat("rank ", rank()), "Accumulate between buffers of equal size"});
    }
    const AccessRecord access = next_access(*s.state_, TaskKind::accumulate, {});
    if (checking()) {
      check_access(*to.state_, access, true, true, s.state_->clock);
      check_access(*from.state_, access, true, false, s.state_->clock);
    }
    Task& t = begin_task(*s.state_, TaskKind::accumulate);
    t.to = to.data_.get();
    t.from = from.data_.get();
    t.count = to.size_;
    commit(*s.state_);
    if (checking()) {
      record_access(*to.state_, access, true);
      record_access(*from.state_, access, false);
    }
  }

  void launch(CpuStream& s, HostTask task, std::span<const BufferUse<CpuBuffer>> uses = {}) {
    using namespace detail::cpu;
    if (task.run == nullptr) {
      detail::fail({"CPU backend", "launch: the task has no function", detail::concat("rank ", rank()),
            "Build the task with host_task(callable)"});
    }
    count_host_operation();
    if (capturing(s)) {
      for (const auto& u : uses) own(*u.buffer, "launch");
      CaptureNode node = CaptureNode::make(CaptureOp::launch, &s);
      node.task = task;
      node.uses.assign(uses.begin(), uses.end());
      capture_node(s, std::move(node));
      return;
    }
    auto lock = issue(s, 0);
    for (const auto& u : uses) own(*u.buffer, "launch");
    const AccessRecord access = next_access(*s.state_, TaskKind::launch, task.label);
    if (checking()) {
      for (const auto& u : uses)
        check_access(*u.buffer->state_, access, detail::reads(u.access), detail::writes(u.access), s.state_->clock);
    }
    Task& t = begin_task(*s.state_, TaskKind::launch);
    t.host = task;
    commit(*s.state_);
    if (checking()) {
      for (const auto& u : uses) record_access(*u.buffer->state_, access, detail::writes(u.access));
    }
  }

  // ------------------------------------------------------------------ communicator
  void group_start() {
    count_host_operation();
    if (capture_ && !replaying_) {
      ++capture_->group_depth;
      capture_->nodes.push_back(detail::cpu::CaptureNode::make(detail::cpu::CaptureOp::group_start));
      return;
    }
    const std::lock_guard<std::mutex> lock(rank_->mutex);
    throw_if_failed();
    if (rank_->group_depth++ == 0) {
      rank_->staged.clear();
      rank_->group_stream = nullptr;
    }
  }

  void group_end() {
    using namespace detail::cpu;
    count_host_operation();
    if (capture_ && !replaying_ && capture_->group_depth > 0) {
      --capture_->group_depth;
      capture_->nodes.push_back(CaptureNode::make(CaptureOp::group_end));
      return;
    }
    StreamState* s = nullptr;
    {
      const std::lock_guard<std::mutex> lock(rank_->mutex);
      if (rank_->group_depth == 0) {
        detail::fail({"CPU backend", "group_end without a matching group_start", detail::concat("rank ", rank()),
              "Call group_start() before posting the group's sends and receives"});
      }
      if (--rank_->group_depth > 0 || rank_->staged.empty()) return;
      s = rank_->group_stream;
    }
    post_group(*s);
  }

  void send(const CpuBuffer& b, std::size_t count, int peer, CpuStream& s, PeerTag tag = {}) {
    count_host_operation();
    if (capture_transfer(true, const_cast<CpuBuffer&>(b), count, peer, s, tag)) return;
    stage(true, const_cast<CpuBuffer&>(b), count, peer, s, tag);
  }
  void recv(CpuBuffer& b, std::size_t count, int peer, CpuStream& s, PeerTag tag = {}) {
    count_host_operation();
    if (capture_transfer(false, b, count, peer, s, tag)) return;
    stage(false, b, count, peer, s, tag);
  }

  // ncclCommAbort: every pending transfer of this rank, and every transfer a peer has posted
  // towards it, ends with an error, and the rank fails (sticky, as the CUDA backend's abort
  // makes it), so the work queued on its streams is discarded instead of run: a task already
  // running finishes, nothing after it starts. Without that, work of an aborted step that
  // waits behind a running task would run after recover() and post its transfers into the
  // next step.
  void abort(std::string_view reason) {
    {
      const std::lock_guard<std::mutex> lock(rank_->mutex);
      if (!rank_->failed) {
        detail::cpu::fail_rank_locked(
            *rank_, std::make_exception_ptr(detail::make_error({"CPU backend",
                                                        detail::concat("the communicator was aborted (", reason, ")"),
                                                        detail::concat("rank ", rank()),
                                                        "See the first error of the step for the cause"})));
      }
    }
    rank_->aborted.store(true, std::memory_order_release);
    for (auto& r : cluster_->rank_states) detail::cpu::wake_rank(*r);
    if (cluster_->deterministic()) {
      const std::lock_guard<std::mutex> engine(cluster_->engine_mutex);
      cluster_->engine_wake.notify_all();
    }
  }

  // After a failed step, once every rank's streams are idle: clears the sticky error and the
  // abort, as a fresh communicator would. Work still queued is discarded.
  void recover() {
    using namespace detail::cpu;
    ++generation_;    // a new communicator: graphs captured before it are stale
    capture_.reset();  // a capture open in the failed step ends with it
    for (int peer = 0; peer < cluster_->ranks; ++peer) {
      for (Channel* ch : {&cluster_->channel(rank(), peer), &cluster_->channel(peer, rank())}) {
        const std::lock_guard<std::mutex> lock(ch->mutex);
        for (auto* list : {&ch->sends, &ch->recvs}) {
          auto mine = [&](P2POp* op) { return op->owner->rank == rank_; };
          for (P2POp* op : *list) {
            if (mine(op)) op->in_channel = false;
          }
          list->erase(std::remove_if(list->begin(), list->end(), mine), list->end());
        }
      }
    }
    const std::lock_guard<std::mutex> lock(rank_->mutex);
    // The streams are idle: the host has, in effect, synchronised with all of their work.
    if (checking()) {
      for (auto& s : rank_->streams) host_observed(*rank_, s->clock);
    }
    rank_->failed = false;
    rank_->error = nullptr;
    rank_->aborted.store(false, std::memory_order_release);
    rank_->group_depth = 0;
    rank_->staged.clear();
  }

  // ------------------------------------------------------------------ graphs (backend/cpu/graph.hpp)
  using graph = detail::cpu::CpuGraph;

  // cudaStreamBeginCapture: from now on the work issued to `s`, and to every stream that waits
  // on an event recorded in the capture, is recorded instead of run. One capture per rank.
  void begin_capture(CpuStream& s) {
    count_host_operation();
    {
      const std::lock_guard<std::mutex> lock(rank_->mutex);
      throw_if_failed();
      own(s);
    }
    if (capture_ || replaying_) {
      detail::fail({"CPU backend (capture)",
                    detail::concat("begin_capture on stream ", s.state_->local, " while a capture is open on stream ",
                                   capture_ ? capture_->origin->local : -1),
                    detail::concat("rank ", rank()), "End the open capture first (end_capture)"});
    }
    capture_ = std::make_unique<detail::cpu::CaptureState>();
    capture_->origin = s.state_;
    capture_thread_ = std::this_thread::get_id();
    add_to_capture(s);
  }

  // cudaStreamEndCapture + cudaGraphInstantiate: the program recorded since begin_capture.
  // Throws the first rule the capture broke, or a stream left unjoined.
  [[nodiscard]] detail::cpu::CpuGraph end_capture(CpuStream& s) {
    count_host_operation();
    own(s);
    if (!capture_ || capture_->origin != s.state_) {
      detail::fail({"CPU backend (capture)",
                    detail::concat("end_capture on stream ", s.state_->local, ", which did not begin a capture"),
                    detail::concat("rank ", rank()), "End a capture on the stream that began it"});
    }
    std::unique_ptr<detail::cpu::CaptureState> c = std::move(capture_);
    const std::string where = detail::concat("rank ", rank(), ", capture on stream ", c->origin->local);
    if (!c->invalid.empty()) {
      detail::fail({"CPU backend (capture)", detail::concat("the capture was invalidated: ", c->invalid), where,
                    "Issue only stream work inside a capture: no host synchronisation, query or allocation"});
    }
    if (c->group_depth != 0) {
      detail::fail({"CPU backend (capture)", "a transfer group is still open", where, "Close it with group_end"});
    }
    for (std::size_t j = 1; j < c->streams.size(); ++j) {
      if (c->joined[j] >= c->last_node[j]) continue;
      detail::fail({"CPU backend (capture)",
                    detail::concat("stream ", c->streams[j]->local,
                                   " joined the capture but its last captured work was not joined back into stream ",
                                   c->origin->local, " (CUDA: cudaErrorStreamCaptureUnjoined)"),
                    where,
                    "Record an event on it after its last work and make the capturing stream wait on it before "
                    "end_capture"});
    }
    detail::cpu::CpuGraph g;
    g.rank_ = rank_;
    g.generation_ = generation_;
    g.nodes_ = std::move(c->nodes);
    g.streams_ = std::move(c->handles);
    for (std::size_t k = 0; k < g.streams_.size(); ++k) {
      CpuEvent fork_or_join = create_event();
      g.fork_join_.push_back(fork_or_join.state_);
    }
    return g;
  }

  // cudaGraphLaunch: issues the graph's program again onto its streams (those captured on the
  // capture's stream onto `s`), after the work issued to `s` so far and before any issued
  // later, with every check of issued work. One host operation however many nodes.
  void replay(detail::cpu::CpuGraph& g, CpuStream& s) {
    count_host_operation();
    own(s);
    if (g.rank_ == nullptr) {
      detail::fail({"CPU backend (capture)", "replay: the graph is empty (default-constructed or moved from)",
                    detail::concat("rank ", rank()), "Replay a graph end_capture returned"});
    }
    if (g.rank_ != rank_) {
      detail::fail({"CPU backend (capture)", detail::concat("replay: the graph was captured on rank ", g.rank_->rank),
                    detail::concat("rank ", rank()), "Replay a graph on the rank that captured it"});
    }
    if (g.generation_ != generation_) {
      detail::fail({"CPU backend (capture)",
                    "replay: the graph was captured before recover(): its transfers used the aborted communicator",
                    detail::concat("rank ", rank()), "Capture the step again after a failed step"});
    }
    if (capture_) {
      detail::fail({"CPU backend (capture)", "replay inside an open capture", detail::concat("rank ", rank()),
                    "Replay after end_capture"});
    }
    using detail::cpu::CaptureOp;
    replaying_ = true;
    struct Done {
      bool& flag;
      ~Done() { flag = false; }
    } done{replaying_};
    const auto on = [&](CpuStream* st) -> CpuStream& { return st == g.streams_.front() ? s : *st; };
    CpuEvent fork(g.fork_join_.front());
    record(fork, s);
    for (std::size_t k = 1; k < g.streams_.size(); ++k) wait(*g.streams_[k], fork);
    for (const detail::cpu::CaptureNode& n : g.nodes_) {
      switch (n.op) {
        case CaptureOp::record: {
          CpuEvent e(n.event);
          record(e, on(n.stream));
          break;
        }
        case CaptureOp::wait: {
          const CpuEvent e(n.event);
          wait(on(n.stream), e);
          break;
        }
        case CaptureOp::zero:
          zero(on(n.stream), *n.to);
          break;
        case CaptureOp::accumulate:
          accumulate(on(n.stream), *n.to, *n.from);
          break;
        case CaptureOp::launch:
          launch(on(n.stream), n.task, n.uses);
          break;
        case CaptureOp::group_start:
          group_start();
          break;
        case CaptureOp::group_end:
          group_end();
          break;
        case CaptureOp::send:
          send(*n.from, n.count, n.peer, on(n.stream), n.tag);
          break;
        case CaptureOp::recv:
          recv(*n.to, n.count, n.peer, on(n.stream), n.tag);
          break;
      }
    }
    for (std::size_t k = 1; k < g.streams_.size(); ++k) {
      CpuEvent join(g.fork_join_[k]);
      record(join, *g.streams_[k]);
      wait(s, join);
    }
  }

  // Operations this rank's host issued (record, wait, query, synchronize, zero, accumulate,
  // launch, transfers and groups, capture and replay), a replay counting as one: what a step
  // costs the host, whatever the work.
  [[nodiscard]] std::uint64_t host_operations() const noexcept {
    return host_operations_.load(std::memory_order_relaxed);
  }

  // True once a task on this rank failed (the sticky error is set).
  [[nodiscard]] bool failed() const {
    const std::lock_guard<std::mutex> lock(rank_->mutex);
    return rank_->failed;
  }

  // Deterministic mode: the engine runs only while no host thread may still issue work. A
  // host that is about to issue a step calls host_begin() before any other rank's host can
  // block (the World does it for every rank before starting the step), and host_end() when it
  // has nothing more to issue. In threaded mode both do nothing.
  void host_begin() {
    if (!cluster_->deterministic()) return;
    const std::lock_guard<std::mutex> engine(cluster_->engine_mutex);
    rank_->host = detail::cpu::HostState::active;
  }
  void host_end() {
    if (!cluster_->deterministic()) return;
    const std::lock_guard<std::mutex> engine(cluster_->engine_mutex);
    rank_->host = detail::cpu::HostState::idle;
    cluster_->engine_wake.notify_all();
  }

 private:
  friend class CpuCluster;
  friend class CpuStream;

  CpuBackend(detail::cpu::ClusterState* c, detail::cpu::RankState* r) : cluster_(c), rank_(r) {
    rank_->staged.reserve(16);
  }

  std::atomic<std::size_t> host_floats_{0};
  std::atomic<std::size_t> floats_sent_{0};
  std::atomic<std::size_t> floats_received_{0};

  // Graph capture (backend/cpu/graph.hpp): the host thread's state.
  std::unique_ptr<detail::cpu::CaptureState> capture_;
  std::thread::id capture_thread_{};
  bool replaying_ = false;               // replay() is issuing a graph's nodes
  std::uint64_t generation_ = 0;         // recover() calls: a graph replays in its generation only
  std::vector<bool> captured_events_;    // by event id: last recorded inside a capture
  std::atomic<std::uint64_t> host_operations_{0};

  void count_host_operation() noexcept {
    if (!replaying_) host_operations_.fetch_add(1, std::memory_order_relaxed);
  }
  [[nodiscard]] bool capturing(const CpuStream& s) const noexcept {
    return capture_ && !replaying_ && capture_->index_of(s.state_) >= 0;
  }
  [[nodiscard]] bool is_captured(const detail::cpu::EventState& ev) const noexcept {
    return ev.id < captured_events_.size() && captured_events_[ev.id];
  }
  void set_captured(const detail::cpu::EventState& ev, bool captured) {
    if (!captured && ev.id >= captured_events_.size()) return;
    if (ev.id >= captured_events_.size()) captured_events_.resize(ev.id + 1, false);
    captured_events_[ev.id] = captured;
  }
  void add_to_capture(CpuStream& s) {
    capture_->streams.push_back(s.state_);
    capture_->handles.push_back(&s);
    capture_->last_node.push_back(0);
    capture_->joined.push_back(0);
  }
  void capture_node(CpuStream& s, detail::cpu::CaptureNode node) {
    const auto i = static_cast<std::size_t>(capture_->index_of(s.state_));
    capture_->nodes.push_back(std::move(node));
    capture_->last_node[i] = capture_->nodes.size();
  }
  // A rule of capture broken: the operation fails, and so will end_capture.
  [[noreturn]] void capture_violation(std::string what, std::string_view fix) {
    if (capture_ && capture_->invalid.empty()) capture_->invalid = what;
    detail::fail({"CPU backend (capture)", std::move(what), detail::concat("rank ", rank()), std::string(fix)});
  }
  [[noreturn]] void captured_event_read(const detail::cpu::EventState& ev, std::string_view op) {
    capture_violation(detail::concat(op, " on event #", ev.id,
                                     ", last recorded in a capture: such a record orders the graph's work, and the "
                                     "host cannot read it (CUDA: cudaErrorCapturedEvent)"),
                      "Record another event outside the capture (after the replay) and wait on that");
  }
  bool capture_record(CpuEvent& e, CpuStream& s) {
    if (!capturing(s)) return false;
    detail::cpu::EventState& ev = own(e, "record");
    capture_node(s, detail::cpu::CaptureNode::make(detail::cpu::CaptureOp::record, &s, &ev));
    capture_->events.push_back(&ev);
    capture_->event_stream.push_back(static_cast<std::size_t>(capture_->index_of(s.state_)));
    capture_->event_node.push_back(capture_->nodes.size());
    set_captured(ev, true);
    return true;
  }
  // A wait inside the capture, or one that makes `s` join it (it waits on an event recorded
  // in the capture, as CUDA's cross-stream capture has it).
  bool capture_wait(CpuStream& s, const CpuEvent& e) {
    if (!capture_ || replaying_) return false;
    detail::cpu::EventState& ev = own(e, "wait");
    const std::ptrdiff_t k = capture_->event_index(&ev);
    std::ptrdiff_t i = capture_->index_of(s.state_);
    if (i < 0) {
      if (k < 0) return false;  // neither in the capture: an ordinary wait
      own(s);
      add_to_capture(s);
      i = static_cast<std::ptrdiff_t>(capture_->streams.size()) - 1;
    }
    if (k < 0) {
      capture_violation(detail::concat("wait: stream ", s.state_->local, " waits inside the capture on event #", ev.id,
                                       ", which was recorded outside it: a graph cannot wait on work outside it"),
                        "Record the event inside the capture, or make the stream wait before begin_capture");
    }
    capture_node(s, detail::cpu::CaptureNode::make(detail::cpu::CaptureOp::wait, &s, &ev));
    if (i == 0) {
      const std::size_t j = capture_->event_stream[static_cast<std::size_t>(k)];
      capture_->joined[j] = std::max(capture_->joined[j], capture_->event_node[static_cast<std::size_t>(k)]);
    }
    return true;
  }
  // A transfer while a capture is open: recorded when its stream is captured; one on a stream
  // outside the capture would be posted now, between captured group operations.
  bool capture_transfer(bool is_send, CpuBuffer& b, std::size_t count, int peer, CpuStream& s, PeerTag tag) {
    if (!capture_ || replaying_) return false;
    own(s);
    own(b, is_send ? "send" : "recv");
    if (!capturing(s)) {
      if (capture_->group_depth == 0) return false;
      capture_violation(detail::concat(is_send ? "send" : "recv", ": a captured transfer group posts on stream ",
                                       s.state_->local, ", which is outside the capture"),
                        "Post a captured group's transfers on a captured stream");
    }
    if (peer < 0 || peer >= cluster_->ranks || count > b.size_) {
      detail::fail({"CPU backend (capture)",
                    detail::concat(is_send ? "send" : "recv", ": peer ", peer, ", ", count, " floats of buffer #",
                                   b.id(), " (", b.size_, " floats) in a ", cluster_->ranks, "-rank cluster"),
                    detail::concat("rank ", rank(), tag.label.empty() ? "" : detail::concat(", '", tag.label, "'")),
                    "Use an existing peer and at most the buffer's size"});
    }
    detail::cpu::CaptureNode node =
        detail::cpu::CaptureNode::make(is_send ? detail::cpu::CaptureOp::send : detail::cpu::CaptureOp::recv, &s);
    node.count = count;
    node.peer = peer;
    node.tag = tag;
    if (is_send) {
      node.from = &b;
    } else {
      node.to = &b;
    }
    capture_node(s, std::move(node));
    return true;
  }

  [[nodiscard]] bool checking() const noexcept { return cluster_->options.checking; }

  [[nodiscard]] std::unique_lock<std::mutex> engine_lock() {
    return cluster_->deterministic() ? std::unique_lock<std::mutex>(cluster_->engine_mutex)
                                     : std::unique_lock<std::mutex>();
  }

  void throw_if_failed() const {
    if (rank_->failed) std::rethrow_exception(rank_->error);
  }

  [[noreturn]] void never_recorded(const detail::cpu::EventState& ev, std::string_view what) const {
    detail::fail({"CPU backend (checking)",
          detail::concat(what, " on an event never recorded: event #", ev.id,
                         " has no record, so on CUDA it reports complete before any work it meant to cover"),
          detail::concat("rank ", rank()), "Record the event before waiting on it"});
  }

  detail::cpu::EventState& own(const CpuEvent& e, std::string_view op) const {
    if (e.state_ == nullptr) {
      detail::fail({"CPU backend", detail::concat(op, ": the event is empty (default-constructed or moved from)"),
            detail::concat("rank ", rank()), "Create events with create_event()"});
    }
    if (e.state_->rank != rank_) {
      detail::fail({"CPU backend", detail::concat(op, ": event #", e.state_->id, " belongs to rank ", e.state_->rank->rank),
            detail::concat("rank ", rank()), "Use events created by this rank's backend"});
    }
    return *e.state_;
  }
  void own(const CpuBuffer& b, std::string_view op) const {
    if (b.state_ == nullptr) {
      detail::fail({"CPU backend", detail::concat(op, ": the buffer is empty (default-constructed or moved from)"),
            detail::concat("rank ", rank()), "Allocate buffers with allocate(count)"});
    }
    if (b.state_->rank != rank_) {
      detail::fail({"CPU backend", detail::concat(op, ": buffer #", b.state_->id, " belongs to rank ", b.state_->rank->rank),
            detail::concat("rank ", rank()), "Use buffers allocated by this rank's backend"});
    }
  }
  void own(const CpuStream& s) const {
    if (s.state_ == nullptr) {
      detail::fail({"CPU backend", "the stream is empty (default-constructed or moved from)", detail::concat("rank ", rank()),
            "Create streams with create_stream()"});
    }
    if (s.state_->rank != rank_) {
      detail::fail({"CPU backend", detail::concat("stream ", s.state_->local, " belongs to rank ", s.state_->rank->rank),
            detail::concat("rank ", rank()), "Issue work on this rank's own streams"});
    }
  }

  // Deterministic mode: a host that issues work holds the engine until it waits.
  void ensure_active() {
    if (!cluster_->deterministic()) return;
    const std::lock_guard<std::mutex> engine(cluster_->engine_mutex);
    rank_->host = detail::cpu::HostState::active;
    rank_->host_thread = std::this_thread::get_id();
  }

  // Takes the rank's lock for issuing `tasks` tasks and `ops` transfer slots on `s`: checks
  // the stream, waits (bounded) for room in its queue, and throws the sticky error.
  [[nodiscard]] std::unique_lock<std::mutex> issue(CpuStream& s, std::size_t ops) {
    {
      const std::lock_guard<std::mutex> lock(rank_->mutex);
      own(s);
    }
    return issue_on(*s.state_, ops);
  }

  [[nodiscard]] std::unique_lock<std::mutex> issue_on(detail::cpu::StreamState& st, std::size_t ops) {
    using namespace detail::cpu;
    ensure_active();
    std::unique_lock<std::mutex> lock(rank_->mutex);
    throw_if_failed();
    if (st.closing) {
      detail::fail({"CPU backend", detail::concat("stream ", st.local, " is being destroyed"), detail::concat("rank ", rank()),
            "Issue work only on live streams"});
    }
    if (ops > st.op_capacity) {
      detail::fail(
          {"CPU backend",
           detail::concat("a transfer group of ", ops, " operations exceeds the stream's capacity of ", st.op_capacity),
           detail::concat("rank ", rank()), "Raise CpuOptions::queue_capacity or split the group"});
    }
    auto room = [&] { return rank_->failed || (!st.tasks.full() && st.op_size + ops <= st.op_capacity); };
    if (!room()) {
      ++rank_->queue_full_waits;
      lock.unlock();
      const WaitResult r = host_wait(HostWaitKind::queue_room, &st, ops, true, HostWait{});
      lock.lock();
      if (r != WaitResult::done || !room()) {
        throw_if_failed();
        detail::fail({"CPU backend",
              detail::concat("the host waited longer than the watchdog (", cluster_->options.watchdog.count(),
                             " ms) for room in the queue of stream ", st.local),
              detail::concat("rank ", rank()),
              "The stream is stuck; see its head task, or raise CpuOptions::queue_capacity"});
      }
      throw_if_failed();
    }
    return lock;
  }

  [[nodiscard]] static detail::cpu::AccessRecord next_access(const detail::cpu::StreamState& s,
                                                             detail::cpu::TaskKind kind, std::string_view label,
                                                             bool is_send = false) {
    return {s.local, s.issued + 1, kind, is_send, label};
  }

  static detail::cpu::Task& begin_task(detail::cpu::StreamState& s, detail::cpu::TaskKind kind) {
    detail::cpu::Task& t = s.tasks.back_slot();
    t = detail::cpu::Task{};
    t.kind = kind;
    t.seq = s.issued + 1;
    return t;
  }

  void commit(detail::cpu::StreamState& s) {
    s.tasks.push();
    ++s.issued;
    if (checking()) detail::cpu::advance_clock(s, s.issued);
    detail::cpu::wake_worker(s);
  }

  void stage(bool is_send, CpuBuffer& b, std::size_t count, int peer, CpuStream& s, PeerTag tag) {
    {
      const std::lock_guard<std::mutex> lock(rank_->mutex);
      throw_if_failed();
      own(s);
      own(b, is_send ? "send" : "recv");
      const char* what = is_send ? "send" : "recv";
      if (peer < 0 || peer >= cluster_->ranks) {
        detail::fail({"CPU backend",
              detail::concat(what, ": peer ", peer, " is not a rank of this ", cluster_->ranks, "-rank cluster"),
              detail::concat("rank ", rank(), tag.label.empty() ? "" : detail::concat(", '", tag.label, "'")),
              detail::concat("Use a peer in 0..", cluster_->ranks - 1)});
      }
      if (count > b.size_) {
        detail::fail({"CPU backend", detail::concat(what, ": ", count, " floats do not fit buffer #", b.id(), " of ", b.size_),
              detail::concat("rank ", rank(), tag.label.empty() ? "" : detail::concat(", '", tag.label, "'")),
              "Transfer at most the buffer's size"});
      }
      if (rank_->group_depth > 0 && rank_->group_stream != nullptr && rank_->group_stream != s.state_) {
        detail::fail({"CPU backend",
              detail::concat(what, ": a transfer group spans streams ", rank_->group_stream->local, " and ",
                             s.state_->local),
              detail::concat("rank ", rank()), "Post every operation of a group on one stream"});
      }
      rank_->group_stream = s.state_;
      rank_->staged.push_back({is_send, peer, b.data_.get(), count, tag, b.state_.get()});
      (is_send ? floats_sent_ : floats_received_).fetch_add(count, std::memory_order_relaxed);
      if (rank_->group_depth > 0) return;
    }
    post_group(*s.state_);  // outside a group: a group of its own
  }

  // Turns the staged operations into one group task on `s`.
  void post_group(detail::cpu::StreamState& st) {
    using namespace detail::cpu;
    std::vector<RankState::Staged>& staged = rank_->staged;
    auto lock = issue_on(st, staged.size());
    struct Clear {
      std::vector<RankState::Staged>& v;
      ~Clear() { v.clear(); }
    } clear{staged};
    if (checking()) {
      for (std::size_t i = 0; i < staged.size(); ++i) {
        for (std::size_t j = i + 1; j < staged.size(); ++j) {
          if (staged[i].buffer == staged[j].buffer && (!staged[i].is_send || !staged[j].is_send)) {
            detail::fail({"CPU backend (checking)",
                  detail::concat(
                      "one transfer group both ",
                      !staged[i].is_send && !staged[j].is_send ? "receives twice into" : "sends from and receives into",
                      " buffer #", staged[i].buffer->id),
                  detail::concat("rank ", rank(), ", stream ", st.local),
                  "Use separate buffers for the group's transfers"});
          }
        }
      }
      for (const auto& op : staged) {
        const AccessRecord access = next_access(st, TaskKind::group, op.tag.label, op.is_send);
        check_access(*op.buffer, access, op.is_send, !op.is_send, st.clock);
      }
    }
    Task& t = begin_task(st, TaskKind::group);
    t.first_op = st.op_head + st.op_size;
    t.op_count = staged.size();
    for (std::size_t i = 0; i < staged.size(); ++i) {
      P2POp& op = st.op(t.first_op + i);
      op.is_send = staged[i].is_send;
      op.peer = staged[i].peer;
      op.data = staged[i].data;
      op.count = staged[i].count;
      op.tag = staged[i].tag;
      op.owner = &st;
      op.in_channel = false;
      op.state.store(OpState::pending, std::memory_order_relaxed);
    }
    st.op_size += staged.size();
    if (checking()) {
      for (const auto& op : staged) {
        record_access(*op.buffer, next_access(st, TaskKind::group, op.tag.label, op.is_send), !op.is_send);
      }
    }
    commit(st);
  }

  // Blocks the host until the condition holds, the deadline (capped by the watchdog) passes
  // or the stop token is requested. `fail_fast`: a failed rank ends the wait at once.
  [[nodiscard]] WaitResult host_wait(detail::cpu::HostWaitKind kind, detail::cpu::StreamState* s, std::uint64_t n,
                                     bool fail_fast, const HostWait& w) {
    using namespace detail::cpu;
    // Twice the watchdog: a stream stuck that long has failed with its own, more precise,
    // watchdog error first, and the host reports that.
    const auto& watchdog = cluster_->options.watchdog;
    const auto cap = detail::saturating_deadline(detail::saturating_deadline(Clock::now(), watchdog), watchdog);
    const auto deadline = std::min(w.deadline, cap);
    auto satisfied = [&] {
      if (fail_fast && rank_->failed) return true;
      if (kind == HostWaitKind::queue_room)
        return rank_->failed || (!s->tasks.full() && s->op_size + n <= s->op_capacity);
      return s->completed >= n;
    };
    if (!cluster_->deterministic()) {
      std::stop_callback wake(w.stop, [this] {
        const std::lock_guard<std::mutex> lock(rank_->mutex);
        rank_->host_wake.notify_all();
      });
      std::unique_lock<std::mutex> lock(rank_->mutex);
      while (!satisfied()) {
        if (w.stop.stop_requested()) return WaitResult::stopped;
        // Ask the stream to wake this host when the condition may hold, not on every task.
        if (kind == HostWaitKind::queue_room) {
          s->host_wants_room = true;
        } else {
          s->host_target = std::min(s->host_target, n);
        }
        if (wait_until_or_forever(rank_->host_wake, lock, deadline) == std::cv_status::timeout && !satisfied()) {
          return WaitResult::timed_out;
        }
      }
      return WaitResult::done;
    }
    {
      const std::lock_guard<std::mutex> lock(rank_->mutex);
      if (satisfied()) return WaitResult::done;
    }
    std::stop_callback wake(w.stop, [this] {
      const std::lock_guard<std::mutex> engine(cluster_->engine_mutex);
      cluster_->engine_wake.notify_all();
    });
    std::unique_lock<std::mutex> engine(cluster_->engine_mutex);
    // While this thread waits it issues nothing on the other ranks it drives either.
    const auto me = std::this_thread::get_id();
    for (auto& r : cluster_->rank_states) {
      if (r.get() != rank_ && r->host == HostState::active && r->host_thread == me) r->host = HostState::idle;
    }
    rank_->wait_kind = kind;
    rank_->wait_stream = s;
    rank_->wait_seq = n;
    rank_->host = HostState::waiting;
    cluster_->engine_wake.notify_all();
    for (;;) {
      if (rank_->host == HostState::active) {
        // The engine found nothing could move: waiting longer would change nothing.
        if (std::exchange(rank_->stalled, false)) return WaitResult::timed_out;
        return WaitResult::done;
      }
      if (w.stop.stop_requested()) {
        rank_->host = HostState::active;
        return WaitResult::stopped;
      }
      if (wait_until_or_forever(cluster_->engine_wake, engine, deadline) == std::cv_status::timeout &&
          rank_->host != HostState::active) {
        rank_->host = HostState::active;
        return WaitResult::timed_out;
      }
    }
  }

  detail::cpu::ClusterState* cluster_;
  detail::cpu::RankState* rank_;
};

// p ranks in one process, sharing rendezvous channels.
class CpuCluster {
 public:
  explicit CpuCluster(int ranks, CpuOptions options = {}) : state_(std::make_unique<detail::cpu::ClusterState>()) {
    if (ranks < 1) {
      detail::fail({"CpuCluster", detail::concat("needs at least 1 rank, got ", ranks), "", "Pass the pipeline's rank count"});
    }
    // Bounds on counts that are legal to write but not to allocate: p^2 channels (p * p
    // overflowed an int past 46340 ranks) and a preallocated queue per stream.
    if (ranks > max_ranks) {
      detail::fail({"CpuCluster", detail::concat("asked for ", ranks, " ranks; it models at most ", max_ranks),
            "", "One process holds a channel per pair of ranks; use fewer ranks"});
    }
    if (options.queue_capacity == 0 || options.queue_capacity > max_queue_capacity) {
      detail::fail({"CpuCluster", detail::concat("queue_capacity is ", options.queue_capacity), "CpuOptions::queue_capacity",
            detail::concat("Use 1 to ", max_queue_capacity,
                           " (default 4096; each slot is allocated up front, and a step may issue more)")});
    }
    if (options.watchdog.count() <= 0) {
      detail::fail({"CpuCluster", detail::concat("watchdog is ", options.watchdog.count(), " ms"), "CpuOptions::watchdog",
            "Give a positive timeout, or ppsched::no_timeout (milliseconds::max()) for none"});
    }
    state_->options = options;
    state_->ranks = ranks;
    for (int r = 0; r < ranks; ++r) {
      auto rs = std::make_unique<detail::cpu::RankState>();
      rs->cluster = state_.get();
      rs->rank = r;
      state_->rank_states.push_back(std::move(rs));
    }
    for (int i = 0; i < ranks * ranks; ++i) {
      auto ch = std::make_unique<detail::cpu::Channel>();
      ch->sends.reserve(16);
      ch->recvs.reserve(16);
      state_->channels.push_back(std::move(ch));
    }
    for (int r = 0; r < ranks; ++r) {
      backends_.push_back(std::unique_ptr<CpuBackend>(
          new CpuBackend(state_.get(), state_->rank_states[static_cast<std::size_t>(r)].get())));
    }
    if (state_->deterministic()) {
      state_->engine = detail::start_thread([c = state_.get()] { detail::cpu::engine_loop(*c); });
    }
  }
  CpuCluster(const CpuCluster&) = delete;
  CpuCluster& operator=(const CpuCluster&) = delete;
  CpuCluster(CpuCluster&&) = delete;
  CpuCluster& operator=(CpuCluster&&) = delete;
  ~CpuCluster() {
    if (state_->engine.joinable()) {
      {
        const std::lock_guard<std::mutex> engine(state_->engine_mutex);
        state_->shutdown = true;
      }
      state_->engine_wake.notify_all();
      state_->engine.join();
    }
  }

  static constexpr int max_ranks = 4096;
  static constexpr std::size_t max_queue_capacity = std::size_t{1} << 24;

  [[nodiscard]] int ranks() const noexcept { return state_->ranks; }
  [[nodiscard]] const CpuOptions& options() const noexcept { return state_->options; }
  // Deterministic mode: what every stream waited for when the engine last found that none
  // could move (empty if that never happened).
  [[nodiscard]] std::string stall_report() const {
    const std::lock_guard<std::mutex> engine(state_->engine_mutex);
    return state_->stall_report;
  }

  [[nodiscard]] CpuBackend& rank(int r) {
    if (r < 0 || r >= state_->ranks) {
      detail::fail({"CpuCluster", detail::concat("rank ", r, " does not exist"), detail::concat(state_->ranks, " ranks"),
            detail::concat("Use a rank in 0..", state_->ranks - 1)});
    }
    return *backends_[static_cast<std::size_t>(r)];
  }

 private:
  friend class CpuBackend;
  std::unique_ptr<detail::cpu::ClusterState> state_;
  std::vector<std::unique_ptr<CpuBackend>> backends_;
};

inline void CpuStream::close() noexcept {
  if (state_ == nullptr) return;
  detail::cpu::StreamState* s = std::exchange(state_, nullptr);
  CpuBackend* b = std::exchange(backend_, nullptr);
  try {
    (void)b->host_wait(
        detail::cpu::HostWaitKind::stream_done, s,
        [&] {
          const std::lock_guard<std::mutex> lock(s->rank->mutex);
          return s->issued;
        }(),
        false, HostWait{});
  } catch (...) {  // a close never throws; a stuck stream is discarded below
  }
  {
    const std::lock_guard<std::mutex> lock(s->rank->mutex);
    s->closing = true;
    s->closed = true;
    detail::cpu::wake_everyone(*s->rank);
  }
  if (s->worker.joinable()) s->worker.join();
}

}  // namespace ppsched
