// Point-to-point transfers between ranks of one process without NCCL: the transport used when
// several pipeline ranks share a GPU (NCCL does not allow two ranks of a communicator on one
// device), so that a one-GPU machine can run a whole pipeline. A transfer is one
// device-to-device copy (`cudaMemcpyAsync`, or `cudaMemcpyPeerAsync` across devices) enqueued
// on the receiver's stream, ordered by events on both sides:
//
//   sender:   record `ready` on its stream (the data is produced), offer it        (phase 1)
//   receiver: take the offer, stream waits `ready`, copy, record `done`           (phase 2)
//   sender:   its stream waits `done` (the source may be reused after it)          (phase 3)
//
// Matching happens on the host, when both ranks post their group: the host thread blocks in
// `post_group` until its partners have posted theirs. This is the rendezvous rule of
// docs/execution-model.md applied at issue time; every group first offers all its sends
// without blocking, so two ranks that exchange in both directions inside one group (the 1F1B
// steady state) meet. Every stream wait is on an event already recorded, so the GPU never
// waits on the host and a failed step cannot leave a kernel hanging.
//
// Failure: `abort(epoch, reason)` (any thread) ends the epoch and wakes every waiter, which
// then throws. Offers made in an older epoch are dropped unread; after a failed step every
// rank rejoins with `enter(its epoch + 1)`, so all land in the same new epoch.
//
// Host-only: usable from .cpp files compiled by a plain C++ compiler that link cudart.
#pragma once

#include "ppsched/config.hpp"

#include <cuda_runtime_api.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "ppsched/backend/cuda/check.hpp"
#include "ppsched/backend/cuda/device.hpp"
#include "ppsched/backend/cuda/stream.hpp"
#include "ppsched/error.hpp"
#include "ppsched/runtime/backend.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace cuda {

class LocalExchange {
 public:
  struct Send {
    int peer = 0;
    const void* data = nullptr;
    std::size_t bytes = 0;
    int device = 0;  // where `data` lives and `stream` runs
    CudaStreamRef stream;
    PeerTag tag{};
  };
  struct Recv {
    int peer = 0;
    void* data = nullptr;
    std::size_t bytes = 0;
    int device = 0;
    CudaStreamRef stream;
    PeerTag tag{};
  };

  explicit LocalExchange(int ranks) : ranks_(ranks) {
    if (ranks <= 0) {
      detail::fail({"LocalExchange", detail::concat(ranks, " ranks"), "", "Create the exchange for at least one rank"});
    }
    const auto pairs = static_cast<std::size_t>(ranks) * static_cast<std::size_t>(ranks);
    queues_.resize(pairs);
    spare_.resize(pairs);
    scratch_.resize(static_cast<std::size_t>(ranks));
  }
  LocalExchange(const LocalExchange&) = delete;
  LocalExchange& operator=(const LocalExchange&) = delete;

  [[nodiscard]] int ranks() const noexcept { return ranks_; }
  [[nodiscard]] std::uint64_t epoch() const {
    const std::scoped_lock lock(mutex_);
    return epoch_;
  }
  [[nodiscard]] std::string abort_reason() const {
    const std::scoped_lock lock(mutex_);
    return reason_;
  }

  // Ends `epoch` (the one the caller works in): every waiting or later post made in it throws
  // `reason`. Several ranks aborting the same epoch end it once.
  void abort(std::uint64_t epoch, std::string_view reason) {
    {
      const std::scoped_lock lock(mutex_);
      if (epoch_ != epoch) return;
      epoch_ = epoch + 1;
      reason_ = reason;
    }
    changed_.notify_all();
  }

  // A rank rejoining after a failed step asks for the epoch after the one it failed in; every
  // rank that does so lands in the same epoch, whether or not anyone aborted. Returns it.
  [[nodiscard]] std::uint64_t enter(std::uint64_t epoch) {
    std::uint64_t now = 0;
    {
      const std::scoped_lock lock(mutex_);
      if (epoch > epoch_) {
        epoch_ = epoch;
        reason_ = "a rank started the next step";
      }
      now = epoch_;
    }
    changed_.notify_all();
    return now;
  }

