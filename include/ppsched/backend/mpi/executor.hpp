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

#include "ppsched/config.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
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

namespace ppsched::inline PPSCHED_MODE {
namespace mpi {

class MpiExecutor {
 public:
  // As Executor's constructors: `schedule` is the whole pipeline's (the same in every
  // process), `stages` one per stage (only this rank's are called).
  // Collective: before anything else, the processes compare what they were given (the
  // schedule, every stage boundary between two processes, each stage's gradient size across
  // replicas, the replica count) and all throw at once, naming the first difference.
  MpiExecutor(MpiBackend& backend, const Schedule& schedule, std::span<const StageFunctions> stages,
              ExecutorOptions options = {})
      : backend_(backend), compared_(compare_setups(backend, schedule, stages)) {
    build([&] {
      executor_.emplace(backend, schedule, stages, options);
      reduce_over_replicas(schedule, options);
    });
  }
  MpiExecutor(MpiBackend& backend, const Schedule& schedule, const CostModel& costs,
              std::span<const StageFunctions> stages, ExecutorOptions options = {})
      : backend_(backend), compared_(compare_setups(backend, schedule, stages)) {
    build([&] {
      executor_.emplace(backend, schedule, costs, stages, options);
      reduce_over_replicas(schedule, options);
    });
  }

  // Collective: every process calls it with the same batch (with replicas, its replica's
  // share: replica_share). Returns this rank's losses and timeline; throws the step's first
  // error, the same on every process.
  const RankStep& run_step(const Batch& batch) {
    if (!broken_.empty()) {
      detail::fail({detail::concat("rank ", backend_.rank()), "a process of the job stopped answering in an earlier step",
            broken_, "End the job (MpiSession::abort_job) and start it again"});
    }
    std::exception_ptr local;
    const RankStep* result = nullptr;
    try {
      result = &executor_->run_step(batch);
    } catch (...) {
      local = std::current_exception();
      // A fault before anything was issued (a bad batch) did not abort: tell the peers now.
      if (backend_.abort_time_ns() == 0 && backend_.peer_abort().rank < 0) backend_.abort("this rank failed");
    }
    agree(local);
    return *result;
  }

  [[nodiscard]] Executor<MpiBackend>& executor() noexcept { return *executor_; }
  [[nodiscard]] int rank() const noexcept { return backend_.rank(); }

 private:
  static constexpr std::size_t max_message = 4096;
  // Tags of the exchanges on the backend's control communicator (its abort notes use 3).
  static constexpr int compare_tag = 6, outcome_tag = 7, message_tag = 8, build_tag = 9;

  // What one process says about the whole job: the schedule, its replica count.
  struct SetupHeader {
    char schedule[48] = {};
    std::int64_t ranks = 0, microbatches = 0, stages = 0, replicas = 0;
    std::uint64_t actions = 0;  // a hash of the placement and every rank's program
  };
  // What one process says about one stage: its boundaries and its gradient.
  struct StageSetup {
    char input[56] = {};
    char output[56] = {};
    std::uint64_t input_hash = 0, output_hash = 0, gradient_floats = 0;
  };

  static void mix(std::uint64_t& h, std::uint64_t v) noexcept {
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  }
  template <std::size_t N>
  static void copy_text(char (&to)[N], const std::string& text) noexcept {
    const std::size_t n = std::min(text.size(), N - 1);
    std::copy_n(text.data(), n, to);
    to[n] = '\0';
  }
  // "f32 x 4, i64 x 8", or "4 floats": a boundary as declared, and its hash.
  static std::pair<std::string, std::uint64_t> describe(const std::vector<TensorSpec>& tensors, std::size_t floats) {
    std::uint64_t h = tensors.empty() ? 1 : 2;
    std::string text;
    if (tensors.empty()) {
      mix(h, floats);
      text = detail::concat(floats, " floats");
    }
    for (const TensorSpec& t : tensors) {
      mix(h, static_cast<std::uint64_t>(t.dtype));
      mix(h, t.max_count);
      text += detail::concat(text.empty() ? "" : ", ", to_string(t.dtype), " x ", t.max_count);
    }
    return {text, h};
  }

