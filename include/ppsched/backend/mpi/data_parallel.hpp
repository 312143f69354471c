// Data x pipeline parallelism across processes: the gradient sum over a stage's d replicas
// (MpiAllReduce, the GradientAllReduce engine of MpiBackend) and each replica's share of the
// global batch (replica_share). MpiExecutor installs the engine when MpiOptions::replicas > 1;
// the layout is MpiBackend's (replica-major: process k is replica k / p's rank k % p).
//
// The sum is the one InProcessAllReduce computes, bit for bit: from zero, in replica order,
// ((0 + g_0) + g_1) + ... Every process sends its stage total to its d - 1 counterparts and
// receives theirs (an all-gather written as point-to-point messages on the rank's replica
// communicator), then adds the d vectors in replica order. It moves every vector to every
// replica: (d - 1) x n floats in and out per stage and step. Point-to-point rather than a
// nonblocking collective because a pending collective cannot be cancelled: when the step
// fails elsewhere the messages are cancelled and MpiBackend::recover() replaces the
// communicator, so nothing of a failed step meets the next one.
#pragma once

#include "ppsched/config.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <stop_token>
#include <string>
#include <vector>

#include "ppsched/backend/mpi/backend.hpp"
#include "ppsched/backend/mpi/session.hpp"
#include "ppsched/error.hpp"
#include "ppsched/runtime/backend.hpp"
#include "ppsched/runtime/stage.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace mpi {

class MpiAllReduce {
 public:
  // `stages`: the schedule's stage count (one slot per stage: the steady state allocates
  // nothing once every stage has been summed once).
  explicit MpiAllReduce(std::int32_t stages) {
    if (stages < 1) detail::fail({"MpiAllReduce", detail::concat(stages, " stages"), "", "make it with the schedule's stage count"});
    for (std::int32_t s = 0; s < stages; ++s) calls_.push_back(std::make_unique<Call>());
  }

  // Enqueues on `stream` (the executor's reduce stream) a host task that sums `gradient` over
  // the replicas. The task polls: it ends early with an error when `stop` is requested, when
  // this rank or any process of the job aborted, or after MpiOptions::watchdog.
  void all_reduce(MpiBackend& backend, CpuStream& stream, std::int32_t stage, CpuBuffer& gradient,
                  std::stop_token stop) {
    if (stage < 0 || static_cast<std::size_t>(stage) >= calls_.size()) {
      detail::fail({"MpiAllReduce", detail::concat("stage ", stage, " of ", calls_.size()), "",
            "make it with the schedule's stage count"});
    }
    Call& c = *calls_[static_cast<std::size_t>(stage)];
    c.backend = &backend;
    c.stage = stage;
    c.values = backend.span(gradient);
    c.stop = std::move(stop);
    const auto d = static_cast<std::size_t>(backend.replicas());
    if (c.scratch.size() != d * c.values.size()) c.scratch.assign(d * c.values.size(), 0.0f);  // first step only
    c.requests.assign(2 * (d - 1), MPI_REQUEST_NULL);
    const BufferUse<CpuBuffer> use{&gradient, Access::read_write};
    backend.launch(stream, HostTask{&MpiAllReduce::run, &c, "all-reduce"}, std::span<const BufferUse<CpuBuffer>>(&use, 1));
  }

 private:
  struct Call {
    MpiBackend* backend = nullptr;
    std::int32_t stage = 0;
    std::span<float> values;
    std::stop_token stop;
    std::vector<float> scratch;  // replica q's vector at q x n
    std::vector<MPI_Request> requests;
  };
  std::vector<std::unique_ptr<Call>> calls_;  // per stage; slots never move

  static void run(void* context) { sum(*static_cast<Call*>(context)); }

  static void cancel_locked(Call& c) {
    for (MPI_Request& r : c.requests) {
      if (r == MPI_REQUEST_NULL) continue;
      MPI_Cancel(&r);
      MPI_Request_free(&r);
    }
  }