  // Posts one communication group of `rank`, made in `epoch`. Returns once every transfer in
  // it is enqueued on both sides' streams; throws when the wait gives up or the epoch ends.
  void post_group(int rank, std::uint64_t epoch, std::span<const Send> sends, std::span<const Recv> recvs,
                  const HostWait& wait) {
    require_rank(rank, "rank");
    for (const Send& s : sends) require_peer(rank, s.peer);
    for (const Recv& r : recvs) require_peer(rank, r.peer);

    std::vector<std::shared_ptr<Handoff>>& offered = scratch(rank);
    offered.clear();
    // Phase 1: offer every send (never blocks).
    for (const Send& s : sends) {
      std::shared_ptr<Handoff> h = take_spare(rank, s.peer);
      if (!h->ready) h->ready.emplace(s.device);
      h->ready->ref().record(s.stream);
      h->data = s.data;
      h->bytes = s.bytes;
      h->device = s.device;
      h->tag = s.tag;
      h->epoch = epoch;
      h->copied = false;
      h->failure.clear();
      {
        const std::scoped_lock lock(mutex_);
        ensure_epoch(epoch, rank, "posting a send");
        queues_[pair(rank, s.peer)].push_back(h);
      }
      offered.push_back(std::move(h));
    }
    changed_.notify_all();

    // Phase 2: take each matching offer in order and copy it on the receiving stream.
    for (const Recv& r : recvs) {
      std::shared_ptr<Handoff> h;
      {
        std::unique_lock lock(mutex_);
        auto& queue = queues_[pair(r.peer, rank)];
        const bool met = changed_.wait_until(lock, wait.stop, wait.deadline, [&] {
          while (!queue.empty() && queue.front()->epoch < epoch) queue.pop_front();  // left by an aborted step
          return epoch_ != epoch || !queue.empty();
        });
        ensure_epoch(epoch, rank, "waiting for a send");
        if (!met) give_up(wait, rank, detail::concat("RECV ", label(r.tag), " from rank ", r.peer));
        h = queue.front();
        queue.pop_front();
      }
      std::string mismatch;
      if (h->bytes != r.bytes) {
        mismatch =
            format_error({"LocalExchange",
                          detail::concat("rank ", r.peer, " sends ", h->bytes, " bytes (", label(h->tag), ") but rank ",
                                         rank, " receives ", r.bytes, " bytes (", label(r.tag), ")"),
                          "", "Give both sides of a stage boundary the same activation and gradient sizes"});
      } else if (h->tag.match != 0 && r.tag.match != 0 && h->tag.match != r.tag.match) {
        mismatch = format_error(
            {"LocalExchange",
             detail::concat("rank ", rank, " matched ", label(r.tag), " with rank ", r.peer, "'s ", label(h->tag)), "",
             "The two ranks post their transfers in different orders; validate the schedule"});
      }
      if (!mismatch.empty()) {
        {
          const std::scoped_lock lock(mutex_);
          h->failure = mismatch;  // the sender reports the same error instead of waiting
        }
        changed_.notify_all();
        throw error(mismatch);
      }
      r.stream.wait(h->ready->ref());
      if (r.bytes != 0) {
        if (h->device == r.device) {
          PPSCHED_CUDA_CHECK(cudaMemcpyAsync(r.data, h->data, r.bytes, cudaMemcpyDeviceToDevice, r.stream.handle()));
        } else {
          PPSCHED_CUDA_CHECK(cudaMemcpyPeerAsync(r.data, r.device, h->data, h->device, r.bytes, r.stream.handle()));
        }
      }
      if (!h->done) h->done.emplace(r.device);
      h->done->ref().record(r.stream);
      {
        const std::scoped_lock lock(mutex_);
        h->copied = true;
      }
      changed_.notify_all();
    }

    // Phase 3: the sending streams wait for the copies that read from them.
    for (std::size_t i = 0; i < sends.size(); ++i) {
      const std::shared_ptr<Handoff>& h = offered[i];
      {
        std::unique_lock lock(mutex_);
        const bool met = changed_.wait_until(lock, wait.stop, wait.deadline,
                                             [&] { return epoch_ != epoch || h->copied || !h->failure.empty(); });
        ensure_epoch(epoch, rank, "waiting for a receive");
        if (!h->failure.empty()) throw error(h->failure);
        if (!met) give_up(wait, rank, detail::concat("SEND ", label(sends[i].tag), " to rank ", sends[i].peer));
      }
      sends[i].stream.wait(h->done->ref());
      const std::scoped_lock lock(mutex_);
      spare_[pair(rank, sends[i].peer)].push_back(h);
    }
    offered.clear();
  }