  // Every process sends its header, then (when the headers agree) its view of every stage;
  // each then runs the same comparison on the same data, so all throw together, or none.
  bool compare_setups(MpiBackend& backend, const Schedule& schedule, std::span<const StageFunctions> stages) {
    const int n = backend.job_ranks();
    SetupHeader mine;
    copy_text(mine.schedule, schedule.name);
    mine.ranks = schedule.ranks;
    mine.microbatches = schedule.microbatches;
    mine.stages = schedule.stages();
    mine.replicas = backend.replicas();
    for (const std::int32_t r : schedule.placement) mix(mine.actions, static_cast<std::uint64_t>(r));
    for (const auto& program : schedule.programs) {
      mix(mine.actions, program.size());
      for (const Action& a : program) {
        mix(mine.actions, static_cast<std::uint64_t>(a.op));
        mix(mine.actions, static_cast<std::uint64_t>(a.stage));
        mix(mine.actions, static_cast<std::uint64_t>(a.microbatch));
        mix(mine.actions, a.group);
      }
    }
    std::vector<SetupHeader> headers(static_cast<std::size_t>(n));
    gather(&mine, sizeof mine, headers.data(), "the schedules");
    const auto text_of = [](const SetupHeader& h) {
      return detail::concat("'", h.schedule, "' (", h.ranks, " ranks, ", h.microbatches, " micro-batches, ", h.stages,
                            " stages)");
    };
    const SetupHeader& first = headers.front();
    for (int q = 1; q < n; ++q) {
      const SetupHeader& h = headers[static_cast<std::size_t>(q)];
      if (h.replicas != first.replicas) {
        mismatch(detail::concat("process ", q, " was given ", h.replicas, " replicas and process 0 ", first.replicas),
                 "MpiOptions::replicas", "Give every process the same replica count");
      }
      if (std::string_view(h.schedule) != std::string_view(first.schedule) || h.ranks != first.ranks ||
          h.microbatches != first.microbatches || h.stages != first.stages || h.actions != first.actions) {
        const bool same_shape = std::string_view(h.schedule) == std::string_view(first.schedule) &&
                                h.ranks == first.ranks && h.microbatches == first.microbatches &&
                                h.stages == first.stages;
        mismatch(detail::concat("process ", q, "'s schedule is ", text_of(h), " and process 0's ", text_of(first),
                                same_shape ? ", with other actions" : ""),
                 "the schedule", "Give every process the same schedule (the same family, sizes and actions)");
      }
    }
    const auto S = static_cast<std::size_t>(std::max<std::int64_t>(first.stages, 0));
    std::vector<StageSetup> view(S);
    for (std::size_t s = 0; s < S && s < stages.size(); ++s) {
      const StageFunctions& f = stages[s];
      const auto [in_text, in_hash] = describe(f.input_tensors, f.input_size);
      const auto [out_text, out_hash] = describe(f.output_tensors, f.output_size);
      copy_text(view[s].input, in_text);
      copy_text(view[s].output, out_text);
      view[s].input_hash = in_hash;
      view[s].output_hash = out_hash;
      view[s].gradient_floats = f.weight_grad_size;
    }
    std::vector<StageSetup> all(S * static_cast<std::size_t>(n));
    if (S > 0) gather(view.data(), S * sizeof(StageSetup), all.data(), "the stages' boundaries and gradients");
    const auto at = [&](int process, std::size_t stage) -> const StageSetup& {
      return all[static_cast<std::size_t>(process) * S + stage];
    };
    const int p = backend.ranks();
    const auto owner = [&](std::int64_t replica, std::size_t stage) {
      return static_cast<int>(replica) * p + schedule.placement[stage];
    };
    for (std::int64_t r = 0; r < first.replicas; ++r) {
      for (std::size_t s = 0; s + 1 < S; ++s) {
        const int a = owner(r, s), b = owner(r, s + 1);
        if (a == b || at(a, s).output_hash == at(b, s + 1).input_hash) continue;
        mismatch(detail::concat("stage ", s, "'s output is ", at(a, s).output, " on process ", a, " but stage ", s + 1,
                                "'s input is ", at(b, s + 1).input, " on process ", b),
                 "StageFunctions::output_tensors / input_tensors",
                 "Declare each boundary alike on both of its processes (the same dtypes and counts)");
      }
    }
    for (std::int64_t r = 1; r < first.replicas; ++r) {
      for (std::size_t s = 0; s < S; ++s) {
        const int a = owner(r, s), b = owner(0, s);
        if (at(a, s).gradient_floats == at(b, s).gradient_floats) continue;
        mismatch(detail::concat("stage ", s, "'s weight gradient is ", at(a, s).gradient_floats, " floats on process ", a,
                                " (replica ", r, ") but ", at(b, s).gradient_floats, " on process ", b, " (replica 0)"),
                 "StageFunctions::weight_grad_size", "Give every replica of a stage the same weight gradient size");
      }
    }
    return true;
  }