  static void sum(Call& c) {
    using Clock = std::chrono::steady_clock;
    MpiBackend& b = *c.backend;
    const int d = b.replicas();
    const int me = b.replica();
    const std::size_t n = c.values.size();
    // Built only for an error: the steady state allocates nothing.
    const auto where = [&] {
      return detail::concat(b.process_name(b.job_rank()), ", stage ", c.stage, " all-reduce over ", d, " replicas");
    };
    if (n > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      detail::fail({"MpiAllReduce", detail::concat(n, " floats exceed MPI's int count"), where(), "Split the stage"});
    }
    const int count = static_cast<int>(n);
    {
      const std::lock_guard<std::mutex> lock(detail::mpi::call_mutex());
      struct Undo {
        Call& c;
        bool armed = true;
        ~Undo() {
          if (armed) cancel_locked(c);
        }
      } undo{c};
      std::size_t k = 0;
      for (int q = 0; q < d; ++q) {
        if (q == me) continue;
        detail::mpi::check(MPI_Irecv(c.scratch.data() + static_cast<std::size_t>(q) * n, count, MPI_FLOAT, q, c.stage,
                                     b.replica_comm(), &c.requests[k++]),
                           "MPI_Irecv", where());
        detail::mpi::check(MPI_Isend(c.values.data(), count, MPI_FLOAT, q, c.stage, b.replica_comm(), &c.requests[k++]),
                           "MPI_Isend", where());
      }
      undo.armed = false;
    }
    const auto deadline = detail::saturating_deadline(Clock::now(), b.options().watchdog);
    detail::mpi::Backoff backoff;
    for (;;) {
      {
        const std::lock_guard<std::mutex> lock(detail::mpi::call_mutex());
        int done = 0;
        const int code =
            MPI_Testall(static_cast<int>(c.requests.size()), c.requests.data(), &done, MPI_STATUSES_IGNORE);
        if (code != MPI_SUCCESS) {
          cancel_locked(c);
          detail::mpi::check(code, "MPI_Testall", where());
        }
        if (done != 0) break;
        b.poll_control_locked();
        const bool peer = b.peer_note_.rank >= 0;
        const bool stopped = c.stop.stop_requested() || b.aborted();
        const bool late = Clock::now() >= deadline;
        if (peer || stopped || late) {
          // The counterparts whose part never came: the replicas to suspect (issue 24).
          std::string missing;
          for (int q = 0, k = 0; q < d; ++q) {
            if (q == me) continue;
            // MPI_Testall leaves every request as it was until all completed: test this one.
            int arrived = 0;
            MPI_Test(&c.requests[static_cast<std::size_t>(k)], &arrived, MPI_STATUS_IGNORE);
            if (arrived == 0) {
              missing += detail::concat(missing.empty() ? "" : ", ", b.process_name(q * b.ranks() + b.rank()));
            }
            k += 2;
          }
          cancel_locked(c);
          detail::fail({b.process_name(b.job_rank()),
                peer      ? detail::concat("the step was ended by ", b.process_name(b.peer_note_.rank), ", which failed")
                : stopped ? std::string("this rank's step failed before the gradient sum completed")
                          : detail::concat("the gradient sum stayed pending for ", b.options().watchdog.count(),
                                           " ms: ", missing.empty() ? std::string("a replica") : missing,
                                           " never reached it, or its process died"),
                where(), "See the first error of the step; raise MpiOptions::watchdog if steps are this slow"});
        }
      }
      backoff.pause();
    }
    // Replica order, from zero: the association InProcessAllReduce and the reference use.
    for (std::size_t i = 0; i < n; ++i) {
      float total = 0.0f;
      for (int q = 0; q < d; ++q) total += q == me ? c.values[i] : c.scratch[static_cast<std::size_t>(q) * n + i];
      c.values[i] = total;
    }
  }
};

// Replica `replica`'s share of a global batch of d x m micro-batches: its m consecutive
// micro-batches (replica 0 the first m), as the in-process DataParallelWorld is fed. Views
// into `global`, which must outlive the share.
[[nodiscard]] inline Batch replica_share(const Batch& global, int replicas, int replica) {
  if (replicas < 1 || replica < 0 || replica >= replicas) {
    detail::fail({"replica_share", detail::concat("replica ", replica, " of ", replicas), "", "give a replica in 0 .. d-1"});
  }
  const auto d = static_cast<std::size_t>(replicas);
  const auto r = static_cast<std::size_t>(replica);
  if (global.inputs.size() % d != 0 || global.targets.size() % d != 0) {
    detail::fail({"replica_share",
          detail::concat(global.inputs.size(), " input and ", global.targets.size(), " target floats for ", replicas,
                         " replicas"),
          "Batch", "give a global batch of d x m micro-batches (each replica gets m)"});
  }
  if (!global.side_inputs.empty()) {
    detail::fail({"replica_share", "a batch with side inputs", "Batch::side_inputs",
          "build each replica's Batch (and its side inputs) yourself"});
  }
  // Stage-major, [s * d m + k]: a share's sizes are not one slice, and a share without them
  // would move every micro-batch at the declared size.
  if (!global.sizes.empty()) {
    detail::fail({"replica_share", "a batch with variable-length micro-batches", "Batch::sizes",
                  "build each replica's Batch yourself, its sizes stage s's micro-batch k at [s * m + k] of its m"});
  }
  const std::size_t in = global.inputs.size() / d;
  const std::size_t out = global.targets.size() / d;
  return {global.inputs.subspan(r * in, in), global.targets.subspan(r * out, out)};
}

// This process's share, as its backend's layout says.
[[nodiscard]] inline Batch replica_share(const Batch& global, const MpiBackend& backend) {
  return replica_share(global, backend.replicas(), backend.replica());
}

}  // namespace mpi
}  // namespace ppsched