 private:
  // One transfer in flight. Its events are created once, on first use, and kept when the
  // handoff is recycled, so the steady state creates no events.
  struct Handoff {
    std::optional<CudaEvent> ready;  // on the sender's device
    std::optional<CudaEvent> done;   // on the receiver's device
    const void* data = nullptr;
    std::size_t bytes = 0;
    int device = 0;
    PeerTag tag{};
    std::uint64_t epoch = 0;
    bool copied = false;
    std::string failure;  // set by a receiver that rejected the transfer
  };

  [[nodiscard]] std::size_t pair(int from, int to) const noexcept {
    return static_cast<std::size_t>(from) * static_cast<std::size_t>(ranks_) + static_cast<std::size_t>(to);
  }

  [[nodiscard]] static std::string label(const PeerTag& tag) {
    return tag.label.empty() ? detail::concat("#", tag.match) : std::string(tag.label);
  }

  void require_rank(int rank, const char* what) const {
    if (rank < 0 || rank >= ranks_) {
      detail::fail({"LocalExchange", detail::concat(what, " ", rank, " is not in [0, ", ranks_, ")"), "",
            "Use ranks of the exchange the backend was built with"});
    }
  }
  void require_peer(int rank, int peer) const {
    require_rank(peer, "peer");
    if (peer == rank) {
      detail::fail({"LocalExchange", detail::concat("rank ", rank, " exchanges with itself"), "",
            "Stages on one rank exchange nothing; lower the schedule with its placement"});
    }
  }

  // Requires the lock. Throws when the epoch the caller works in has been aborted.
  void ensure_epoch(std::uint64_t epoch, int rank, const char* doing) const {
    if (epoch_ != epoch) {
      throw error(detail::concat("rank ", rank, ": transfer abandoned while ", doing, ": ",
                                 reason_.empty() ? std::string("the exchange was aborted") : reason_));
    }
  }

  [[noreturn]] void give_up(const HostWait& wait, int rank, const std::string& what) const {
    const bool stopped = wait.stop.stop_requested();
    detail::fail({detail::concat("rank ", rank), stopped ? "stopped while waiting (another rank failed)" : "timed out waiting",
          what,
          stopped ? "See the error of the rank that failed first"
                  : "The peer never posted the matching transfer: check that every rank runs the same validated "
                    "schedule, or raise the timeout"});
  }

  [[nodiscard]] std::shared_ptr<Handoff> take_spare(int from, int to) {
    {
      const std::scoped_lock lock(mutex_);
      auto& spare = spare_[pair(from, to)];
      if (!spare.empty()) {
        std::shared_ptr<Handoff> h = std::move(spare.back());
        spare.pop_back();
        return h;
      }
    }
    return std::make_shared<Handoff>();
  }

  // Only `rank`'s own thread posts for it, so its scratch list needs no lock.
  [[nodiscard]] std::vector<std::shared_ptr<Handoff>>& scratch(int rank) noexcept {
    return scratch_[static_cast<std::size_t>(rank)];
  }

  int ranks_;
  mutable std::mutex mutex_;
  std::condition_variable_any changed_;
  std::vector<std::deque<std::shared_ptr<Handoff>>> queues_;    // [from * ranks + to], in posting order
  std::vector<std::vector<std::shared_ptr<Handoff>>> spare_;    // recycled handoffs per pair
  std::vector<std::vector<std::shared_ptr<Handoff>>> scratch_;  // per rank: the sends of the group being posted
  std::uint64_t epoch_ = 0;
  std::string reason_;
};

}  // namespace cuda
}  // namespace ppsched