  // Every process's `bytes` to every process over the job, bounded by the watchdog; a process
  // that never comes is named.
  void gather(const void* mine, std::size_t bytes, void* all, const char* what) {
    const std::string where = detail::concat("process ", backend_.job_rank(), ", comparing ", what);
    const auto missing =
        detail::mpi::exchange(backend_.control(), compare_tag, mine, bytes, all, -1,
                              detail::saturating_deadline(std::chrono::steady_clock::now(), backend_.options().watchdog), where);
    if (!missing.empty()) lost(missing, detail::concat("comparing ", what).c_str(), where);
  }

  // The processes of a list, as errors name them.
  [[nodiscard]] std::string names(const std::vector<int>& processes) const {
    std::string text;
    for (const int q : processes) text += detail::concat(text.empty() ? "" : ", ", backend_.process_name(q));
    return text;
  }

  // Builds the executor, then agrees with every process on the outcome: its own checks (a
  // stage without a forward, say) can fail on one process only, which then left the others
  // to time out in their first step with the cause printed nowhere but there (issue 24). All
  // throw, the first failing process's message named on every one.
  template <class Build>
  void build(Build&& make) {
    std::string problem;
    try {
      make();
    } catch (const std::exception& e) {
      problem = e.what();
    } catch (...) {
      problem = "building the executor threw an exception that is not a std::exception";
    }
    const int me = backend_.job_rank();
    const std::string where = detail::concat(backend_.process_name(me), ", building its MpiExecutor");
    const auto deadline = detail::saturating_deadline(std::chrono::steady_clock::now(), backend_.options().watchdog);
    std::vector<std::int64_t> failing(static_cast<std::size_t>(backend_.job_ranks()), 0);
    const std::int64_t mine = problem.empty() ? 0 : 1;
    auto missing = detail::mpi::exchange(backend_.control(), build_tag, &mine, sizeof mine, failing.data(), -1, deadline,
                                         where);
    if (!missing.empty()) lost(missing, "building its MpiExecutor", where);
    const auto it = std::find(failing.begin(), failing.end(), 1);
    if (it == failing.end()) return;
    const auto first = static_cast<int>(it - failing.begin());
    std::vector<char> text(max_message, '\0');
    if (first == me) std::copy_n(problem.begin(), std::min(problem.size(), max_message - 1), text.begin());
    missing = detail::mpi::exchange(backend_.control(), build_tag + 1, text.data(), max_message, text.data(), first,
                                    deadline, where);
    if (!missing.empty()) lost(missing, "building its MpiExecutor", where);
    if (first == me) throw error(problem);
    detail::fail({"MpiExecutor", detail::concat(backend_.process_name(first), " failed to build its executor: ", text.data()),
          where, "Fix that process's stages or options (it prints the same message); every process stops with it"});
  }

