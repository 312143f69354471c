// How CPU streams make progress. One function, `advance`, moves a stream's head task one
// step: it runs a task, records an event, passes an event wait whose event has completed,
// posts a transfer group to the rendezvous channels, or completes a group whose transfers all
// matched. The threaded mode calls it from one worker thread per stream, sleeping when the
// head waits; the deterministic mode calls it from one engine thread that visits the streams
// of every rank in a fixed round-robin order and runs only while every host thread is
// waiting, so a run is one fixed interleaving. Failures are sticky per rank, as CUDA errors
// are: after one, a rank's queued work is discarded and its pending transfers withdrawn.
//
// In threaded mode a thread that finishes a task also *helps*: it moves the cheap control
// tasks (event records, satisfied event waits, posting and completing transfer groups) of
// the streams its work unblocked, on its own rank and on the peer whose transfer it matched,
// and wakes a stream's worker only when a stage's work is next. A transfer from F on one
// rank to F on the next thus costs one thread wakeup, not three; stream order is unchanged,
// since a stream's head is still moved by one thread at a time under its rank's lock.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <exception>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "ppsched/backend/cpu/detail/state.hpp"
#include "ppsched/config.hpp"
#include "ppsched/error.hpp"
#include "ppsched/runtime/backend.hpp"

namespace ppsched::inline PPSCHED_MODE::detail::cpu {

enum class Step : std::uint8_t {
  ran,           // the head moved
  blocked,       // the head waits (for an event, a transfer, or a thread running it)
  empty,         // nothing queued
  needs_worker,  // helper mode: the head is a stage's work, for the stream's own worker
};

enum class Mover : std::uint8_t { worker, helper, engine };

// Streams a helper should visit next: the owners of transfers it matched.
struct Peers {
  StreamState* list[8] = {};
  int size = 0;
  void add(StreamState* s) noexcept {
    for (int i = 0; i < size; ++i) {
      if (list[i] == s) return;
    }
    if (size < 8) list[size++] = s;
  }
};

// Under the stream's rank mutex.
inline void wake_worker(StreamState& s) {
  if (s.worker_waiting) s.wake.notify_one();
}

// Under the rank's mutex: every thread that waits on the rank re-checks its condition.
inline void wake_everyone(RankState& r) {
  for (auto& s : r.streams) s->wake.notify_all();
  r.host_wake.notify_all();
}

// Under the rank's mutex. The first failure wins; later ones are consequences.
inline void fail_rank_locked(RankState& r, std::exception_ptr e) {
  if (!r.failed) {
    r.failed = true;
    r.error = std::move(e);
  }
  wake_everyone(r);
}

inline void fail_rank(RankState& r, std::exception_ptr e) {
  const std::lock_guard<std::mutex> lock(r.mutex);
  fail_rank_locked(r, std::move(e));
}

inline void complete_front(StreamState& s) {
  const Task& t = s.tasks.front();
  if (t.kind == TaskKind::group) {
    s.op_head += t.op_count;
    s.op_size -= t.op_count;
  }
  s.tasks.pop();
  ++s.completed;
  s.blocked = false;
  if (s.completed >= s.host_target || s.host_wants_room) {
    s.host_target = std::numeric_limits<std::uint64_t>::max();
    s.host_wants_room = false;
    s.rank->host_wake.notify_all();
  }
}

[[nodiscard]] inline std::string describe_op(const P2POp& op) {
  std::string what = detail::concat(op.is_send ? "send" : "receive");
  if (!op.tag.label.empty()) what += detail::concat(" '", op.tag.label, "'");
  what += detail::concat(op.is_send ? " to rank " : " from rank ", op.peer, " (", op.count, " floats)");
  return what;
}

// What the head task of `s` waits for, for watchdog and deadlock messages. Under the lock.
[[nodiscard]] inline std::string describe_head(StreamState& s) {
  if (s.tasks.empty()) return "nothing (the stream is idle)";
  Task& t = s.tasks.front();
  switch (t.kind) {
    case TaskKind::wait:
      return detail::concat("an event wait: event #", t.event->id, " recorded at task ", t.target_seq, " of stream ",
                    t.target->local, ", which has completed ", t.target->completed, " tasks");
    case TaskKind::group: {
      std::string out = detail::concat("a transfer group of ", t.op_count, ":");
      for (std::size_t i = 0; i < t.op_count; ++i) {
        const P2POp& op = s.op(t.first_op + i);
        const OpState st = op.state.load(std::memory_order_acquire);
        out += detail::concat(i == 0 ? " " : "; ", describe_op(op),
                      st == OpState::done     ? " done"
                      : !t.posted             ? " not posted yet"
                      : st == OpState::failed ? " failed"
                                              : detail::concat(" waits for rank ", op.peer, " to post the matching ",
                                                       op.is_send ? "receive" : "send"));
      }
      return out;
    }
    default:
      return detail::concat("a ", task_kind_name(t.kind), t.host.label.empty() ? "" : detail::concat(" '", t.host.label, "'"));
  }
}

inline void wake_rank(RankState& r) {
  const std::lock_guard<std::mutex> lock(r.mutex);
  wake_everyone(r);
}

// Pairs a send with a receive under their channel's mutex: the transfer happens now. `b`
// is the operation that was waiting in the channel; its owner is returned to be helped.
inline StreamState* match(ClusterState& c, P2POp& a, P2POp& b) {
  P2POp& send = a.is_send ? a : b;
  P2POp& recv = a.is_send ? b : a;
  RankState& sender = *send.owner->rank;
  RankState& receiver = *recv.owner->rank;
  const bool size_mismatch = send.count != recv.count;
  const bool tag_mismatch =
      c.options.checking && send.tag.match != 0 && recv.tag.match != 0 && send.tag.match != recv.tag.match;
  if (size_mismatch || tag_mismatch) {
    const std::string problem =
        detail::concat(describe_op(send), " on rank ", sender.rank, " was paired with ", describe_op(recv), " on rank ",
               receiver.rank, size_mismatch ? ": the counts differ" : ": they belong to different transfers",
               ". NCCL pairs the sends and receives between two ranks in the order they are posted");
    const auto e = std::make_exception_ptr(detail::make_error(
        {"CPU backend", problem, detail::concat("ranks ", sender.rank, " -> ", receiver.rank),
         "Post the transfers between each pair of ranks in the same order on both sides, with equal counts"}));
    send.state.store(OpState::failed, std::memory_order_release);
    recv.state.store(OpState::failed, std::memory_order_release);
    fail_rank(sender, e);
    if (&receiver != &sender) fail_rank(receiver, e);
    return nullptr;
  }
  std::copy_n(send.data, send.count, recv.data);
  StreamState* waiting = b.owner;  // read before the state change lets its owner reuse the slot
  send.state.store(OpState::done, std::memory_order_release);
  recv.state.store(OpState::done, std::memory_order_release);
  if (c.deterministic()) return nullptr;
  {
    const std::lock_guard<std::mutex> lock(waiting->rank->mutex);
    wake_worker(*waiting);
  }
  return waiting;
}

// Called without any rank's mutex held. Returns the owner of the operation it matched.
inline StreamState* post_op(ClusterState& c, P2POp& op) {
  const int me = op.owner->rank->rank;
  Channel& ch = op.is_send ? c.channel(me, op.peer) : c.channel(op.peer, me);
  const std::lock_guard<std::mutex> lock(ch.mutex);
  std::vector<P2POp*>& mine = op.is_send ? ch.sends : ch.recvs;
  std::vector<P2POp*>& theirs = op.is_send ? ch.recvs : ch.sends;
  if (!theirs.empty()) {
    P2POp* other = theirs.front();
    theirs.erase(theirs.begin());
    other->in_channel = false;
    return match(c, op, *other);
  }
  mine.push_back(&op);
  op.in_channel = true;
  return nullptr;
}

inline void withdraw_op(ClusterState& c, P2POp& op) {
  const int me = op.owner->rank->rank;
  Channel& ch = op.is_send ? c.channel(me, op.peer) : c.channel(op.peer, me);
  const std::lock_guard<std::mutex> lock(ch.mutex);
  if (!op.in_channel) return;
  std::vector<P2POp*>& mine = op.is_send ? ch.sends : ch.recvs;
  mine.erase(std::remove(mine.begin(), mine.end(), &op), mine.end());
  op.in_channel = false;
  OpState expected = OpState::pending;
  op.state.compare_exchange_strong(expected, OpState::failed, std::memory_order_acq_rel);
}

// The first pending operation of a group whose own rank or peer aborted its communicator.
[[nodiscard]] inline const P2POp* aborted_op(ClusterState& c, StreamState& s, const Task& t) {
  const bool self_aborted = s.rank->aborted.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < t.op_count; ++i) {
    const P2POp& op = s.op(t.first_op + i);
    if (op.state.load(std::memory_order_acquire) != OpState::pending) continue;
    if (self_aborted || c.rank_states[static_cast<std::size_t>(op.peer)]->aborted.load(std::memory_order_acquire)) {
      return &op;
    }
  }
  return nullptr;
}

