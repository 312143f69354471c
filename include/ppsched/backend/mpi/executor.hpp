// One rank's executor in a job of one process per rank, and what the World does for threads:
// after each step every process learns whether the step succeeded everywhere, and when it
// did not, every process throws the same error — the step's first — and recovers.
//
// A rank that failed aborted its communicator, which told its peers (MpiBackend::abort), so
// their pending transfers ended within one poll. A rank that finished its part before another
// failed learns it here. The processes then exchange their outcomes (one MPI_Iallgather of
// two words, on every step, bounded by MpiOptions::watchdog); the first error is the earliest
// failure that was not caused by a peer's abort, and its text is sent to every process
// (MPI_Ibcast). A process that does not report within the bound (it died, or hangs outside
// ppsched) ends the step on every other process with an error saying so; the job cannot go
// on after that (MPI_Finalize would wait for the dead process: end it with
// MpiSession::abort_job), and every later step throws at once.
//
// With MpiOptions::replicas = d > 1 the agreement spans every replica's processes, the first
// error's text names its replica (and is then what every process throws, the failing one
// included), and each stage's weight gradient is summed over the d replicas before the
// optimizer (MpiAllReduce, installed here): run_step then takes this replica's share of the
// global batch (replica_share).
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "ppsched/backend/mpi/backend.hpp"
#include "ppsched/backend/mpi/data_parallel.hpp"
#include "ppsched/backend/mpi/session.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/error.hpp"
#include "ppsched/runtime/data_parallel.hpp"
#include "ppsched/runtime/executor.hpp"
#include "ppsched/runtime/stage.hpp"
#include "ppsched/schedule/schedule.hpp"

namespace ppsched {

class MpiExecutor {
 public:
  // As Executor's constructors: `schedule` is the whole pipeline's (the same in every
  // process), `stages` one per stage (only this rank's are called).
  MpiExecutor(MpiBackend& backend, const Schedule& schedule, std::span<const StageFunctions> stages,
              ExecutorOptions options = {})
      : backend_(backend), executor_(backend, schedule, stages, options) {
    reduce_over_replicas(schedule, options);
  }
  MpiExecutor(MpiBackend& backend, const Schedule& schedule, const CostModel& costs,
              std::span<const StageFunctions> stages, ExecutorOptions options = {})
      : backend_(backend), executor_(backend, schedule, costs, stages, options) {
    reduce_over_replicas(schedule, options);
  }

  // Collective: every process calls it with the same batch (with replicas, its replica's
  // share: replica_share). Returns this rank's losses and timeline; throws the step's first
  // error, the same on every process.
  const RankStep& run_step(const Batch& batch) {
    if (!broken_.empty()) {
      fail({detail::concat("rank ", backend_.rank()), "a process of the job stopped answering in an earlier step",
            broken_, "End the job (MpiSession::abort_job) and start it again"});
    }
    std::exception_ptr local;
    const RankStep* result = nullptr;
    try {
      result = &executor_.run_step(batch);
    } catch (...) {
      local = std::current_exception();
      // A fault before anything was issued (a bad batch) did not abort: tell the peers now.
      if (backend_.abort_time_ns() == 0 && backend_.peer_abort().rank < 0) backend_.abort("this rank failed");
    }
    agree(local);
    return *result;
  }

  [[nodiscard]] Executor<MpiBackend>& executor() noexcept { return executor_; }
  [[nodiscard]] int rank() const noexcept { return backend_.rank(); }

 private:
  static constexpr std::size_t max_message = 4096;

  void reduce_over_replicas(const Schedule& schedule, const ExecutorOptions& options) {
    if (backend_.replicas() == 1) return;
    if (options.accumulation != GradAccumulation::microbatch_order) {
      fail({"MpiExecutor", "schedule-order accumulation with data-parallel replicas", "ExecutorOptions::accumulation",
            "use GradAccumulation::microbatch_order: the replica sum's bit-identity rests on it"});
    }
    all_reduce_ = std::make_unique<MpiAllReduce>(std::max(schedule.stages(), 1));
    executor_.set_gradient_reducer(gradient_reducer<MpiBackend>(*all_reduce_));
  }

