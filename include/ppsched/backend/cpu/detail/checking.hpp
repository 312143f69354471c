// The CPU backend's race checker. On CUDA, order between two streams exists only through
// events; an access to a buffer from one stream that no event orders after another stream's
// access to the same buffer is a race the hardware will not report. The checker finds these
// when the work is *issued*, not when it happens to run, so it reports the race on every run
// whatever the interleaving: each stream carries a vector clock of the work issued on every
// stream of its rank that is ordered before its next task (advanced by its own tasks, joined
// by event waits and by what the host has synchronised), and each buffer keeps its last write
// and its reads since. An access that is not ordered after a conflicting earlier one is an
// error naming both, in the words of the three CUDA races it catches: writing a buffer a
// pending send may still read, receiving into a buffer still in use, and any other write/read
// overlap between unordered streams.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "ppsched/backend/cpu/detail/state.hpp"
#include "ppsched/error.hpp"

namespace ppsched::inline PPSCHED_MODE::detail::cpu {

using VectorClock = std::vector<std::uint64_t>;

inline void join(VectorClock& into, const VectorClock& from) {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (std::size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
}

[[nodiscard]] inline bool ordered_before(const AccessRecord& earlier, const VectorClock& clock) noexcept {
  if (earlier.stream < 0) return true;
  const auto i = static_cast<std::size_t>(earlier.stream);
  return i < clock.size() && earlier.seq <= clock[i];
}

// The stream's next task gets position `seq`; its clock now covers it.
inline void advance_clock(StreamState& s, std::uint64_t seq) {
  const auto i = static_cast<std::size_t>(s.local);
  if (s.clock.size() <= i) s.clock.resize(i + 1, 0);
  s.clock[i] = seq;
}

// The host has seen `observed` complete: everything it issues from now on, on any stream of
// the rank, is ordered after it.
inline void host_observed(RankState& r, const VectorClock& observed) {
  join(r.host_clock, observed);
  for (auto& s : r.streams) join(s->clock, r.host_clock);
}

[[nodiscard]] inline std::string describe_access(const AccessRecord& a) {
  std::string what;
  if (a.kind == TaskKind::group) {
    what = a.is_send ? "send" : "receive";
  } else {
    what = std::string(task_kind_name(a.kind));
  }
  if (!a.label.empty()) what += detail::concat(" '", a.label, "'");
  return detail::concat(what, " on stream ", a.stream);
}

[[nodiscard]] inline bool is_receive(const AccessRecord& a) noexcept { return a.kind == TaskKind::group && !a.is_send; }
[[nodiscard]] inline bool is_send_access(const AccessRecord& a) noexcept {
  return a.kind == TaskKind::group && a.is_send;
}

[[noreturn]] inline void report_race(const BufferState& b, const AccessRecord& current, const AccessRecord& earlier,
                                     bool current_writes, bool earlier_writes) {
  const std::string buffer = detail::concat("buffer #", b.id, " (", b.size, " floats)");
  const std::string where = detail::concat("rank ", b.rank->rank, ", ", buffer);
  const std::string fix = detail::concat("Record an event on stream ", earlier.stream, " after the ", describe_access(earlier),
                                 " and make stream ", current.stream, " wait on it before this operation");
  if (is_receive(current)) {
    detail::fail({"CPU backend (checking)",
          detail::concat("receive into a buffer still in use: ", describe_access(current), " may overwrite ", buffer, " while ",
                 describe_access(earlier), " still ", earlier_writes ? "writes" : "reads", " it; no event orders them"),
          where, fix});
  }
  if (current_writes && is_send_access(earlier)) {
    detail::fail({"CPU backend (checking)",
          detail::concat("reusing a buffer a pending send still reads: ", describe_access(current), " writes ", buffer,
                 " while ", describe_access(earlier), " may not have completed; no event orders them"),
          where, fix});
  }
  detail::fail({"CPU backend (checking)",
        detail::concat("data race on ", buffer, ": ", describe_access(current), (current_writes ? " writes" : " reads"),
               " it while ", describe_access(earlier), (earlier_writes ? " writes" : " reads"),
               " it, and no event orders them"),
        where, fix});
}

// Checks one access issued on a stream whose clock is `clock`; records it when it is ordered.
inline void check_access(BufferState& b, const AccessRecord& current, bool does_read, bool does_write,
                         const VectorClock& clock) {
  if ((does_read || does_write) && !ordered_before(b.last_write, clock) && b.last_write.stream != current.stream) {
    report_race(b, current, b.last_write, does_write, true);
  }
  if (does_write) {
    for (const AccessRecord& r : b.reads) {
      if (r.stream != current.stream && !ordered_before(r, clock)) report_race(b, current, r, true, false);
    }
  }
}

inline void record_access(BufferState& b, const AccessRecord& current, bool does_write) {
  if (does_write) {
    b.last_write = current;
    b.reads.clear();  // keeps its capacity: no allocation in steady state
    return;
  }
  for (AccessRecord& r : b.reads) {
    if (r.stream == current.stream) {
      r = current;
      return;
    }
  }
  b.reads.push_back(current);
}

}  // namespace ppsched::detail::cpu