// Moves the head of `s` one step. Called with `lock` holding the stream's rank mutex; may
// release it while running a task or touching channels. A helper does not run a stage's
// work; owners of transfers matched while posting are added to `peers`.
inline Step advance(ClusterState& c, StreamState& s, std::unique_lock<std::mutex>& lock, Mover mover, Peers& peers) {
  RankState& r = *s.rank;
  if (s.tasks.empty() || s.running) return s.tasks.empty() ? Step::empty : Step::blocked;
  Task& t = s.tasks.front();
  if (r.failed || s.closed) {
    if (t.kind == TaskKind::group && t.posted) {
      s.running = true;
      lock.unlock();
      for (std::size_t i = 0; i < t.op_count; ++i) withdraw_op(c, s.op(t.first_op + i));
      lock.lock();
      s.running = false;
    }
    complete_front(s);
    return Step::ran;
  }
  switch (t.kind) {
    case TaskKind::record:
      if (t.event->stream == &s && t.event->seq == t.seq) {
        t.event->time = Clock::now();
        t.event->time_seq = t.seq;
      }
      complete_front(s);
      return Step::ran;
    case TaskKind::wait:
      if (t.target->completed < t.target_seq) return Step::blocked;
      complete_front(s);
      return Step::ran;
    case TaskKind::launch:
    case TaskKind::zero:
    case TaskKind::accumulate: {
      if (mover == Mover::helper) return Step::needs_worker;
      s.running = true;
      lock.unlock();
      std::exception_ptr failure;
      try {
        if (t.kind == TaskKind::launch) {
          t.host.run(t.host.context);
        } else if (t.kind == TaskKind::zero) {
          std::fill_n(t.to, t.count, 0.0f);
        } else {
          for (std::size_t i = 0; i < t.count; ++i) t.to[i] += t.from[i];
        }
      } catch (const ppsched::error&) {
        failure = std::current_exception();
      } catch (const std::exception& e) {
        failure =
            std::make_exception_ptr(error(detail::concat("rank ", r.rank, " stream ", s.local, ": ", task_kind_name(t.kind),
                                                 " '", t.host.label, "' threw: ", e.what())));
      } catch (...) {
        failure = std::make_exception_ptr(
            error(detail::concat("rank ", r.rank, " stream ", s.local, ": ", task_kind_name(t.kind), " '", t.host.label,
                         "' threw an exception that is not a std::exception")));
      }
      lock.lock();
      s.running = false;
      if (failure) fail_rank_locked(r, failure);
      complete_front(s);
      return Step::ran;
    }
    case TaskKind::group: {
      if (!t.posted) {
        t.posted = true;
        s.running = true;
        lock.unlock();
        for (std::size_t i = 0; i < t.op_count; ++i) {
          if (StreamState* other = post_op(c, s.op(t.first_op + i))) peers.add(other);
        }
        lock.lock();
        s.running = false;
        return Step::ran;
      }
      bool all_done = true;
      for (std::size_t i = 0; i < t.op_count; ++i) {
        if (s.op(t.first_op + i).state.load(std::memory_order_acquire) != OpState::done) all_done = false;
      }
      if (all_done) {
        complete_front(s);
        return Step::ran;
      }
      if (const P2POp* op = aborted_op(c, s, t)) {
        const bool self = r.aborted.load(std::memory_order_acquire);
        const RankState& who = self ? r : *c.rank_states[static_cast<std::size_t>(op->peer)];
        fail_rank_locked(
            r, std::make_exception_ptr(detail::make_error(
                   {"CPU backend",
                    detail::concat(describe_op(*op), " did not complete: rank ", who.rank, " aborted its communicator"),
                    detail::concat("rank ", r.rank, " stream ", s.local), "See the first error of the step for the cause"})));
        return Step::ran;
      }
      return Step::blocked;
    }
  }
  return Step::blocked;
}