  // Waits for a nonblocking collective under the backend's watchdog.
  [[nodiscard]] bool finish(MPI_Request& request) {
    using Clock = std::chrono::steady_clock;
    const auto deadline = saturating_deadline(Clock::now(), backend_.options().watchdog);
    detail::mpi::Backoff backoff;
    for (;;) {
      {
        const std::lock_guard<std::mutex> lock(detail::mpi::call_mutex());
        int done = 0;
        detail::mpi::check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test",
                           detail::concat("rank ", backend_.rank(), ", the step's agreement"));
        if (done != 0) return true;
      }
      if (Clock::now() >= deadline) return false;
      backoff.pause();
    }
  }

  void agree(const std::exception_ptr& local) {
    const int me = backend_.job_rank();
    std::string text;
    if (local) {
      try {
        std::rethrow_exception(local);
      } catch (const std::exception& e) {
        text = e.what();
      } catch (...) {
        text = detail::concat("rank ", me, ": an exception that is not a std::exception");
      }
    }
    // status 0: done; 1: failed first-hand; 2: ended by a peer's abort.
    std::array<std::int64_t, 2> mine{0, 0};
    if (local) {
      const auto note = backend_.peer_abort();
      mine = note.rank >= 0 ? std::array<std::int64_t, 2>{2, note.time_ns}
                            : std::array<std::int64_t, 2>{1, backend_.abort_time_ns()};
    }
    std::vector<std::int64_t> all(static_cast<std::size_t>(2 * backend_.job_ranks()));
    const std::string where = detail::concat("rank ", me, ", the step's agreement");
    MPI_Request request = MPI_REQUEST_NULL;
    {
      const std::lock_guard<std::mutex> lock(detail::mpi::call_mutex());
      detail::mpi::check(MPI_Iallgather(mine.data(), 2, MPI_INT64_T, all.data(), 2, MPI_INT64_T, backend_.control(),
                                        &request),
                         "MPI_Iallgather", where);
    }
    if (!finish(request)) stop_answering(text);
    int first = -1;
    for (int r = 0; r < backend_.job_ranks(); ++r) {
      const auto status = all[static_cast<std::size_t>(2 * r)];
      const auto time = all[static_cast<std::size_t>(2 * r + 1)];
      if (status != 1) continue;
      if (first < 0 || time < all[static_cast<std::size_t>(2 * first + 1)]) first = r;
    }
    for (int r = 0; r < backend_.job_ranks() && first < 0; ++r) {
      if (all[static_cast<std::size_t>(2 * r)] != 0) first = r;
    }
    if (first < 0) return;  // every rank finished the step

    std::vector<char> message(max_message, '\0');
    if (first == me) {
      // With replicas, a rank number alone does not say which process failed.
      if (backend_.replicas() > 1) text = detail::concat("replica ", backend_.replica(), ": ", text);
      std::copy_n(text.begin(), std::min(text.size(), max_message - 1), message.begin());
    }
    {
      const std::lock_guard<std::mutex> lock(detail::mpi::call_mutex());
      detail::mpi::check(
          MPI_Ibcast(message.data(), static_cast<int>(max_message), MPI_CHAR, first, backend_.control(), &request),
          "MPI_Ibcast", where);
    }
    if (!finish(request)) stop_answering(text);
    backend_.recover();
    if (first == me && local && backend_.replicas() == 1) std::rethrow_exception(local);
    throw error(std::string(message.data()));
  }

  [[noreturn]] void stop_answering(const std::string& local) {
    broken_ = detail::concat("not every process reported the step's outcome within ",
                             backend_.options().watchdog.count(),
                             " ms (MpiOptions::watchdog): a process exited or hangs outside ppsched");
    fail({detail::concat("rank ", backend_.rank()), broken_,
          local.empty() ? std::string("this rank finished its part of the step")
                        : detail::concat("this rank's error: ", local),
          "See the launcher's output for the process that ended; end the job (MpiSession::abort_job)"});
  }

  MpiBackend& backend_;
  std::unique_ptr<MpiAllReduce> all_reduce_;  // with replicas; before the executor, whose streams use it
  Executor<MpiBackend> executor_;
  std::string broken_;
};

}  // namespace ppsched
