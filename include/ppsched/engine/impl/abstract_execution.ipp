// The bodies of <ppsched/engine/abstract_execution.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace detail {

PPSCHED_OUTLINE AbstractExecution::AbstractExecution(const FlatSchedule& flat, StreamMode mode, Buffers* buffers)
    : AbstractExecution(flat, mode, nullptr, 0.0, buffers, Unbuilt{}) {
  build_items(nullptr, DurationTable{});
}

PPSCHED_OUTLINE AbstractExecution::AbstractExecution(const FlatSchedule& flat, StreamMode mode,
                                                     std::span<const double> durations,
                                                     const std::vector<double>* input_delay, double fb_overlap,
                                                     Buffers* buffers)
    : AbstractExecution(flat, mode, input_delay, fb_overlap, buffers, Unbuilt{}) {
  build_items(durations.data(), DurationTable{});
}

PPSCHED_OUTLINE AbstractExecution::AbstractExecution(const FlatSchedule& flat, StreamMode mode, DurationTable durations,
                                                     const std::vector<double>* input_delay, double fb_overlap,
                                                     Buffers* buffers)
    : AbstractExecution(flat, mode, input_delay, fb_overlap, buffers, Unbuilt{}) {
  build_items(nullptr, durations);
}

PPSCHED_OUTLINE void AbstractExecution::build_items(const double* per_action, DurationTable keyed) {
  const bool pairs = flat_.has_pairs;
  if (keyed.table != nullptr) {
    pairs ? build_items_of<true, Durations::keyed>(nullptr, keyed) : build_items_of<false, Durations::keyed>(nullptr, keyed);
  } else if (per_action != nullptr) {
    pairs ? build_items_of<true, Durations::per_action>(per_action, keyed)
          : build_items_of<false, Durations::per_action>(per_action, keyed);
  } else {
    pairs ? build_items_of<true, Durations::unit>(nullptr, keyed) : build_items_of<false, Durations::unit>(nullptr, keyed);
  }
}