// Helper: moves every stream of `r` (the lock held) as far as control tasks allow, and wakes
// a worker whose stream now waits for a stage's work.
inline void help_rank(ClusterState& c, RankState& r, std::unique_lock<std::mutex>& lock, const StreamState* skip,
                      Peers& peers) {
  for (bool moved = true; moved;) {
    moved = false;
    for (auto& o : r.streams) {
      if (o.get() == skip || o->closed) continue;
      for (;;) {
        const Step step = advance(c, *o, lock, Mover::helper, peers);
        if (step == Step::ran) {
          moved = true;
          continue;
        }
        if (step == Step::needs_worker) wake_worker(*o);
        break;
      }
    }
  }
}

// Under the lock: whether another stream of the rank waits, at its head, on work of `s`
// that has now completed.
[[nodiscard]] inline bool unblocks_a_wait(const RankState& r, const StreamState& s) {
  for (const auto& o : r.streams) {
    if (o.get() == &s || o->tasks.empty() || o->running) continue;
    const Task& head = o->tasks.front();
    if (head.kind == TaskKind::wait && head.target == &s && s.completed >= head.target_seq) return true;
  }
  return false;
}

// Helps the owners of matched transfers, on their ranks; one level deep, as their own
// workers were woken by the match anyway.
inline void help_peers(ClusterState& c, const Peers& peers) {
  for (int i = 0; i < peers.size; ++i) {
    RankState& r = *peers.list[i]->rank;
    std::unique_lock<std::mutex> lock(r.mutex);
    Peers further;
    help_rank(c, r, lock, nullptr, further);
  }
}

