// One rank of a pipeline as one process, transfers over MPI. The streams, events, buffers and
// work of the rank are the CPU backend's (a one-rank CpuCluster: worker threads, CUDA's event
// rules, the race checker); only the transport differs. A transfer group becomes one task on
// its stream that posts every operation of the group at once and completes when all have:
//
// - rendezvous: a send is MPI_Issend, which completes only once the matching receive has
//   been posted, as the execution model (docs/execution-model.md) and NCCL allow;
// - posting order: every transfer between two ranks uses one tag on one communicator, and
//   MPI does not let messages between a pair overtake each other, so sends and receives pair
//   in the order they are posted, as NCCL's do (the tag of a PeerTag is not an MPI tag);
// - checking (MpiOptions::checking): each send is preceded by a two-word header, its count and
//   its PeerTag::match, and the receiver verifies both, so programs that post in different
//   orders are reported by name instead of exchanging the wrong tensors;
// - faults: abort() (the executor calls it when the rank's step fails) sends a note to every
//   peer on a control communicator; every transfer task polls for it, and for its own
//   rank's abort, while it waits, so a failure anywhere ends every rank's pending transfer.
//   A transfer pending longer than MpiOptions::watchdog fails too (a peer that died).
//
// Data x pipeline (MpiOptions::replicas = d): the communicator's N processes are d pipelines
// of p = N / d ranks, laid out replica-major: process k is replica k / p's rank k % p. Transfers
// stay within a replica's pipeline; abort notes and MpiExecutor's agreement span all N
// processes, so a fault on any replica ends the step everywhere; and each rank shares a
// communicator with its d counterparts, for the gradient sum (MpiAllReduce).
//
// One MpiBackend per process. recover() is collective (every process of the communicator
// calls it after a failed step: MpiExecutor does) because it replaces the communicators, so
// that nothing left of a failed step, a cancelled send or a second abort note, reaches the
// next one.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "ppsched/backend/cpu/backend.hpp"
#include "ppsched/backend/cpu/options.hpp"
#include "ppsched/backend/mpi/launch.hpp"
#include "ppsched/backend/mpi/session.hpp"
#include "ppsched/error.hpp"
#include "ppsched/runtime/backend.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace mpi {

struct MpiOptions {
  // The rank's own streams: threaded or deterministic, with or without the race checker
  // (CpuOptions::watchdog bounds their waits).
  CpuOptions streams{};
  // A header before each transfer (count and PeerTag::match) that the receiver verifies.
  bool checking = true;
  // Longest a transfer may stay pending before the rank fails naming it, and longest
  // MpiExecutor waits for every process to report a step's outcome: the bound on how long a
  // process that died (or hangs outside ppsched) can hold the others. A backstop behind the
  // executor's watchdog, which is shorter.
  std::chrono::milliseconds watchdog{60'000};
  // Data-parallel replicas of the pipeline (see above): d must divide the process count.
  int replicas = 1;
};

class MpiBackend;
class MpiExecutor;
class MpiAllReduce;

}  // namespace mpi
namespace detail::mpi {

inline constexpr int header_tag = 1;
inline constexpr int data_tag = 2;
inline constexpr int abort_tag = 3;

// What an aborting process tells its peers: who, and when (for choosing the first error).
struct AbortNote {
  std::int64_t rank = -1;
  std::int64_t time_ns = 0;  // system clock, ns since the epoch
};

[[nodiscard]] inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Transfer {
  bool is_send = false;
  int peer = 0;
  float* data = nullptr;
  std::size_t count = 0;
  PeerTag tag{};
  std::uint64_t header[2] = {};
};

// One posted group: what its task needs, alive until the task has run (or the rank recovered).
struct Group {
  ppsched::mpi::MpiBackend* owner = nullptr;
  std::vector<Transfer> ops;
  std::vector<MPI_Request> requests;
  std::vector<MPI_Status> statuses;
  std::atomic<bool> busy{false};
};

}  // namespace detail::mpi
namespace mpi {

class MpiBackend {
 public:
  using stream = CpuStream;
  using event = CpuEvent;
  using buffer = CpuBuffer;