// Pairs: the schedule has overlapped pairs. Six instances, whatever prices the actions, keep each
// build lean: with run-time flags instead, the build did 11% more work per action and validate()
// took 4% longer (1F1B at p = 64, m = 1024), and unit times read from a table rather than known
// here cost validate() 2%.
template <bool Pairs, AbstractExecution::Durations Mode>
void AbstractExecution::build_items_of(const double* per_action, DurationTable keyed) {
  const std::size_t L = lanes_;
  const std::size_t streams = L * static_cast<std::size_t>(flat_.ranks);
  const bool separate = mode_ == StreamMode::separate_comm_stream;
  const auto duration = [&](std::int32_t i, const Action& a) {  // [&]: a mode reads one of the two
    if constexpr (Mode == Durations::unit) {
      return is_compute(a.op) || a.op == Op::R ? 1.0 : 0.0;
    } else if constexpr (Mode == Durations::keyed) {
      return keyed.table[static_cast<std::size_t>(a.stage) * keyed.stage_stride + static_cast<std::size_t>(a.op)];
    } else {
      return per_action[i];
    }
  };
  std::vector<std::int32_t> counts(streams + 1, 0);
  // Rank r's items go to stream L r, L r + 1 for communication on its own stream, L r + 2 for
  // copies on their own stream.
  for (std::int32_t r = 0; r < flat_.ranks; ++r) {
    const std::int32_t b = flat_.rank_begin[static_cast<std::size_t>(r)];
    const std::int32_t e = flat_.rank_begin[static_cast<std::size_t>(r) + 1];
    // The same item boundaries as the fill below: a pair's second action and a group's
    // further communication join the open item.
    std::uint32_t open_group = 0;
    [[maybe_unused]] std::uint32_t open_pair = 0;
    const Action* prog = flat_.rank_actions[static_cast<std::size_t>(r)];
    for (std::int32_t i = b; i < e; ++i) {
      const Action& a = prog[i - b];
      const bool comm = is_comm(a.op);
      if constexpr (Pairs) {
        if (!comm && a.group != 0 && a.group == open_pair) {
          open_pair = 0;
          continue;
        }
        open_pair = comm ? 0 : a.group;
      }
      if (!comm || a.group == 0 || a.group != open_group) {
        const std::size_t lane = comm && separate ? 1 : (L == 3 && is_copy(a.op) ? 2 : 0);
        ++counts[L * static_cast<std::size_t>(r) + lane + 1];
      }
      open_group = comm ? a.group : 0;
    }
  }
  for (std::size_t st = 0; st < streams; ++st) counts[st + 1] += counts[st];
  stream_begin_ = counts;
  // Every entry is written once below: no need to clear the memory first.
  item_total_ = static_cast<std::size_t>(counts[streams]);
  items_.resize(item_total_);
  ops_.resize(flat_.size() - flat_.compute_count);
  pair_deps_.clear();
  std::size_t next_op = 0;
  const bool lowered = flat_.lowered;
  for (std::int32_t r = 0; r < flat_.ranks; ++r) {
    const std::int32_t b = flat_.rank_begin[static_cast<std::size_t>(r)];
    const std::int32_t e = flat_.rank_begin[static_cast<std::size_t>(r) + 1];
    // Where this rank's next compute item and next group go (one stream when they share it).
    std::int32_t fills[3] = {counts[L * static_cast<std::size_t>(r)], counts[L * static_cast<std::size_t>(r) + 1],
                             L == 3 ? counts[L * static_cast<std::size_t>(r) + 2] : 0};
    std::int32_t& compute_fill = fills[0];
    std::int32_t& comm_fill = fills[separate ? 1 : 0];
    std::int32_t& copy_fill = fills[L == 3 ? 2 : 0];
    // In a lowered schedule a compute's waiter is always its rank's comm stream (its send).
    const std::int32_t lowered_waiter = separate ? static_cast<std::int32_t>(L) * r + 1 : -1;
    Item* open = nullptr;  // the group being extended
    std::uint32_t open_group = 0;
    [[maybe_unused]] std::uint32_t open_pair = 0;
    std::int32_t last_compute = no_action;  // the latest compute-stream action issued
    const Action* prog = flat_.rank_actions[static_cast<std::size_t>(r)];
    for (std::int32_t i = b; i < e; ++i) {
      const Action& a = prog[i - b];
      const Links l = flat_.links(a);
      if (is_memory(a.op)) {  // never grouped (the static checks): an item of its own
        const bool copy_lane = L == 3 && is_copy(a.op);
        const std::int32_t issued_after = copy_lane && last_compute != l.same_stage ? last_compute : no_action;
        items_[static_cast<std::size_t>(copy_lane ? copy_fill++ : compute_fill++)] =
            Item{i, 0, l.same_stage, issued_after, copy_lane || !lowered ? -1 : lowered_waiter, duration(i, a)};
        if (!copy_lane) last_compute = i;
        if constexpr (Pairs) open_pair = 0;
        open_group = 0;
        continue;
      }
      if (is_compute(a.op)) last_compute = i;
      if (is_compute(a.op)) {
        if constexpr (Pairs) {
          if (a.group != 0 && a.group == open_pair) {  // the second action of a pair
            Item& pair = items_[static_cast<std::size_t>(compute_fill - 1)];
            const double first = pair.duration, second = duration(i, a);
            pair.count = pair_item;
            pair.duration = first + second - fb_overlap_ * std::min(first, second);
            const auto deps = static_cast<std::int32_t>(pair_deps_.size());
            pair_deps_.insert(pair_deps_.end(), {pair.dep_a, pair.dep_b, l.same_stage, l.input});
            pair.dep_a = deps;
            open_pair = 0;
            continue;
          }
          open_pair = a.group;
        }
        items_[static_cast<std::size_t>(compute_fill++)] =
            Item{i, 0, l.same_stage, l.input, lowered ? lowered_waiter : dependency_waiter(r, a), duration(i, a)};
        open_group = 0;
        continue;
      }
      if constexpr (Pairs) open_pair = 0;
      if (a.group == 0 || a.group != open_group) {
        open = &items_[static_cast<std::size_t>(comm_fill++)];
        *open = Item{i, 0, static_cast<std::int32_t>(next_op), no_action, -1, 0.0};
      }
      open_group = a.group;
      ++open->count;
      const std::int32_t peer_stage = (a.op == Op::SEND_F || a.op == Op::RECV_B) ? a.stage + 1 : a.stage - 1;
      const auto peer_stream =
          static_cast<std::int32_t>(L * static_cast<std::size_t>(flat_.rank_of(peer_stage)) + (separate ? 1 : 0));
      ops_[next_op++] = CommOp{i, l.peer, is_send(a.op) ? l.same_stage : no_action, peer_stream, duration(i, a)};
    }
  }
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
  if (rank != from_rank) s += detail::concat(" on rank ", rank);
  const std::int32_t it = item_of_[xi];
  const std::int32_t head = streams_[st].head;
  const char* stream_name = mode_ == StreamMode::comm_on_compute_stream ? "stream"
                            : (st % lanes_ == 1)                         ? "comm stream"
                            : (st % lanes_ == 2)                         ? "copy stream"
                                                                         : "compute stream";
  if (it > head) {
    s += detail::concat(", which is behind ", item_text(head), " on rank ", rank, "'s ", stream_name);
  } else if (it == head) {
    if (!is_comm(flat_.at(x).op)) {
      s += detail::concat(", which is itself waiting (see rank ", rank, ")");
    } else if (!streams_[st].posted) {
      s += detail::concat(", whose group is not posted yet (see rank ", rank, ")");
    } else {
      s += detail::concat(", which is posted and waits for its own peer (see rank ", rank, ")");
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
