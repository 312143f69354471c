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
//
// Before each step, and before each new schedule (set_schedule), the processes say what they
// are about to do in one more exchange of the same kind: which call (a process in run_step
// while another is in set_schedule is an error on both), whether their own checks passed,
// and a fingerprint of what must match: the schedule, or each stage boundary's micro-batch
// sizes (Batch::sizes). Every process runs the same comparison on the same data, so all
// throw the same error before anything runs, or none does.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <thread>
#include <type_traits>
#include <vector>

#include "ppsched/backend/mpi/backend.hpp"
#include "ppsched/backend/mpi/data_parallel.hpp"
#include "ppsched/backend/mpi/session.hpp"
#include "ppsched/costs/cost_model.hpp"
#include "ppsched/error.hpp"
#include "ppsched/lower/lower.hpp"
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
      : backend_(backend), stages_(stages), compared_(compare_setups(backend, schedule, stages)) {
    build([&] {
      current_ = lowered_of(schedule, nullptr);
      make_executor(options);
      reduce_over_replicas(schedule, options);
    });
  }
  MpiExecutor(MpiBackend& backend, const Schedule& schedule, const CostModel& costs,
              std::span<const StageFunctions> stages, ExecutorOptions options = {})
      : backend_(backend), stages_(stages), compared_(compare_setups(backend, schedule, stages)) {
    build([&] {
      current_ = lowered_of(schedule, &costs);
      make_executor(options);
      reduce_over_replicas(schedule, options);
    });
  }

  // Collective: every process calls it with the same batch (with replicas, its replica's
  // share: replica_share). Returns this rank's losses and timeline; throws the step's first
  // error, the same on every process.
  // Before the step the processes compare each boundary's micro-batch sizes between its two
  // processes (Batch::sizes, or the declared sizes where it is empty) and whether each
  // accepted its sizes (detail::check_sizes): a difference, or one process's refusal, throws
  // on every process before anything is issued, naming stage and micro-batch.
  const RankStep& run_step(const Batch& batch) {
    check_usable();
    announce_step(batch);
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

  // Collective, as World::set_schedule: a new schedule from the next step (another family,
  // placement or micro-batch count, as many stages), lowered as the constructors do, then
  // planned by this rank's executor from its pools (Executor::set_schedule). Every process
  // calls it with the same schedule: the processes first compare what they were given (name,
  // sizes, a hash of placement and actions, and of what the lowering wrote), and a
  // difference throws on every process, naming the processes and what differs. A schedule
  // one process refuses (its lowering, or its executor's checks) throws on every process with
  // that process's message, and every process keeps its previous schedule. Returns what this
  // rank's pools grew by (nothing when its new plan fits what earlier plans needed).
  PoolGrowth set_schedule(const Schedule& schedule) {
    return replan(schedule, [&] { return lowered_of(schedule, nullptr); });
  }
  PoolGrowth set_schedule(const LoweredSchedule& schedule) {
    return replan(schedule.schedule(), [&] { return Lowered{schedule, {}}; });
  }
  PoolGrowth set_schedule(const Schedule& schedule, const CostModel& costs) {
    return replan(schedule, [&] { return lowered_of(schedule, &costs); });
  }
  // This rank's pools (Executor::pools): `growths` counts the set_schedule calls that grew them.
  [[nodiscard]] const ExecutorPools& pools() const noexcept { return executor_->pools(); }
  // The whole pipeline's schedule, lowered, as every process runs it.
  [[nodiscard]] const Schedule& schedule() const noexcept { return current_.stored(); }

  // This rank's executor. Its own set_schedule is this process's alone, compared with no
  // other: change schedules through MpiExecutor::set_schedule.
  [[nodiscard]] Executor<MpiBackend>& executor() noexcept { return *executor_; }
  [[nodiscard]] int rank() const noexcept { return backend_.rank(); }

 private:
  static constexpr std::size_t max_message = 4096;
  // Tags of the exchanges on the backend's control communicator (its abort notes use 3).
  static constexpr int compare_tag = 6, outcome_tag = 7, message_tag = 8, build_tag = 9;
  // Tags of the announcement before each call (build_tag + 1 is taken).
  static constexpr int call_tag = 11, call_text_tag = 12, sizes_tag = 13, replan_tag = 14;

  // A lowered schedule: with lower()'s proof where lower() wrote it, so that the executor
  // does not validate it again.
  struct Lowered {
    std::optional<LoweredSchedule> proven;
    Schedule plain;  // when lower() did not write it
    [[nodiscard]] const Schedule& stored() const noexcept { return proven ? proven->schedule() : plain; }
  };
  [[nodiscard]] static Lowered lowered_of(const Schedule& schedule, const CostModel* costs) {
    if (is_lowered(schedule)) return {std::nullopt, schedule};
    return {costs == nullptr ? lower(schedule)
                             : lower(schedule, lower_options_for(*costs, schedule.stages(), schedule.microbatches)),
            {}};
  }
  void make_executor(const ExecutorOptions& options) {
    if (current_.proven) {
      executor_.emplace(backend_, *current_.proven, stages_, options);
    } else {
      executor_.emplace(backend_, current_.plain, stages_, options);
    }
  }
  [[nodiscard]] PoolGrowth take(const Lowered& l) {
    return l.proven ? executor_->set_schedule(*l.proven) : executor_->set_schedule(l.plain);
  }

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
  // A hash of the placement and every rank's program.
  [[nodiscard]] static std::uint64_t actions_hash(const Schedule& schedule) noexcept {
    std::uint64_t h = 0;
    for (const std::int32_t r : schedule.placement) mix(h, static_cast<std::uint64_t>(r));
    for (const auto& program : schedule.programs) {
      mix(h, program.size());
      for (const Action& a : program) {
        mix(h, static_cast<std::uint64_t>(a.op));
        mix(h, static_cast<std::uint64_t>(a.stage));
        mix(h, static_cast<std::uint64_t>(a.microbatch));
        mix(h, a.group);
      }
    }
    return h;
  }
  [[nodiscard]] static SetupHeader header_of(const Schedule& schedule, std::int64_t replicas) {
    SetupHeader h;
    copy_text(h.schedule, schedule.name);
    h.ranks = schedule.ranks;
    h.microbatches = schedule.microbatches;
    h.stages = schedule.stages();
    h.replicas = replicas;
    h.actions = actions_hash(schedule);
    return h;
  }
  [[nodiscard]] static bool same_schedule(const SetupHeader& a, const SetupHeader& b) noexcept {
    return std::string_view(a.schedule) == std::string_view(b.schedule) && a.ranks == b.ranks &&
           a.microbatches == b.microbatches && a.stages == b.stages && a.actions == b.actions;
  }
  // "'gpipe' (4 ranks, 8 micro-batches, 4 stages) and process 0's '1f1b' (...)".
  [[nodiscard]] static std::string schedule_difference(const SetupHeader& h, const SetupHeader& first,
                                                       const std::string& first_name) {
    const auto text_of = [](const SetupHeader& x) {
      return detail::concat("'", x.schedule, "' (", x.ranks, " ranks, ", x.microbatches, " micro-batches, ", x.stages,
                            " stages)");
    };
    const bool same_shape = std::string_view(h.schedule) == std::string_view(first.schedule) && h.ranks == first.ranks &&
                            h.microbatches == first.microbatches && h.stages == first.stages;
    return detail::concat(text_of(h), " and ", first_name, "'s ", text_of(first), same_shape ? ", with other actions" : "");
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

  // A job whose process stopped answering cannot run anything collective again.
  void check_usable() const {
    if (broken_.empty()) return;
    detail::fail({detail::concat("rank ", backend_.rank()), "a process of the job stopped answering in an earlier step",
                  broken_, "End the job (MpiSession::abort_job) and start it again"});
  }

  // What a process announces before a collective call: which call, whether its own checks of
  // what it was given passed (`refused`: its message follows), and what must match: for
  // set_schedule, the schedule given and a hash of what lower() wrote from it; for run_step,
  // one hash per stage boundary of its micro-batch sizes (after the header, as words).
  enum : std::int64_t { call_step = 1, call_schedule = 2 };
  struct Announcement {
    std::int64_t call = 0;
    std::int64_t refused = 0;
    SetupHeader schedule{};
    std::uint64_t lowered = 0;
  };
  static_assert(sizeof(Announcement) % sizeof(std::uint64_t) == 0 && std::is_trivially_copyable_v<Announcement>);
  static constexpr std::size_t header_words = sizeof(Announcement) / sizeof(std::uint64_t);

  [[nodiscard]] std::size_t boundaries() const noexcept {
    return stages_.empty() ? 0 : stages_.size() - 1;
  }
  [[nodiscard]] Announcement announced(int process) const noexcept {
    Announcement a;
    const std::size_t at = static_cast<std::size_t>(process) * (header_words + boundaries());
    std::memcpy(static_cast<void*>(&a), announced_.data() + at, sizeof a);
    return a;
  }
  [[nodiscard]] std::uint64_t announced_boundary(int process, std::size_t s) const noexcept {
    return announced_[static_cast<std::size_t>(process) * (header_words + boundaries()) + header_words + s];
  }
  [[nodiscard]] static const char* call_name(std::int64_t call) noexcept {
    return call == call_step ? "run_step" : call == call_schedule ? "set_schedule" : "something else";
  }

  // Sends this process's announcement (`mine`, then `boundary`: one word per stage boundary)
  // to every process and checks what all share: the same call everywhere, then `compare` on
  // the gathered announcements, then no refusal (the first refusing process's `problem` is
  // thrown by it, and named by every other: "<it> <refused>: <its message>").
  template <class Compare>
  void announce(const Announcement& mine, std::span<const std::uint64_t> boundary, const std::string& problem,
                const char* subject, const char* refused, const char* fix, Compare&& compare) {
    const int n = backend_.job_ranks();
    const int me = backend_.job_rank();
    const std::size_t words = header_words + boundaries();
    const std::string where = detail::concat(backend_.process_name(me), ", announcing ", call_name(mine.call));
    announcing_.assign(words, 0);
    std::memcpy(announcing_.data(), static_cast<const void*>(&mine), sizeof mine);
    std::copy(boundary.begin(), boundary.end(), announcing_.begin() + static_cast<std::ptrdiff_t>(header_words));
    announced_.assign(words * static_cast<std::size_t>(n), 0);
    const auto deadline = detail::saturating_deadline(std::chrono::steady_clock::now(), backend_.options().watchdog);
    const auto missing = detail::mpi::exchange(backend_.control(), call_tag, announcing_.data(),
                                               words * sizeof(std::uint64_t), announced_.data(), -1, deadline, where);
    if (!missing.empty()) lost(missing, detail::concat("announcing ", call_name(mine.call)).c_str(), where);
    for (int q = 1; q < n; ++q) {
      if (announced(q).call == announced(0).call) continue;
      detail::fail({"MpiExecutor", detail::concat(backend_.process_name(q), " called ", call_name(announced(q).call),
                                                  " while ", backend_.process_name(0), " called ",
                                                  call_name(announced(0).call)),
                    where, "Call run_step and set_schedule in the same order on every process: each is collective"});
    }
    compare(where);
    for (int q = 0; q < n; ++q) {
      if (announced(q).refused == 0) continue;
      const std::string text = text_of(problem, q, call_text_tag, deadline, where, "announcing its call");
      if (q == me) throw error(problem);
      detail::fail({subject, detail::concat(backend_.process_name(q), " ", refused, ": ", text), where, fix});
    }
  }

  // One stage boundary's size of micro-batch k as a process sees it: Batch::sizes (stage s's
  // output, which check_sizes made stage s + 1's input), or the declared size.
  [[nodiscard]] std::uint64_t boundary_size(const Batch& batch, std::size_t s, std::size_t k, std::size_t m) const {
    return batch.sizes.empty() ? output_floats(stages_[s]) : batch.sizes[s * m + k].output;
  }

  // run_step's announcement: this process's sizes checked (detail::check_sizes), and each
  // boundary's compared between its two processes, which throws on every process naming the
  // first boundary and micro-batch that differ.
  void announce_step(const Batch& batch) {
    const Schedule& schedule = current_.stored();
    const auto m = static_cast<std::size_t>(std::max(schedule.microbatches, 0));
    const std::string problem = attempt([&] { detail::check_sizes(stages_, batch, m); }, "checking Batch::sizes");
    boundary_hashes_.assign(boundaries(), 0);
    // Of the sizes themselves: empty sizes and sizes at the declared capacity move the same.
    for (std::size_t s = 0; problem.empty() && s < boundaries(); ++s) {
      std::uint64_t h = m;
      for (std::size_t k = 0; k < m; ++k) mix(h, boundary_size(batch, s, k, m));
      boundary_hashes_[s] = h;
    }
    Announcement mine;
    mine.call = call_step;
    mine.refused = problem.empty() ? 0 : 1;
    announce(mine, boundary_hashes_, problem, "MpiExecutor::run_step", "refused its batch",
             "Fix that process's Batch::sizes (it prints the same message); no process ran the step",
             [](const std::string&) {});
    const int p = backend_.ranks();
    for (int r = 0; r < backend_.replicas(); ++r) {
      for (std::size_t s = 0; s < boundaries(); ++s) {
        const int a = r * p + schedule.placement[s], b = r * p + schedule.placement[s + 1];
        if (a == b || announced_boundary(a, s) == announced_boundary(b, s)) continue;
        sizes_differ(batch, s, m, a, b);
      }
    }
  }

  // Boundary s's sizes differ between processes a (stage s) and b (stage s + 1): every
  // process sends its m sizes of it, and all throw naming the first micro-batch that differs.
  [[noreturn]] void sizes_differ(const Batch& batch, std::size_t s, std::size_t m, int a, int b) {
    const int n = backend_.job_ranks();
    const std::string where = detail::concat(backend_.process_name(backend_.job_rank()), ", comparing Batch::sizes");
    std::vector<std::uint64_t> mine(m + 1), all((m + 1) * static_cast<std::size_t>(n));
    mine[0] = batch.sizes.empty() ? 0 : 1;
    for (std::size_t k = 0; k < m; ++k) mine[k + 1] = boundary_size(batch, s, k, m);
    const auto deadline = detail::saturating_deadline(std::chrono::steady_clock::now(), backend_.options().watchdog);
    const auto missing = detail::mpi::exchange(backend_.control(), sizes_tag, mine.data(),
                                               mine.size() * sizeof(std::uint64_t), all.data(), -1, deadline, where);
    if (!missing.empty()) lost(missing, "comparing Batch::sizes", where);
    const auto view = [&](int q, std::size_t k) { return all[static_cast<std::size_t>(q) * (m + 1) + k]; };
    std::size_t k = 0;
    while (k < m && view(a, k + 1) == view(b, k + 1)) ++k;
    const auto side = [&](int q) {
      return view(q, 0) == 0 ? std::string(" (the declared size: its Batch::sizes is empty)") : std::string();
    };
    const std::string problem =
        k == m ? detail::concat("stage ", s, "'s sizes on ", backend_.process_name(a), " and stage ", s + 1, "'s on ",
                                backend_.process_name(b), " hash differently")
               : detail::concat("stage ", s, " sends micro-batch ", k, " as ", view(a, k + 1), " floats on ",
                                backend_.process_name(a), side(a), " but stage ", s + 1, " receives ", view(b, k + 1),
                                " on ", backend_.process_name(b), side(b));
    detail::fail({"MpiExecutor::run_step: the processes' Batch::sizes differ", problem,
                  k == m ? detail::concat("stages ", s, " and ", s + 1)
                         : detail::concat("stages ", s, " and ", s + 1, ", micro-batch ", k, " (Batch::sizes[", s * m + k,
                                          "].output and [", (s + 1) * m + k, "].input)"),
                  "Give the two processes of a boundary the same Batch::sizes (with replicas, the same within each replica)"});
  }

  // set_schedule: announced (the same schedule, lowered alike, accepted by every lowering),
  // then taken by every executor, or by none: a process whose executor refuses it makes every
  // other go back to the previous schedule.
  template <class Lowering>
  PoolGrowth replan(const Schedule& given, Lowering&& lowering) {
    check_usable();
    Lowered next;
    std::string problem = attempt([&] { next = lowering(); }, "lowering the schedule");
    Announcement mine;
    mine.call = call_schedule;
    mine.refused = problem.empty() ? 0 : 1;
    mine.schedule = header_of(given, backend_.replicas());
    mine.lowered = problem.empty() ? actions_hash(next.stored()) : 0;
    const char* subject = "MpiExecutor::set_schedule: the processes were given different schedules";
    const char* fix = "Give every process the same schedule (the same family, sizes and actions)";
    announce(mine, {}, problem, "MpiExecutor::set_schedule", "could not lower the schedule",
             "Fix the schedule (that process prints the same message); every process keeps its previous schedule",
             [&](const std::string& where) {
               for (int q = 1; q < backend_.job_ranks(); ++q) {
                 if (same_schedule(announced(q).schedule, announced(0).schedule)) continue;
                 detail::fail({subject,
                               detail::concat(backend_.process_name(q), "'s schedule is ",
                                              schedule_difference(announced(q).schedule, announced(0).schedule,
                                                                  backend_.process_name(0))),
                               where, fix});
               }
             });
    for (int q = 1; q < backend_.job_ranks(); ++q) {
      if (announced(q).lowered == announced(0).lowered) continue;
      detail::fail({"MpiExecutor::set_schedule: the processes lowered the schedule differently",
                    detail::concat("schedule '", given.name, "' was lowered to other transfers on ",
                                   backend_.process_name(q), " than on ", backend_.process_name(0)),
                    detail::concat(backend_.process_name(backend_.job_rank()), ", announcing set_schedule"),
                    "Lower with the same CostModel on every process, or give every process the same LoweredSchedule"});
    }
    PoolGrowth growth;
    problem = attempt([&] { growth = take(next); }, "planning the schedule");
    settle(problem, replan_tag, "MpiExecutor::set_schedule", "taking a new schedule (MpiExecutor::set_schedule)",
           "refused the new schedule",
           "Fix that process's stages or the schedule (it prints the same message); every process keeps its previous "
           "schedule",
           [&] {
             if (problem.empty()) (void)take(current_);
           });
    current_ = std::move(next);
    return growth;
  }

  // Every process sends its header, then (when the headers agree) its view of every stage;
  // each then runs the same comparison on the same data, so all throw together, or none.
  bool compare_setups(MpiBackend& backend, const Schedule& schedule, std::span<const StageFunctions> stages) {
    const int n = backend.job_ranks();
    const SetupHeader mine = header_of(schedule, backend.replicas());
    std::vector<SetupHeader> headers(static_cast<std::size_t>(n));
    gather(&mine, sizeof mine, headers.data(), "the schedules");
    const SetupHeader& first = headers.front();
    for (int q = 1; q < n; ++q) {
      const SetupHeader& h = headers[static_cast<std::size_t>(q)];
      if (h.replicas != first.replicas) {
        mismatch(detail::concat("process ", q, " was given ", h.replicas, " replicas and process 0 ", first.replicas),
                 "MpiOptions::replicas", "Give every process the same replica count");
      }
      if (!same_schedule(h, first)) {
        mismatch(detail::concat("process ", q, "'s schedule is ", schedule_difference(h, first, "process 0")),
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
    settle(attempt(make, "building the executor"), build_tag, "MpiExecutor", "building its MpiExecutor",
           "failed to build its executor",
           "Fix that process's stages or options (it prints the same message); every process stops with it", [] {});
  }

  // What `work` threw, as text (empty: it returned).
  template <class Work>
  [[nodiscard]] static std::string attempt(Work&& work, const char* doing) {
    try {
      work();
    } catch (const std::exception& e) {
      return e.what();
    } catch (...) {
      return detail::concat(doing, " threw an exception that is not a std::exception");
    }
    return {};
  }

  // Agrees with every process on whether each did its part (`problem` empty) or not; when one
  // did not, `undo` runs on every process, then the first failing process throws its own
  // message and every other one names it ("<it> <failed_to>: <its message>"). Tags `tag` and
  // `tag` + 1.
  template <class Undo>
  void settle(const std::string& problem, int tag, const char* subject, const char* doing, const char* failed_to,
              const char* fix, Undo&& undo) {
    const int me = backend_.job_rank();
    const std::string where = detail::concat(backend_.process_name(me), ", ", doing);
    const auto deadline = detail::saturating_deadline(std::chrono::steady_clock::now(), backend_.options().watchdog);
    std::vector<std::int64_t> failing(static_cast<std::size_t>(backend_.job_ranks()), 0);
    const std::int64_t mine = problem.empty() ? 0 : 1;
    auto missing = detail::mpi::exchange(backend_.control(), tag, &mine, sizeof mine, failing.data(), -1, deadline, where);
    if (!missing.empty()) lost(missing, doing, where);
    const auto it = std::find(failing.begin(), failing.end(), 1);
    if (it == failing.end()) return;
    const auto first = static_cast<int>(it - failing.begin());
    const std::string text = text_of(problem, first, tag + 1, deadline, where, doing);
    undo();
    if (first == me) throw error(problem);
    detail::fail({subject, detail::concat(backend_.process_name(first), " ", failed_to, ": ", text), where, fix});
  }

  // Process `first`'s text (its `mine`) on every process, bounded by `deadline`.
  [[nodiscard]] std::string text_of(const std::string& mine, int first, int tag,
                                    std::chrono::steady_clock::time_point deadline, const std::string& where,
                                    const char* doing) {
    std::vector<char> text(max_message, '\0');
    if (first == backend_.job_rank()) std::copy_n(mine.begin(), std::min(mine.size(), max_message - 1), text.begin());
    const auto missing =
        detail::mpi::exchange(backend_.control(), tag, text.data(), max_message, text.data(), first, deadline, where);
    if (!missing.empty()) lost(missing, doing, where);
    return std::string(text.data());
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
  std::span<const StageFunctions> stages_;
  bool compared_ = false;  // compare_setups ran before executor_ was built
  Lowered current_;  // the whole pipeline's schedule, for a set_schedule that must go back to it
  std::vector<std::uint64_t> boundary_hashes_, announcing_, announced_;  // announce()'s, kept between calls
  std::unique_ptr<MpiAllReduce> all_reduce_;  // with replicas; before the executor, whose streams use it
  std::optional<Executor<MpiBackend>> executor_;  // built in the constructor's body: see build()
  std::string broken_;
};

}  // namespace mpi

using mpi::MpiExecutor;
}  // namespace ppsched
