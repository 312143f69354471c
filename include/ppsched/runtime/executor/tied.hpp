// Part of <ppsched/runtime/executor.hpp> (include that): tied weights: the gradients of parameters
// shared between stages summed across the owning ranks after the flush.
#pragma once

#include "ppsched/config.hpp"

#include "ppsched/runtime/executor/core.hpp"

namespace ppsched::inline PPSCHED_MODE {

template <class B>
auto Executor<B>::allocate_tied() -> void {
  for (std::size_t index = 0; index < options_.tied_weights.size(); ++index) {
    const TiedWeights& t = options_.tied_weights[index];
    TiedGroup g;
    g.index = index;
    std::vector<std::size_t> order(t.stages.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return t.stages[a] < t.stages[b]; });
    for (std::size_t i : order) {
      g.stages.push_back(t.stages[i]);
      g.offsets.push_back(t.offsets[i]);
    }
    g.root = schedule_.rank_of(g.stages.front());
    g.count = t.count;
    g.local = true;
    bool takes_part = false;
    for (std::int32_t s : g.stages) {
      g.local = g.local && holds(s);
      takes_part = takes_part || holds(s);
    }
    if (!takes_part) continue;
    const bool root = g.root == rank_;
    for (std::int32_t s : g.stages) {
      const bool held = root || holds(s);
      g.slices.push_back(held ? take(t.count) : Buffer{});
      g.held.push_back(held ? 1 : 0);
      g.labels.push_back(label(detail::concat("tied gradient of stage ", s)));
    }
    if (root) g.sum = take(t.count);
    tied_.push_back(std::move(g));
  }
  // The copies point into tied_, whose elements no longer move.
  for (TiedGroup& g : tied_) {
    const std::size_t count = g.count;
    const bool root = g.root == rank_;
    for (std::size_t i = 0; i < g.stages.size(); ++i) {
      const std::int32_t s = g.stages[i];
      if (!holds(s)) continue;
      Buffer& total = grads_[static_cast<std::size_t>(grads_of_stage_[static_cast<std::size_t>(s)])].total;
      g.gather.push_back({this, &g.slices[i], 0, &total, g.offsets[i], count});
      g.scatter.push_back({this, &total, g.offsets[i], root ? &g.sum : &g.slices[i], 0, count});
    }
  }
}

template <class B>
auto Executor<B>::copy_slice(SliceCopy& c) -> void {
  if constexpr (requires(B & b, typename B::stream& s, Buffer& to, const Buffer& from, std::size_t n) {
                  b.copy(s, to, n, from, n, n);
                }) {
    b_.copy(compute_, *c.to, c.to_offset, *c.from, c.from_offset, c.count);
  } else {
    const BufferUse<Buffer> uses[] = {{c.to, Access::write}, {c.from, Access::read}};
    b_.launch(compute_, HostTask{&Executor::run_slice_copy, &c, "tied weights"}, uses);
  }
}

template <class B>
auto Executor<B>::run_slice_copy(void* context) -> void {
  auto* c = static_cast<SliceCopy*>(context);
  const std::span<const float> from = c->self->b_.span(*c->from).subspan(c->from_offset, c->count);
  std::copy(from.begin(), from.end(), c->self->b_.span(*c->to).begin() + static_cast<std::ptrdiff_t>(c->to_offset));
}

// The match of a tied transfer: above every schedule transfer's (transfer_match).
template <class B>
auto Executor<B>::tied_match(std::size_t group, std::size_t stage_index, bool to_root) const noexcept -> std::uint64_t {
  return (std::uint64_t{1} << 63) | (static_cast<std::uint64_t>(group) << 32) |
         (static_cast<std::uint64_t>(stage_index) << 1) | static_cast<std::uint64_t>(to_root);
}

// After the totals are complete, before any optimizer_step: each group's slices to its
// root, summed there in stage order, the sum back to every copy. Every rank walks the
// groups, and each group's stages, in the same order, so the transfers pair up.
template <class B>
auto Executor<B>::reduce_tied() -> void {
  if (tied_.empty()) return;
  for (TiedGroup& g : tied_) {
    for (SliceCopy& c : g.gather) copy_slice(c);
  }
  bool remote = false;
  for (const TiedGroup& g : tied_) remote = remote || !g.local;
  auto to_comm = [&](typename B::event& e) {
    b_.record(e, compute_);
    b_.wait(comm_, e);
  };
  auto to_compute = [&](typename B::event& e) {
    b_.record(e, comm_);
    b_.wait(compute_, e);
  };
  auto transfers = [&](bool to_root) {
    for (TiedGroup& g : tied_) {
      if (g.local) continue;
      const std::size_t count = g.count;
      for (std::size_t i = 0; i < g.stages.size(); ++i) {
        const std::int32_t owner = schedule_.rank_of(g.stages[i]);
        if (owner == g.root) continue;
        const PeerTag tag{tied_match(g.index, i, to_root), g.labels[i]};
        if (g.root == rank_ && to_root) b_.recv(g.slices[i], count, owner, comm_, tag);
        if (g.root == rank_ && !to_root) b_.send(g.sum, count, owner, comm_, tag);
        if (owner == rank_ && to_root) b_.send(g.slices[i], count, g.root, comm_, tag);
        if (owner == rank_ && !to_root) b_.recv(g.slices[i], count, g.root, comm_, tag);
      }
    }
  };
  if (remote) {
    to_comm(tied_events_[0]);
    transfers(true);
    to_compute(tied_events_[1]);
  }
  for (TiedGroup& g : tied_) {
    if (g.root != rank_) continue;
    b_.zero(compute_, g.sum);
    for (Buffer& slice : g.slices) b_.accumulate(compute_, g.sum, slice);
  }
  if (remote) {
    to_comm(tied_events_[2]);
    transfers(false);
    to_compute(tied_events_[3]);
  }
  for (TiedGroup& g : tied_) {
    for (SliceCopy& c : g.scatter) copy_slice(c);
  }
}

}  // namespace ppsched