  [[noreturn]] void lost(const std::vector<int>& missing, const char* what, const std::string& where) const {
    detail::mpi::job_lost().store(true);
    detail::fail({"MpiExecutor",
          detail::concat(names(missing), " never finished ", what, " within ", backend_.options().watchdog.count(),
                         " ms (MpiOptions::watchdog): it exited, was killed, or hangs"),
          where, "See the launcher's output for that process"});
  }

  [[noreturn]] static void mismatch(const std::string& problem, const char* where, const char* fix) {
    detail::fail({"MpiExecutor: the processes were given different setups", problem, where, fix});
  }

  void reduce_over_replicas(const Schedule& schedule, const ExecutorOptions& options) {
    if (backend_.replicas() == 1) return;
    if (options.accumulation != GradAccumulation::microbatch_order) {
      detail::fail({"MpiExecutor", "schedule-order accumulation with data-parallel replicas", "ExecutorOptions::accumulation",
            "use GradAccumulation::microbatch_order: the replica sum's bit-identity rests on it"});
    }
    all_reduce_ = std::make_unique<MpiAllReduce>(std::max(schedule.stages(), 1));
    executor_->set_gradient_reducer(gradient_reducer<MpiBackend>(*all_reduce_));
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
    // Point-to-point, not MPI_Iallgather: a process that never reports (it died) is then named
    // on every other, not left to be guessed from a neighbour's transfer (issue 24).
    std::vector<std::int64_t> all(static_cast<std::size_t>(2 * backend_.job_ranks()));
    const std::string where = detail::concat(backend_.process_name(me), ", the step's agreement");
    const auto deadline = detail::saturating_deadline(std::chrono::steady_clock::now(), backend_.options().watchdog);
    const auto missing = detail::mpi::exchange(backend_.control(), outcome_tag, mine.data(), sizeof mine, all.data(), -1,
                                               deadline, where);
    if (!missing.empty()) stop_answering(text, missing);
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
      // With replicas, the executor's "rank N" alone does not say which process failed.
      if (backend_.replicas() > 1) text = detail::concat(backend_.process_name(me), ": ", text);
      std::copy_n(text.begin(), std::min(text.size(), max_message - 1), message.begin());
    }
    const auto lost = detail::mpi::exchange(backend_.control(), message_tag, message.data(), max_message,
                                            message.data(), first, deadline, where);
    if (!lost.empty()) stop_answering(text, lost);
    backend_.recover();
    if (first == me && local && backend_.replicas() == 1) std::rethrow_exception(local);
    throw error(std::string(message.data()));
  }

  // A process never reported: the job cannot go on (MPI_Finalize would wait for it).
  [[noreturn]] void stop_answering(const std::string& local, const std::vector<int>& missing) {
    detail::mpi::job_lost().store(true);
    broken_ = detail::concat("not every process reported the step's outcome within ",
                             backend_.options().watchdog.count(), " ms (MpiOptions::watchdog): ", names(missing),
                             missing.size() == 1 ? " did not" : " did not each",
                             " (it exited, was killed, or hangs outside ppsched)");
    detail::fail({backend_.process_name(backend_.job_rank()), broken_,
          local.empty() ? std::string("this rank finished its part of the step")
                        : detail::concat("this rank's error: ", local),
          "See the launcher's output for that process; end the job (MpiSession::abort_job, or return: MpiSession "
          "then skips MPI_Finalize)"});
  }

  MpiBackend& backend_;
  bool compared_ = false;  // compare_setups ran before executor_ was built
  std::unique_ptr<MpiAllReduce> all_reduce_;  // with replicas; before the executor, whose streams use it
  std::optional<Executor<MpiBackend>> executor_;  // built in the constructor's body: see build()
  std::string broken_;
};

}  // namespace mpi

using mpi::MpiExecutor;
}  // namespace ppsched
