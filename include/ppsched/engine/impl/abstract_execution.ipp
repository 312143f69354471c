// The bodies of <ppsched/engine/abstract_execution.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

#include "ppsched/engine/abstract_execution.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace detail {

PPSCHED_OUTLINE AbstractExecution::AbstractExecution(const FlatSchedule& flat, StreamMode mode, Buffers* buffers)
    : flat_(flat), mode_(mode), lanes_(lanes_for(flat, mode)), input_delay_(nullptr), buffers_(buffers != nullptr ? *buffers : own_), stream_begin_(buffers_.stream_begin), items_(buffers_.items),
        ops_(buffers_.ops), pair_deps_(buffers_.pair_deps), starts_(buffers_.starts), ends_(buffers_.ends),
        streams_(buffers_.streams), worklist_(buffers_.worklist) {
  build_items([](const Action& a) { return is_compute(a.op) || a.op == Op::R ? 1.0 : 0.0; });
}

PPSCHED_OUTLINE bool AbstractExecution::run() {
  const std::size_t n = flat_.size();
  starts_.assign(n, -1.0);
  ends_.assign(n, -1.0);
  const std::size_t streams = stream_begin_.size() - 1;
  streams_.assign(streams, StreamState{});
  for (std::size_t st = 0; st < streams; ++st) streams_[st].head = stream_begin_[st];
  worklist_.clear();
  for (std::size_t st = streams; st-- > 0;) worklist_.push_back(static_cast<std::int32_t>(st));
  while (!worklist_.empty()) {
    const std::int32_t st = worklist_.back();
    worklist_.pop_back();
    streams_[static_cast<std::size_t>(st)].queued = 0;
    advance(static_cast<std::size_t>(st));
  }
  for (std::size_t st = 0; st < streams; ++st) {
    if (streams_[st].head != stream_begin_[st + 1]) return false;
  }
  return true;
}