// The body of a stream's worker thread (threaded mode).
PPSCHED_OUTLINE void worker_loop(ClusterState& c, StreamState& s);

// Deterministic mode. Under the engine mutex.
[[nodiscard]] inline bool any_host_active(const ClusterState& c) {
  return std::any_of(c.rank_states.begin(), c.rank_states.end(),
                     [](const auto& r) { return r->host == HostState::active; });
}

// Whether a host waiting for room in `s`'s queue (for `ops` transfer slots) may issue again.
// With `drained`, only once the queue is at most half full: handing the host back for every
// freed slot made a step that issues more than the queue holds pay one host/engine handover
// per operation (20-90x slower); at half, each handover issues half a queue.
[[nodiscard]] inline bool queue_has_room(const StreamState& s, std::uint64_t ops, bool drained) noexcept {
  if (s.tasks.full() || s.op_size + ops > s.op_capacity) return false;
  if (!drained) return true;
  return s.tasks.size() <= s.tasks.capacity() / 2 && (s.op_size <= s.op_capacity / 2 || s.op_size == 0);
}

// Hands the engine back to every waiting host whose condition now holds. Without
// `drained`, a host waiting for room gets it as soon as one slot is free (nothing else can
// move: see engine_loop).
inline bool release_satisfied_hosts(ClusterState& c, bool drained = true) {
  bool released = false;
  for (auto& rp : c.rank_states) {
    RankState& r = *rp;
    if (r.host != HostState::waiting) continue;
    const std::lock_guard<std::mutex> lock(r.mutex);
    const bool satisfied = r.wait_kind == HostWaitKind::queue_room
                               ? (r.failed || queue_has_room(*r.wait_stream, r.wait_seq, drained))
                               : r.wait_stream->completed >= r.wait_seq;
    if (satisfied) {
      r.host = HostState::active;
      released = true;
    }
  }
  if (released) c.engine_wake.notify_all();
  return released;
}

// No stream can move and every host waits: nothing will change before the hosts' deadlines,
// so their waits end now, as timed out (the deadline fast-forwarded). The executor's watchdog
// then reports the stuck actions; the streams' view is kept in `stall_report`.
inline void end_stalled_waits(ClusterState& c) {
  std::string stuck;
  for (StreamState* s : c.all_streams) {
    const std::lock_guard<std::mutex> lock(s->rank->mutex);
    if (s->tasks.empty()) continue;
    stuck += detail::concat(stuck.empty() ? "" : "; ", stream_name(*s), " waits for ", describe_head(*s));
  }
  c.stall_report = detail::concat("no stream of any rank can make progress (a deadlock): ", stuck);
  for (auto& r : c.rank_states) {
    if (r->host != HostState::waiting) continue;
    r->host = HostState::active;
    r->stalled = true;
  }
  c.engine_wake.notify_all();
}

[[nodiscard]] inline bool any_host_waiting(const ClusterState& c) {
  return std::any_of(c.rank_states.begin(), c.rank_states.end(),
                     [](const auto& r) { return r->host == HostState::waiting; });
}

// The deterministic engine: while no host is active, run one step of the next stream (in
// creation order, round robin) that can move; when none can and every host waits, end the
// waits.
PPSCHED_OUTLINE void engine_loop(ClusterState& c);

}  // namespace ppsched::detail::cpu

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/backend/cpu/impl/progress.ipp"
#endif