  // `comm`: the processes of the pipeline, one per rank (MPI_COMM_WORLD for a job of one
  // pipeline). MPI must be initialised (MpiSession). The launcher's environment, when it
  // names a rank, must agree with the communicator's.
  explicit MpiBackend(MPI_Comm comm = MPI_COMM_WORLD, MpiOptions options = {})
      : options_(options), cluster_(1, options.streams), local_(cluster_.rank(0)) {
    if (options_.watchdog.count() <= 0) {
      detail::fail({"MpiBackend", detail::concat("watchdog is ", options_.watchdog.count(), " ms"), "MpiOptions::watchdog",
            "Give a positive timeout, or ppsched::no_timeout (milliseconds::max()) for none"});
    }
    // Held for every MPI call here but the exchanges of agree_on_setup, which take it
    // themselves.
    std::unique_lock<std::mutex> lock(detail::mpi::call_mutex());
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized == 0) {
      detail::fail({"MpiBackend", "MPI is not initialised", "", "Create an MpiSession (or call MPI_Init_thread) first"});
    }
    MPI_Comm_rank(comm, &job_rank_);
    MPI_Comm_size(comm, &job_ranks_);
    // The checks of this process's own setup (its replica count, its launcher's environment)
    // can fail on some processes only: one that threw here while the others went on into the
    // next collective call left the job hung, its message never printed (issue 24). They run
    // before any collective call, and the processes agree on the outcome, within the
    // watchdog: all go on, or all throw, the first failing process's message named on every
    // one, or a process that never arrived (it died during setup) named on the others.
    std::string problem;
    try {
      check_own_setup(comm);
    } catch (const error& e) {
      problem = e.what();
    }
    lock.unlock();
    agree_on_setup(comm, problem);
    lock.lock();
    {
      // Every process arrived just now; bounded still, for one that dies in between.
      MPI_Request request = MPI_REQUEST_NULL;
      detail::mpi::check(MPI_Comm_idup(comm, &job_, &request), "MPI_Comm_idup", "MpiBackend");
      const auto deadline = detail::saturating_deadline(std::chrono::steady_clock::now(), options_.watchdog);
      detail::mpi::Backoff backoff;
      for (int done = 0; done == 0;) {
        detail::mpi::check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test", "MpiBackend");
        if (done != 0) break;
        if (std::chrono::steady_clock::now() >= deadline) {
          detail::mpi::job_lost().store(true);
          detail::fail({"MpiBackend",
                detail::concat("not every process finished MPI_Comm_idup within ", options_.watchdog.count(),
                               " ms (MpiOptions::watchdog), although every one had reached the setup: a process "
                               "died in between"),
                detail::concat("process ", job_rank_),
                "See the launcher's output for the process that ended; this process skips MPI_Finalize"});
        }
        backoff.pause();
      }
    }
    MPI_Comm_set_errhandler(job_, MPI_ERRORS_RETURN);
    // The splits below have no nonblocking form: a process that dies exactly here still holds
    // the others until the launcher ends the job.
    const int p = job_ranks_ / options_.replicas;
    replica_ = job_rank_ / p;
    detail::mpi::check(MPI_Comm_split(job_, replica_, job_rank_, &base_), "MPI_Comm_split", "MpiBackend");
    detail::mpi::check(MPI_Comm_split(job_, job_rank_ % p, job_rank_, &replica_base_), "MPI_Comm_split", "MpiBackend");
    MPI_Comm_set_errhandler(base_, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(replica_base_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(base_, &rank_);
    MPI_Comm_size(base_, &ranks_);
    MPI_Comm node;
    detail::mpi::check(MPI_Comm_split_type(job_, MPI_COMM_TYPE_SHARED, job_rank_, MPI_INFO_NULL, &node),
                       "MPI_Comm_split_type", "MpiBackend");
    MPI_Comm_rank(node, &local_rank_);
    MPI_Comm_free(&node);
    open_locked();
  }
  MpiBackend(const MpiBackend&) = delete;
  MpiBackend& operator=(const MpiBackend&) = delete;
  MpiBackend(MpiBackend&&) = delete;
  MpiBackend& operator=(MpiBackend&&) = delete;
  ~MpiBackend() {
    const std::lock_guard<std::mutex> lock(detail::mpi::call_mutex());
    close_locked();
    MPI_Comm_free(&base_);
    MPI_Comm_free(&replica_base_);
    MPI_Comm_free(&job_);
  }

  // This process's rank in its pipeline, and the pipeline's rank count (p).
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int ranks() const noexcept { return ranks_; }
  // Its replica, and the replica count (d); 0 and 1 without data parallelism.
  [[nodiscard]] int replica() const noexcept { return replica_; }
  [[nodiscard]] int replicas() const noexcept { return options_.replicas; }
  // This process's rank among the processes of its node (for choosing a GPU).
  [[nodiscard]] int local_rank() const noexcept { return local_rank_; }
  [[nodiscard]] const MpiOptions& options() const noexcept { return options_; }

  // ------------------------------------------------------------------ the rank's streams
  [[nodiscard]] CpuStream create_stream() { return local_.create_stream(); }
  [[nodiscard]] CpuEvent create_event() { return local_.create_event(); }
  void record(CpuEvent& e, CpuStream& s) { local_.record(e, s); }
  void wait(CpuStream& s, const CpuEvent& e) { local_.wait(s, e); }
  [[nodiscard]] bool query(const CpuEvent& e) { return local_.query(e); }
  [[nodiscard]] WaitResult synchronize(const CpuEvent& e, const HostWait& w) { return local_.synchronize(e, w); }
  [[nodiscard]] WaitResult synchronize(CpuStream& s, const HostWait& w) { return local_.synchronize(s, w); }
  [[nodiscard]] double elapsed_ms(const CpuEvent& a, const CpuEvent& b) { return local_.elapsed_ms(a, b); }
  [[nodiscard]] std::chrono::steady_clock::time_point event_time(const CpuEvent& e) { return local_.event_time(e); }
  [[nodiscard]] CpuBuffer allocate(std::size_t count) { return local_.allocate(count); }
  [[nodiscard]] std::span<float> span(const CpuBuffer& b) const noexcept { return b.span(); }
  void zero(CpuStream& s, CpuBuffer& b) { local_.zero(s, b); }
  void accumulate(CpuStream& s, CpuBuffer& to, const CpuBuffer& from) { local_.accumulate(s, to, from); }
  void launch(CpuStream& s, HostTask task, std::span<const BufferUse<CpuBuffer>> uses = {}) {
    local_.launch(s, task, uses);
  }

  // ------------------------------------------------------------------ transfers
  void group_start() {
    if (depth_++ == 0) {
      staged_.clear();
      staged_uses_.clear();
      group_stream_ = nullptr;
    }
  }

  void group_end() {
    if (depth_ == 0) {
      detail::fail({"MPI backend", "group_end without a matching group_start", detail::concat("rank ", rank_),
            "Call group_start() before posting the group's sends and receives"});
    }
    if (--depth_ > 0 || staged_.empty()) return;
    post();
  }

  void send(const CpuBuffer& b, std::size_t count, int peer, CpuStream& s, PeerTag tag = {}) {
    stage(true, const_cast<CpuBuffer&>(b), count, peer, s, tag);
  }
  void recv(CpuBuffer& b, std::size_t count, int peer, CpuStream& s, PeerTag tag = {}) {
    stage(false, b, count, peer, s, tag);
  }

  // Fails the rank (its queued work is dropped, its pending transfers end) and, unless a
  // peer's abort is what ended this rank's step, tells every peer to end theirs.
  void abort(std::string_view reason) {
    if (!aborted_.exchange(true)) {
      const std::lock_guard<std::mutex> lock(detail::mpi::call_mutex());
      poll_control_locked();
      abort_time_ns_ = detail::mpi::now_ns();
      if (peer_note_.rank < 0) {
        note_out_ = {job_rank_, abort_time_ns_};
        for (int peer = 0; peer < job_ranks_; ++peer) {
          if (peer == job_rank_) continue;
          MPI_Request r = MPI_REQUEST_NULL;
          // A peer that died cannot take it; the note is best effort, the watchdog the bound.
          if (MPI_Isend(&note_out_, 2, MPI_INT64_T, peer, detail::mpi::abort_tag, control_, &r) == MPI_SUCCESS) {
            MPI_Request_free(&r);
          }
        }
      }
    }
    local_.abort(reason);
  }

  // Collective: every process of the communicator calls it after a failed step, once its
  // streams are idle. New communicators replace the old ones (whatever a failed step left in
  // them never reaches the next), and the sticky error is cleared.
  void recover() {
    local_.recover();
    const std::lock_guard<std::mutex> lock(detail::mpi::call_mutex());
    close_locked();
    for (auto& g : groups_) g.busy.store(false, std::memory_order_release);
    open_locked();
    aborted_.store(false);
    peer_note_ = {};
    abort_time_ns_ = 0;
    depth_ = 0;
  }

  // Floats this rank's completed transfers moved to and from its peers (as CpuBackend's):
  // with Batch::sizes, each micro-batch's own size.
  [[nodiscard]] std::size_t floats_sent() const noexcept { return floats_sent_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::size_t floats_received() const noexcept {
    return floats_received_.load(std::memory_order_relaxed);
  }

 private:
  // Throws when this process's own setup is wrong: a replica count that does not divide the
  // job, or (on MPI_COMM_WORLD) a launcher environment that names another place. Local only.
  void check_own_setup(MPI_Comm comm) const {
    if (options_.replicas < 1 || job_ranks_ % options_.replicas != 0) {
      detail::fail({"MpiBackend", detail::concat(options_.replicas, " replicas of a ", job_ranks_, "-process job"),
            "MpiOptions::replicas", "Give a replica count that divides the number of processes (mpirun -np d x p)"});
    }
    int same = MPI_UNEQUAL;
    MPI_Comm_compare(comm, MPI_COMM_WORLD, &same);
    if (same == MPI_IDENT) {
      const ProcessRank env = process_rank_from_env();
      if (env.source != "none" && (env.rank != job_rank_ || env.world_size != job_ranks_)) {
        detail::fail({"MpiBackend",
              detail::concat("the environment (", env.source, ") says rank ", env.rank, " of ", env.world_size,
                             " but MPI_COMM_WORLD says rank ", job_rank_, " of ", job_ranks_),
              "process_rank_from_env()", "Launch every process with one launcher (mpirun -np N, or srun)"});
      }
    }
  }

  // Every process learns, within the watchdog, whether any failed check_own_setup: one flag
  // from each to each (point-to-point on `comm`, tags 0x5070 and 0x5071, so that a process
  // that never arrives is named) and, on failure, the first failing process's message from
  // it. Then every process throws: the failing ones their own error, the others the first
  // one's, naming its process.
  void agree_on_setup(MPI_Comm comm, const std::string& problem) {
    constexpr int flag_tag = 0x5070, text_tag = 0x5071;
    constexpr std::size_t max_text = 4096;
    const std::string where = detail::concat("process ", job_rank_, ", MpiBackend's setup");
    const auto deadline = detail::saturating_deadline(std::chrono::steady_clock::now(), options_.watchdog);
    const int mine = problem.empty() ? 0 : 1;
    std::vector<int> failing(static_cast<std::size_t>(job_ranks_), 0);
    lost_if_missing(detail::mpi::exchange(comm, flag_tag, &mine, sizeof mine, failing.data(), -1, deadline, where),
                    "never reached MpiBackend's setup", where);
    const auto first_it = std::find(failing.begin(), failing.end(), 1);
    if (first_it == failing.end()) return;
    const auto first = static_cast<int>(first_it - failing.begin());
    std::vector<char> text(max_text, '\0');
    if (first == job_rank_) std::copy_n(problem.begin(), std::min(problem.size(), max_text - 1), text.begin());
    lost_if_missing(detail::mpi::exchange(comm, text_tag, text.data(), max_text, text.data(), first, deadline, where),
                    "failed its setup but its message never arrived", where);
    if (!problem.empty()) throw error(problem);
    detail::fail({"MpiBackend", detail::concat("process ", first, " of the job failed its setup: ", text.data()),
          detail::concat("process ", job_rank_),
          "Fix that process's setup (it prints the same message); every process of the job stops with it"});
  }

  // Throws, marking the job lost (MpiSession then skips MPI_Finalize), when `missing` names
  // processes that did not take part in an exchange within the watchdog.
  void lost_if_missing(const std::vector<int>& missing, const char* what, const std::string& where) const {
    if (missing.empty()) return;
    detail::mpi::job_lost().store(true);
    std::string names;
    for (const int q : missing) names += detail::concat(names.empty() ? "" : ", ", "process ", q);
    detail::fail({"MpiBackend",
          detail::concat(names, missing.size() == 1 ? " " : " each ", what, " within ", options_.watchdog.count(),
                         " ms (MpiOptions::watchdog): it exited, was killed, or hangs"),
          where,
          "See the launcher's output for that process. This process skips MPI_Finalize, which would wait for it"});
  }

  friend class MpiExecutor;
  friend class MpiAllReduce;

  // A process of the job by its rank in the job, as errors name it. With replicas a bare
  // "rank N" could be the pipeline rank or the process: say both (issue 24).
  [[nodiscard]] std::string process_name(std::int64_t job_rank) const {
    if (options_.replicas == 1) return detail::concat("rank ", job_rank);
    return detail::concat("pipeline rank ", job_rank % ranks_, " of replica ", job_rank / ranks_, " (process ", job_rank,
                          ")");
  }
  [[nodiscard]] int job_rank() const noexcept { return job_rank_; }
  [[nodiscard]] int job_ranks() const noexcept { return job_ranks_; }
  // The communicator of this rank's d counterparts (replica order), for the gradient sum.
  [[nodiscard]] MPI_Comm replica_comm() const noexcept { return reduce_; }
  [[nodiscard]] bool aborted() const noexcept { return aborted_.load(); }

  // The communicator of the step's agreement (MpiExecutor): not the one transfers use.
  [[nodiscard]] MPI_Comm control() const noexcept { return control_; }
  // For MpiExecutor, after a step: the first peer's abort note that arrived before this rank
  // aborted (its failure is then a consequence; rank -1: none), and when this rank aborted
  // (ns since the epoch; 0: never).
  [[nodiscard]] detail::mpi::AbortNote peer_abort() {
    const std::lock_guard<std::mutex> lock(detail::mpi::call_mutex());
    poll_control_locked();
    return peer_note_;
  }
  [[nodiscard]] std::int64_t abort_time_ns() const noexcept { return abort_time_ns_; }

  void open_locked() {
    detail::mpi::check(MPI_Comm_dup(base_, &data_), "MPI_Comm_dup", "MpiBackend");
    detail::mpi::check(MPI_Comm_dup(job_, &control_), "MPI_Comm_dup", "MpiBackend");
    detail::mpi::check(MPI_Comm_dup(replica_base_, &reduce_), "MPI_Comm_dup", "MpiBackend");
    MPI_Comm_set_errhandler(data_, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(control_, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(reduce_, MPI_ERRORS_RETURN);
    post_control_locked();
  }

  void close_locked() {
    if (control_request_ != MPI_REQUEST_NULL) {
      MPI_Cancel(&control_request_);
      MPI_Request_free(&control_request_);
    }
    if (data_ != MPI_COMM_NULL) MPI_Comm_free(&data_);
    if (control_ != MPI_COMM_NULL) MPI_Comm_free(&control_);
    if (reduce_ != MPI_COMM_NULL) MPI_Comm_free(&reduce_);
  }

  void post_control_locked() {
    MPI_Irecv(&note_in_, 2, MPI_INT64_T, MPI_ANY_SOURCE, detail::mpi::abort_tag, control_, &control_request_);
  }

  // Under the MPI lock: takes any abort note that has arrived; the first one counts.
  void poll_control_locked() {
    for (;;) {
      if (control_request_ == MPI_REQUEST_NULL) return;
      int arrived = 0;
      if (MPI_Test(&control_request_, &arrived, MPI_STATUS_IGNORE) != MPI_SUCCESS || arrived == 0) return;
      if (peer_note_.rank < 0 && abort_time_ns_ == 0) peer_note_ = note_in_;
      post_control_locked();
    }
  }

  void stage(bool is_send, CpuBuffer& b, std::size_t count, int peer, CpuStream& s, PeerTag tag) {
    const char* what = is_send ? "send" : "recv";
    const std::string where =
        detail::concat("rank ", rank_, tag.label.empty() ? "" : detail::concat(", '", tag.label, "'"));
    if (peer < 0 || peer >= ranks_ || peer == rank_) {
      detail::fail({"MPI backend",
            detail::concat(what, ": peer ", peer, " is not another process of this ", ranks_, "-process communicator"),
            where, detail::concat("Use a peer in 0..", ranks_ - 1, " other than ", rank_)});
    }
    if (count > b.size()) {
      detail::fail({"MPI backend", detail::concat(what, ": ", count, " floats do not fit buffer #", b.id(), " of ", b.size()),
            where, "Transfer at most the buffer's size"});
    }
    if (group_stream_ != nullptr && group_stream_ != &s) {
      detail::fail({"MPI backend", "a transfer group spans two streams", where, "Post every operation of a group on one stream"});
    }
    group_stream_ = &s;
    staged_.push_back({is_send, peer, b.span().data(), count, tag, {}});
    staged_uses_.push_back({&b, is_send ? Access::read : Access::write});
    if (depth_ == 0) post();
  }

  // The staged operations become one task on their stream.
  void post() {
    detail::mpi::Group& g = free_group();
    g.ops.assign(staged_.begin(), staged_.end());
    g.requests.assign(g.ops.size() * (options_.checking ? 2 : 1), MPI_REQUEST_NULL);
    g.statuses.resize(g.requests.size());
    g.busy.store(true, std::memory_order_release);
    g.owner = this;
    CpuStream& s = *group_stream_;
    staged_.clear();
    group_stream_ = nullptr;
    try {
      local_.launch(s, {&MpiBackend::run, &g, g.ops.front().tag.label}, staged_uses_);
    } catch (...) {
      g.busy.store(false, std::memory_order_release);
      staged_uses_.clear();
      throw;
    }
    staged_uses_.clear();
  }

  [[nodiscard]] detail::mpi::Group& free_group() {
    for (std::size_t i = 0; i < groups_.size(); ++i) {
      auto& g = groups_[(next_group_ + i) % groups_.size()];
      if (!g.busy.load(std::memory_order_acquire)) {
        next_group_ = (next_group_ + i + 1) % groups_.size();
        return g;
      }
    }
    groups_.emplace_back();
    groups_.back().ops.reserve(4);
    next_group_ = 0;
    return groups_.back();
  }

  // The task of one group, on its stream's worker: post everything, then poll until all
  // operations completed, the rank or a peer aborted, or the watchdog passed.
  static void run(void* context) {
    auto& g = *static_cast<detail::mpi::Group*>(context);
    struct Release {
      detail::mpi::Group& g;
      ~Release() { g.busy.store(false, std::memory_order_release); }
    } release{g};
    g.owner->transfer(g);
  }

  void transfer(detail::mpi::Group& g) {
    using namespace detail::mpi;
    using Clock = std::chrono::steady_clock;
    const std::string where = detail::concat("rank ", rank_, ", transfer group '", g.ops.front().tag.label, "'");
    {
      const std::lock_guard<std::mutex> lock(call_mutex());
      std::size_t k = 0;
      // A post that fails leaves nothing of the group behind to complete into its buffers.
      struct Undo {
        Group& group;
        bool armed = true;
        ~Undo() {
          if (armed) cancel_pending_locked(group);
        }
      } undo{g};
      for (Transfer& op : g.ops) {
        const int count = static_cast<int>(op.count);
        if (options_.checking) {
          if (op.is_send) {
            op.header[0] = op.count;
            op.header[1] = op.tag.match;
            check(MPI_Isend(op.header, 2, MPI_UINT64_T, op.peer, header_tag, data_, &g.requests[k++]), "MPI_Isend",
                  where);
          } else {
            check(MPI_Irecv(op.header, 2, MPI_UINT64_T, op.peer, header_tag, data_, &g.requests[k++]), "MPI_Irecv",
                  where);
          }
        }
        if (op.is_send) {
          check(MPI_Issend(op.data, count, MPI_FLOAT, op.peer, data_tag, data_, &g.requests[k++]), "MPI_Issend", where);
        } else {
          check(MPI_Irecv(op.data, count, MPI_FLOAT, op.peer, data_tag, data_, &g.requests[k++]), "MPI_Irecv", where);
        }
      }
      undo.armed = false;
    }
    const auto deadline = detail::saturating_deadline(Clock::now(), options_.watchdog);
    detail::mpi::Backoff backoff;
    bool in_status = false;  // MPI fills the statuses' error fields only then
    for (;;) {
      {
        const std::lock_guard<std::mutex> lock(call_mutex());
        int done = 0;
        const int code = MPI_Testall(static_cast<int>(g.requests.size()), g.requests.data(), &done, g.statuses.data());
        if (code != MPI_SUCCESS && code != MPI_ERR_IN_STATUS) {
          cancel_pending_locked(g);
          check(code, "MPI_Testall", where);
        }
        if (done != 0) {
          in_status = code == MPI_ERR_IN_STATUS;
          break;
        }
        poll_control_locked();
        const bool peer = peer_note_.rank >= 0;
        if (peer || aborted_.load()) {
          cancel_pending_locked(g);
          std::string pending;
          for (const Transfer& op : g.ops) pending += detail::concat(pending.empty() ? "" : "; ", describe(op));
          detail::fail({detail::concat("rank ", rank_),
                peer ? detail::concat("the step was ended by ", process_name(peer_note_.rank), ", which failed")
                     : std::string("the step was aborted"),
                where, detail::concat("See ", process_name(peer ? peer_note_.rank : job_rank_), "'s error (", pending, ")")});
        }
        if (Clock::now() >= deadline) {
          cancel_pending_locked(g);
          std::string pending;
          for (const Transfer& op : g.ops) pending += detail::concat(pending.empty() ? "" : "; ", describe(op));
          detail::fail({detail::concat("rank ", rank_),
                detail::concat("a transfer stayed pending for ", options_.watchdog.count(), " ms (", pending,
                               "): the peer never posted its side, or its process died"),
                where, "See the peer's output; raise MpiOptions::watchdog if transfers are this slow"});
        }
      }
      backoff.pause();
    }
    // Every operation completed: check what the headers and statuses say.
    if (in_status) {
      for (std::size_t i = 0; i < g.ops.size(); ++i) {
        const MPI_Status& st = g.statuses[options_.checking ? 2 * i + 1 : i];
        if (g.ops[i].is_send && st.MPI_ERROR != MPI_SUCCESS) check(st.MPI_ERROR, "MPI_Issend", where);
      }
    }
    for (std::size_t i = 0; i < g.ops.size(); ++i) {
      const Transfer& op = g.ops[i];
      if (op.is_send) continue;
      const MPI_Status& data_status = g.statuses[options_.checking ? 2 * i + 1 : i];
      if (options_.checking) {
        const bool counts_differ = op.header[0] != op.count;
        const bool tags_differ = op.header[1] != 0 && op.tag.match != 0 && op.header[1] != op.tag.match;
        if (counts_differ || tags_differ) {
          detail::fail({"MPI backend",
                detail::concat(describe(op), " was paired with rank ", op.peer, "'s send of ", op.header[0],
                               " floats", counts_differ ? ": the counts differ" : ": they belong to different transfers",
                               ". Sends and receives between two ranks pair in the order they are posted, as NCCL's do"),
                detail::concat("ranks ", op.peer, " -> ", rank_),
                "Post the transfers between each pair of ranks in the same order on both sides, with equal counts"});
        }
      }
      if (in_status && data_status.MPI_ERROR != MPI_SUCCESS) check(data_status.MPI_ERROR, "MPI_Irecv", where);
      int received = 0;
      MPI_Get_count(&data_status, MPI_FLOAT, &received);
      if (static_cast<std::size_t>(received) != op.count) {
        detail::fail({"MPI backend",
              detail::concat(describe(op), " received ", received, " floats: the sender's count differs"),
              detail::concat("ranks ", op.peer, " -> ", rank_),
              "Post the transfers between each pair of ranks in the same order on both sides, with equal counts"});
      }
    }
    for (const detail::mpi::Transfer& op : g.ops) {
      (op.is_send ? floats_sent_ : floats_received_).fetch_add(op.count, std::memory_order_relaxed);
    }
  }

  [[nodiscard]] std::string describe(const detail::mpi::Transfer& op) const {
    return detail::concat(op.is_send ? "send" : "receive", op.tag.label.empty() ? "" : " '", op.tag.label,
                          op.tag.label.empty() ? "" : "'", op.is_send ? " to rank " : " from rank ", op.peer, " (",
                          op.count, " floats)");
  }

  // Under the MPI lock: cancels what is still pending, so nothing of this group completes
  // into its buffers later.
  static void cancel_pending_locked(detail::mpi::Group& g) {
    for (auto& r : g.requests) {
      if (r == MPI_REQUEST_NULL) continue;
      MPI_Cancel(&r);
      MPI_Request_free(&r);
    }
  }

  MpiOptions options_;
  CpuCluster cluster_;
  CpuBackend& local_;
  MPI_Comm job_ = MPI_COMM_NULL;           // every process: aborts and the step's agreement
  MPI_Comm base_ = MPI_COMM_NULL;          // this replica's pipeline: transfers
  MPI_Comm replica_base_ = MPI_COMM_NULL;  // this rank's d counterparts: gradient sums
  MPI_Comm data_ = MPI_COMM_NULL;
  MPI_Comm control_ = MPI_COMM_NULL;
  MPI_Comm reduce_ = MPI_COMM_NULL;
  int rank_ = 0;
  int ranks_ = 1;
  int job_rank_ = 0;
  int job_ranks_ = 1;
  int replica_ = 0;
  int local_rank_ = 0;

  // Host side of a group (one host thread issues a rank's work).
  int depth_ = 0;
  CpuStream* group_stream_ = nullptr;
  std::vector<detail::mpi::Transfer> staged_;
  std::vector<BufferUse<CpuBuffer>> staged_uses_;
  std::deque<detail::mpi::Group> groups_;  // slots never move
  std::size_t next_group_ = 0;

  // Faults. The notes and the control request are guarded by the MPI lock.
  std::atomic<std::size_t> floats_sent_{0};
  std::atomic<std::size_t> floats_received_{0};
  std::atomic<bool> aborted_{false};
  std::int64_t abort_time_ns_ = 0;
  detail::mpi::AbortNote peer_note_{};
  detail::mpi::AbortNote note_in_{};
  detail::mpi::AbortNote note_out_{};
  MPI_Request control_request_ = MPI_REQUEST_NULL;
};

}  // namespace mpi

// Spelled at the top beside CpuBackend and CudaBackend; the rest of the MPI layer is ppsched::mpi::.
using mpi::MpiBackend;
using mpi::MpiOptions;
}  // namespace ppsched
