// The bodies of <ppsched/backend/cpu/detail/progress.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE::detail::cpu {

PPSCHED_OUTLINE void worker_loop(ClusterState& c, StreamState& s) {
  RankState& r = *s.rank;
  std::unique_lock<std::mutex> lock(r.mutex);
  for (;;) {
    Peers peers;
    const Step step = advance(c, s, lock, Mover::worker, peers);
    if (step == Step::ran) {
      // Help only when this step satisfied another stream's event wait: helping costs the
      // stream's own next task a few microseconds, and only a record can unblock a wait.
      if (unblocks_a_wait(r, s)) help_rank(c, r, lock, &s, peers);
      if (peers.size > 0) {
        lock.unlock();
        help_peers(c, peers);
        lock.lock();
      }
      continue;
    }
    if (step == Step::empty) {
      if (s.closing) break;
      s.worker_waiting = true;
      s.wake.wait(lock);
      s.worker_waiting = false;
      continue;
    }
    const auto now = Clock::now();
    if (!s.blocked) {
      s.blocked = true;
      s.blocked_since = now;
    }
    const auto deadline = saturating_deadline(s.blocked_since, c.options.watchdog);
    if (now >= deadline || s.closing) {
      fail_rank_locked(r, std::make_exception_ptr(
                              detail::make_error({"CPU backend",
                                          s.closing ? detail::concat("stream destroyed while it waits for ", describe_head(s))
                                                    : detail::concat("waited longer than the watchdog (",
                                                             c.options.watchdog.count(), " ms) for ", describe_head(s)),
                                          stream_name(s),
                                          "Check that every transfer has a matching peer and every event is "
                                          "recorded, or raise CpuOptions::watchdog"})));
      continue;
    }
    s.worker_waiting = true;
    (void)wait_until_or_forever(s.wake, lock, deadline);
    s.worker_waiting = false;
  }
}

PPSCHED_OUTLINE void engine_loop(ClusterState& c) {
  std::unique_lock<std::mutex> engine(c.engine_mutex);
  for (;;) {
    if (c.shutdown) return;
    if (any_host_active(c)) {
      c.engine_wake.wait(engine);
      continue;
    }
    bool progressed = false;
    const std::size_t n = c.all_streams.size();
    for (std::size_t i = 0; i < n && !progressed; ++i) {
      const std::size_t index = (c.next_stream + i) % n;
      StreamState& s = *c.all_streams[index];
      std::unique_lock<std::mutex> lock(s.rank->mutex);
      Peers unused;
      if (advance(c, s, lock, Mover::engine, unused) == Step::ran) {
        progressed = true;
        c.next_stream = (index + 1) % n;
      }
    }
    if (progressed) {
      release_satisfied_hosts(c);
      continue;
    }
    // Nothing moves: a host waiting for a half-empty queue takes what room there is, since
    // the work it has yet to issue may be what the streams wait for.
    if (!release_satisfied_hosts(c)) (void)release_satisfied_hosts(c, false);
    if (any_host_active(c)) continue;
    if (any_host_waiting(c)) {
      end_stalled_waits(c);
      continue;
    }
    c.engine_wake.wait(engine);
  }
}

}  // namespace ppsched::PPSCHED_MODE::detail::cpu