[[nodiscard]] PPSCHED_OUTLINE std::string AbstractExecution::describe_stuck() const {
  item_of_.assign(flat_.size(), 0);
  for (std::size_t it = 0; it < item_total_; ++it) {
    const Item& item = items_[it];
    for (std::int32_t i = item.first; i < item.first + item_size(item); ++i) {
      item_of_[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(it);
    }
  }
  std::ostringstream out;
  std::size_t remaining = 0;
  const std::size_t streams = stream_begin_.size() - 1;
  for (std::size_t st = 0; st < streams; ++st) {
    for (std::int32_t it = streams_[st].head; it < stream_begin_[st + 1]; ++it) {
      remaining += static_cast<std::size_t>(item_size(items_[static_cast<std::size_t>(it)]));
    }
  }
  out << "no action can start while " << remaining << " remain";
  for (std::size_t st = 0; st < streams; ++st) {
    const std::int32_t it = streams_[st].head;
    if (it == stream_begin_[st + 1]) continue;
    const auto rank = static_cast<std::int32_t>(st / lanes_);
    const Item& item = items_[static_cast<std::size_t>(it)];
    if (item.count == 0) {
      const Links l = flat_.links(item.first);
      const bool first_blocks = l.same_stage != no_action && ends_[static_cast<std::size_t>(l.same_stage)] < 0.0;
      out << "\n  rank " << rank << ": " << to_string(flat_.at(item.first)) << " waits for "
          << where(first_blocks ? l.same_stage : l.input, rank);
      continue;
    }
    if (item.count == pair_item) {
      out << "\n  rank " << rank << ": the overlapped pair " << item_text(it) << " waits for "
          << where(unmet_input(item), rank);
      continue;
    }
    for (std::int32_t i = item.first; i < item.first + item.count; ++i) {
      const Links l = flat_.links(i);
      if (!streams_[st].posted) {
        if (!is_send(flat_.at(i).op) || ends_[static_cast<std::size_t>(l.same_stage)] >= 0.0) continue;
        out << "\n  rank " << rank << ": " << to_string(flat_.at(i)) << " (not posted) waits for "
            << where(l.same_stage, rank);
      } else if (ends_[static_cast<std::size_t>(i)] < 0.0) {
        out << "\n  rank " << rank << ": " << to_string(flat_.at(i)) << " (posted) waits for " << where(l.peer, rank);
      }
    }
  }
  return out.str();
}

PPSCHED_OUTLINE void AbstractExecution::advance(std::size_t st) {
  StreamState& state = streams_[st];
  std::int32_t head = state.head;
  const std::int32_t stop = stream_begin_[st + 1];
  double free = state.free;
  while (head != stop) {
    const Item& item = items_[static_cast<std::size_t>(head)];
#if defined(__GNUC__)
    // 128 streams advance in turn, too many for the hardware to see each as a sequence:
    // ask for this stream's next item and times ahead of the visit that needs them.
    if (head + 2 < stop) {
      const Item& next = items_[static_cast<std::size_t>(head) + 1];
      __builtin_prefetch(&items_[static_cast<std::size_t>(head) + 2]);
      prefetch(starts_, next.first);
      prefetch(ends_, next.first);
      if (next.count > 0) {  // a communication group
        prefetch(ops_, next.dep_a);
      } else if (next.count == pair_item) {
        prefetch(pair_deps_, next.dep_a);
      } else {
        // A compute item's inputs were mostly done long ago (a B's own F): their ends have
        // left the cache, and waiting for them is the largest cost of a run.
        prefetch(ends_, next.dep_a);
        prefetch(ends_, next.dep_b);
      }
    }
#endif
    if (item.count == 0) {
      double t = free;
      if (item.dep_a != no_action) {
        const double e = ends_[static_cast<std::size_t>(item.dep_a)];
        if (e < 0.0) {
          state.blocked_on = item.dep_a;
          break;
        }
        t = std::max(t, e);
      }
      if (item.dep_b != no_action) {
        const double e = ends_[static_cast<std::size_t>(item.dep_b)];
        if (e < 0.0) {
          state.blocked_on = item.dep_b;
          break;
        }
        t = std::max(t, e + (input_delay_ != nullptr ? (*input_delay_)[static_cast<std::size_t>(item.first)] : 0.0));
      }
      const auto fi = static_cast<std::size_t>(item.first);
      starts_[fi] = t;
      free = t + item.duration;
      ends_[fi] = free;
      ++head;
      if (item.wake >= 0) wake_for(static_cast<std::size_t>(item.wake), item.first);
      wake_copy_partner(st, item.first);
      continue;
    }
    if (item.count == pair_item) {
      if (!run_pair(st, item, free)) break;
      ++head;
      continue;
    }
    const CommOp* const ops = ops_.data() + item.dep_a;
    const std::int32_t count = item.count;
    if (!state.posted) {
      double t = free;
      std::int32_t missing = no_action;
      for (std::int32_t k = 0; k < count && missing == no_action; ++k) {
        if (ops[k].producer == no_action) continue;
        const double e = ends_[static_cast<std::size_t>(ops[k].producer)];
        if (e < 0.0) missing = ops[k].producer;
        t = std::max(t, e);
      }
      if (missing != no_action) {
        state.blocked_on = missing;
        break;
      }
      state.posted = 1;
      for (std::int32_t k = 0; k < count; ++k) {
        const auto ii = static_cast<std::size_t>(ops[k].action);
        starts_[ii] = t;
        const auto q = static_cast<std::size_t>(ops[k].peer);
        if (starts_[q] < 0.0) continue;  // the peer posts later and completes the transfer
        const double e = std::max(t, starts_[q]) + ops[k].duration;
        ends_[ii] = e;
        ends_[q] = e;
        wake(static_cast<std::size_t>(ops[k].peer_stream));
      }
    }
    double done = free;
    bool complete = true;
    for (std::int32_t k = 0; k < count && complete; ++k) {
      const double e = ends_[static_cast<std::size_t>(ops[k].action)];
      complete = e >= 0.0;
      done = std::max(done, e);
    }
    if (!complete) {
      state.blocked_on = waiting_for_peers;  // the peer that completes a transfer wakes it
      break;
    }
    state.posted = 0;
    free = done;
    ++head;
    if (mode_ == StreamMode::separate_comm_stream) {  // receives feed the compute stream
      for (std::int32_t k = 0; k < count; ++k) wake_for(st - 1, ops[k].action);
    }
  }
  state.head = head;
  state.free = free;
}

[[nodiscard]] PPSCHED_OUTLINE std::string AbstractExecution::where(std::int32_t x, std::int32_t from_rank) const {
  const auto xi = static_cast<std::size_t>(x);
  const std::int32_t rank = flat_.owner[xi];
  const std::size_t st = stream_of(x);
  std::string s = to_string(flat_.at(x));
  if (rank != from_rank) s += concat(" on rank ", rank);
  const std::int32_t it = item_of_[xi];
  const std::int32_t head = streams_[st].head;
  const char* stream_name = mode_ == StreamMode::comm_on_compute_stream ? "stream"
                            : (st % lanes_ == 1)                         ? "comm stream"
                            : (st % lanes_ == 2)                         ? "copy stream"
                                                                         : "compute stream";
  if (it > head) {
    s += concat(", which is behind ", item_text(head), " on rank ", rank, "'s ", stream_name);
  } else if (it == head) {
    if (!is_comm(flat_.at(x).op)) {
      s += concat(", which is itself waiting (see rank ", rank, ")");
    } else if (!streams_[st].posted) {
      s += concat(", whose group is not posted yet (see rank ", rank, ")");
    } else {
      s += concat(", which is posted and waits for its own peer (see rank ", rank, ")");
    }
  }
  return s;
}

[[nodiscard]] PPSCHED_OUTLINE std::string AbstractExecution::item_text(std::int32_t index) const {
  const Item& item = items_[static_cast<std::size_t>(index)];
  if (item_size(item) == 1) return to_string(flat_.at(item.first));
  std::string s = "{";
  for (std::int32_t i = item.first; i < item.first + item_size(item); ++i) {
    if (i != item.first) s += ", ";
    s += to_string(flat_.at(i));
  }
  return s + "}";
}

}  // namespace detail
}  // namespace ppsched
