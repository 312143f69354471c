// Validation of a schedule, as a proof rather than a lint. `validate` checks everything a
// user writing (or loading) a schedule can get wrong — placement, ranges, every (stage,
// micro-batch) computed exactly once per kind, the order of F / B / BI / BW, the
// communication of a lowered schedule (one send and one receive per transfer, on the right
// ranks, posted in an order NCCL can match, contiguous groups) — and then executes the
// programs abstractly under the rendezvous rules of docs/execution-model.md. Because every
// rule of that model is an "all of these are done" condition, the set of actions that can
// ever complete does not depend on timing, so one abstract run decides whether the
// schedule can deadlock on any hardware; the run with communication on the compute stream
// decides it for a separate comm stream too (that setting only removes waits). A deadlock
// is reported with each stuck action and what it waits for. The report also carries peak
// activation memory per rank.
//
// The abstract-execution engine in `detail` is shared with `lower` (which orders the
// communication by an idealised run) and with the simulator (which runs it with costs).
// A schedule exactly as `lower` wrote it on this thread is not proven twice: `lower`'s
// construction is the proof (detail::LoweringProof says how this is kept safe).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/schedule/schedule.hpp"

namespace ppsched {

// Where communication runs on each rank (docs/execution-model.md, "Streams").
enum class StreamMode : std::uint8_t {
  separate_comm_stream,    // a compute stream and a comm stream per rank (overlap)
  comm_on_compute_stream,  // one in-order stream per rank runs everything
};

[[nodiscard]] constexpr std::string_view stream_mode_name(StreamMode m) noexcept {
  return m == StreamMode::separate_comm_stream ? "communication on its own stream"
                                               : "communication on the compute stream";
}

// How activation memory is counted. A stored activation (F done, its B or BI not yet) is
// 1 M_B; what BI leaves for BW is `weight_fraction` M_B. Bytes use `activation_bytes[stage]`
// as the size of one M_B of that stage (empty: bytes are not reported, i.e. 0).
struct MemoryModel {
  double weight_fraction = 0.5;
  std::vector<double> activation_bytes;
};

struct ValidateOptions {
  MemoryModel memory{};
  // Runs the abstract execution (deadlock proof) when the static checks pass.
  bool check_deadlock = true;
  // Hopeless inputs (a program of the wrong schedule) can have a problem per action; the
  // report lists this many and counts the rest in `unlisted_problems`.
  std::size_t max_problems = 1000;
};

// Each kind of mistake has its own kind, so tools and tests can tell them apart; the
// message says the same in words, with the place and the fix.
enum class ProblemKind : std::uint8_t {
  shape,                    // ranks, micro-batches, placement or program count unusable
  stage_out_of_range,
  microbatch_out_of_range,
  wrong_rank,               // compute action on a rank its stage is not placed on
  wrong_peer,               // communication action on a rank its stage is not placed on
  pair_size,                // a compute group (overlapped pair) of one action, or of three or more
  pair_ops,                 // a compute group that is not one F and one B or BI
  pair_dependent,           // the two actions of a pair are of one micro-batch: one needs the other
  group_mixed,              // one group id on compute and communication actions
  split_flag,               // BI / BW used while Schedule::split_backward is false
  duplicate,                // an action appears more than once
  missing_compute,          // an F, or a backward, of some (stage, micro-batch) is absent
  mixed_backward,           // B and BI/BW both present for one (stage, micro-batch)
  backward_before_forward,  // B or BI issued before its F on the same rank
  weight_before_input,      // BW issued before its BI
  local_order,              // stages s, s+1 on one rank used out of dependency order
  no_peer,                  // SEND_F on the last stage, RECV_F on stage 0, ...
  needless_comm,            // communication across a boundary inside one rank
  missing_send,
  missing_recv,
  missing_transfer,         // lowered schedule without send and receive for a transfer
  recv_after_consumer,      // a receive issued after the compute that needs it
  send_before_producer,     // a send issued before the compute that produces it
  group_not_contiguous,
  pair_order,               // two ranks post their messages to each other in different orders
  deadlock,
};

[[nodiscard]] constexpr std::string_view problem_kind_name(ProblemKind k) noexcept {
  switch (k) {
    case ProblemKind::shape: return "shape";
    case ProblemKind::stage_out_of_range: return "stage out of range";
    case ProblemKind::microbatch_out_of_range: return "micro-batch out of range";
    case ProblemKind::wrong_rank: return "wrong rank";
    case ProblemKind::wrong_peer: return "wrong peer";
    case ProblemKind::pair_size: return "pair size";
    case ProblemKind::pair_ops: return "pair operations";
    case ProblemKind::pair_dependent: return "pair dependent";
    case ProblemKind::group_mixed: return "group mixed";
    case ProblemKind::split_flag: return "split flag";
    case ProblemKind::duplicate: return "duplicate";
    case ProblemKind::missing_compute: return "missing compute";
    case ProblemKind::mixed_backward: return "mixed backward";
    case ProblemKind::backward_before_forward: return "backward before forward";
    case ProblemKind::weight_before_input: return "weight before input";
    case ProblemKind::local_order: return "local order";
    case ProblemKind::no_peer: return "no peer";
    case ProblemKind::needless_comm: return "needless communication";
    case ProblemKind::missing_send: return "missing send";
    case ProblemKind::missing_recv: return "missing receive";
    case ProblemKind::missing_transfer: return "missing transfer";
    case ProblemKind::recv_after_consumer: return "receive after consumer";
    case ProblemKind::send_before_producer: return "send before producer";
    case ProblemKind::group_not_contiguous: return "group not contiguous";
    case ProblemKind::pair_order: return "pair order";
    case ProblemKind::deadlock: return "deadlock";
  }
  return "?";
}

struct Problem {
  ProblemKind kind = ProblemKind::shape;
  std::int32_t rank = -1;      // -1 when the problem is not about one rank
  std::int32_t position = -1;  // index in the rank's program, -1 when none
  Action action{};             // meaningful when position >= 0
  std::string message;         // what, where, and how to fix it
};

struct RankMemory {
  double peak_activations = 0.0;  // in M_B units (BI..BW counts the weight fraction)
  double peak_bytes = 0.0;        // with MemoryModel::activation_bytes; 0 without
  std::int32_t peak_in_flight = 0;  // micro-batches whose F is done and B/BI is not
};

struct ValidationReport {
  std::string schedule_name;
  bool lowered = false;           // the schedule contains communication
  bool deadlock_checked = false;  // the abstract execution ran (static checks passed)
  std::vector<Problem> problems;
  std::size_t unlisted_problems = 0;
  std::vector<RankMemory> memory;                // per rank
  std::vector<std::int32_t> stage_peak_in_flight;  // per stage

  [[nodiscard]] bool ok() const noexcept { return problems.empty() && unlisted_problems == 0; }
  [[nodiscard]] bool has(ProblemKind k) const noexcept {
    return std::any_of(problems.begin(), problems.end(), [k](const Problem& p) { return p.kind == k; });
  }
};

namespace detail {

inline constexpr std::int32_t no_action = -1;

// Makes vector::resize leave trivial elements uninitialised: arrays that are written in
// full before they are read need no clearing pass.
template <class T>
struct uninitialised_allocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = uninitialised_allocator<U>;
  };
  uninitialised_allocator() = default;
  template <class U>
  uninitialised_allocator(const uninitialised_allocator<U>&) noexcept {}  // NOLINT: rebinding copy
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// A vector whose storage comes from, and goes back to, a small per-thread pool. Lowering,
// validation and simulation each need arrays of tens of megabytes for a large schedule;
// fresh ones cost the kernel a page fault per 4 KiB (about 40 ms per 80 MiB on the
// development VM, a quarter of a run), while a buffer of the previous call is already
// mapped. The pool keeps at most `pool_slots` buffers per element type on each thread,
// none larger than `pool_max_bytes`; it is released when the thread ends.
inline constexpr std::size_t pool_slots = 8;
inline constexpr std::size_t pool_max_bytes = std::size_t{512} << 20;

template <class T, class Alloc = std::allocator<T>>
class pooled_vector : public std::vector<T, Alloc> {
  using base = std::vector<T, Alloc>;

 public:
  pooled_vector() : base(take()) {}
  pooled_vector(const pooled_vector& other) : base(other) {}
  pooled_vector(pooled_vector&& other) noexcept : base(std::move(static_cast<base&>(other))) {}
  pooled_vector& operator=(const pooled_vector& other) {
    base::operator=(other);
    return *this;
  }
  pooled_vector& operator=(pooled_vector&& other) noexcept {
    base::operator=(std::move(static_cast<base&>(other)));
    return *this;
  }
  ~pooled_vector() { give_back(static_cast<base&>(*this)); }

 private:
  struct Pool {
    std::vector<base> free;
    ~Pool() { closed() = true; }
  };
  // Trivially destructible, so still readable while other thread-locals are destroyed.
  static bool& closed() noexcept {
    thread_local bool c = false;
    return c;
  }
  static Pool& pool() {
    thread_local Pool p;
    return p;
  }
  static base take() noexcept {
    if (closed()) return base{};
    Pool& p = pool();
    if (p.free.empty()) return base{};
    base v = std::move(p.free.back());
    p.free.pop_back();
    return v;
  }
  static void give_back(base& v) noexcept {
    if (v.capacity() == 0 || v.capacity() > pool_max_bytes / sizeof(T) || closed()) return;
    Pool& p = pool();
    if (p.free.size() >= pool_slots) return;
    v.clear();
    try {
      p.free.push_back(std::move(v));
    } catch (...) {  // no room to remember it: the buffer is simply freed
    }
  }
};

// An action's links to others, by index (no_action when none). `same_stage` is its
// predecessor on its own stage (F for B/BI, BI for BW, the producer for a send); `input` the
// neighbouring stage's contribution (F(s-1) or RECV_F for F, B/BI(s+1) or RECV_B for B/BI);
// `peer` the matching send or receive.
struct Links {
  std::int32_t same_stage = -1;
  std::int32_t input = -1;
  std::int32_t peer = -1;
};

// A schedule flattened into one array of actions (rank by rank, program order), with an
// identity table (op, stage, micro-batch) -> index. Everything downstream works on integers.
struct FlatSchedule {
  std::int32_t ranks = 0;
  std::int32_t stages = 0;
  std::int32_t microbatches = 0;
  bool lowered = false;       // has communication actions
  bool has_backward = false;  // any B / BI / BW (false: forward-only)
  bool has_pairs = false;     // any compute action with a group (an overlapped pair)
  std::size_t compute_count = 0;
  std::vector<std::int32_t> placement;
  std::vector<const Action*> rank_actions;  // each rank's program (the schedule's own storage)
  std::vector<std::vector<Action>> kept;    // programs without communication, when it is skipped
  pooled_vector<std::int32_t, uninitialised_allocator<std::int32_t>> owner;  // rank of each action
  std::vector<std::int32_t> rank_begin;  // ranks + 1 offsets into actions
  pooled_vector<std::int32_t, uninitialised_allocator<std::int32_t>> slots;  // identity table, no_action when absent

  // The eight actions of one (stage, micro-batch) share a cache line: lookups come in
  // (stage, micro-batch) neighbourhoods.
  [[nodiscard]] std::size_t slot_index(Op op, std::int32_t stage, std::int32_t mb) const noexcept {
    return ((static_cast<std::size_t>(stage) * static_cast<std::size_t>(microbatches) + static_cast<std::size_t>(mb))
            << 3) +
           static_cast<std::size_t>(op);
  }
  [[nodiscard]] std::int32_t find(Op op, std::int32_t stage, std::int32_t mb) const noexcept {
    return slots[slot_index(op, stage, mb)];
  }
  // The action that computes the input gradient of (stage, mb): its B, or else its BI.
  [[nodiscard]] std::int32_t backward_input(std::int32_t stage, std::int32_t mb) const noexcept {
    const std::int32_t b = find(Op::B, stage, mb);
    return b != no_action ? b : find(Op::BI, stage, mb);
  }
  [[nodiscard]] std::int32_t rank_of(std::int32_t stage) const noexcept {
    return placement[static_cast<std::size_t>(stage)];
  }
  [[nodiscard]] std::int32_t position(std::int32_t index) const noexcept {
    return index - rank_begin[static_cast<std::size_t>(owner[static_cast<std::size_t>(index)])];
  }
  [[nodiscard]] const Action& at(std::int32_t index) const noexcept {
    const auto r = static_cast<std::size_t>(owner[static_cast<std::size_t>(index)]);
    return rank_actions[r][index - rank_begin[r]];
  }
  [[nodiscard]] std::size_t size() const noexcept { return owner.size(); }

  // The links of action i. Meaningful once the static checks passed.
  [[nodiscard]] Links links(std::int32_t i) const noexcept { return links(at(i)); }
#if defined(__GNUC__)
  [[gnu::always_inline]]  // on every action of every stream build: let each caller keep what it needs
#endif
  [[nodiscard]] Links links(const Action& a) const noexcept {
    const std::int32_t s = a.stage, mb = a.microbatch;
    Links l;
    switch (a.op) {
      case Op::F:
        if (s > 0) l.input = (lowered && rank_of(s - 1) != rank_of(s)) ? find(Op::RECV_F, s, mb) : find(Op::F, s - 1, mb);
        break;
      case Op::B:
      case Op::BI:
        l.same_stage = find(Op::F, s, mb);
        if (s + 1 < stages) {
          l.input = (lowered && rank_of(s + 1) != rank_of(s)) ? find(Op::RECV_B, s, mb) : backward_input(s + 1, mb);
        }
        break;
      case Op::BW: l.same_stage = find(Op::BI, s, mb); break;
      case Op::SEND_F:
        l.same_stage = find(Op::F, s, mb);
        l.peer = find(Op::RECV_F, s + 1, mb);
        break;
      case Op::SEND_B:
        l.same_stage = backward_input(s, mb);
        l.peer = find(Op::RECV_B, s - 1, mb);
        break;
      case Op::RECV_F: l.peer = find(Op::SEND_F, s - 1, mb); break;
      case Op::RECV_B: l.peer = find(Op::SEND_B, s + 1, mb); break;
    }
    return l;
  }
};

// Collects problems up to the cap.
class ProblemSink {
 public:
  ProblemSink(ValidationReport& report, std::size_t cap) : report_(report), cap_(cap) {}
  void add(ProblemKind kind, std::int32_t rank, std::int32_t position, const Action& action, std::string message) {
    if (report_.problems.size() < cap_) {
      report_.problems.push_back(Problem{kind, rank, position, action, std::move(message)});
    } else {
      ++report_.unlisted_problems;
    }
  }
  void add(ProblemKind kind, std::string message) { add(kind, -1, -1, Action{}, std::move(message)); }
  [[nodiscard]] bool any() const noexcept { return !report_.problems.empty() || report_.unlisted_problems != 0; }

 private:
  ValidationReport& report_;
  std::size_t cap_;
};

[[nodiscard]] inline std::string at_rank(std::int32_t rank, std::int32_t position) {
  return concat("rank ", rank, " position ", position);
}

// The per-action part of static_checks for a schedule without problems: fills the index
// (owner, rank_begin but its last entry, rank_actions, slots and the flags) and returns
// true, or returns false at the first action the full loop would report.
[[nodiscard]] inline bool index_clean_programs(const std::vector<const std::vector<Action>*>& programs,
                                               bool split_backward, FlatSchedule& flat) noexcept {
  const auto S = static_cast<std::uint32_t>(flat.stages), M = static_cast<std::uint32_t>(flat.microbatches);
  const std::int32_t* const placement = flat.placement.data();
  std::int32_t* const slots = flat.slots.data();
  std::int32_t* const owner = flat.owner.data();
  bool has_backward = false, lowered = false, has_pairs = false;
  std::size_t compute_count = 0;
  std::int32_t index = 0;
  for (std::size_t r = 0; r < programs.size(); ++r) {
    const auto rank = static_cast<std::int32_t>(r);
    flat.rank_begin[r] = index;
    flat.rank_actions[r] = programs[r]->data();
    for (const Action& a : *programs[r]) {
      owner[static_cast<std::size_t>(index)] = rank;
      if (static_cast<std::uint32_t>(a.stage) >= S || static_cast<std::uint32_t>(a.microbatch) >= M) return false;
      const std::int32_t home = placement[static_cast<std::size_t>(a.stage)];
      if (home != rank) return false;
      if (is_compute(a.op)) {
        has_pairs = has_pairs || a.group != 0;
        if (a.op != Op::F) {
          if (a.op != Op::B && !split_backward) return false;
          has_backward = true;
        }
        ++compute_count;
      } else {
        const std::int32_t peer_stage = (a.op == Op::SEND_F || a.op == Op::RECV_B) ? a.stage + 1 : a.stage - 1;
        if (static_cast<std::uint32_t>(peer_stage) >= S || placement[static_cast<std::size_t>(peer_stage)] == home) return false;
        lowered = true;
      }
      std::int32_t& slot = slots[flat.slot_index(a.op, a.stage, a.microbatch)];
      if (slot != no_action) return false;
      slot = index++;
    }
  }
  flat.has_backward = has_backward;
  flat.lowered = lowered;
  flat.has_pairs = has_pairs;
  flat.compute_count = compute_count;
  return true;
}

// True when the completeness and order checks of static_checks have nothing to report.
// Called only once the per-action checks found nothing, so every action sits on its
// stage's rank and "on the same rank" is a property of the two stages.
[[nodiscard]] inline bool table_consistent(const FlatSchedule& flat) noexcept {
  const std::int32_t S = flat.stages, M = flat.microbatches;
  const bool backward = flat.has_backward, lowered = flat.lowered;
  const std::int32_t* const slots = flat.slots.data();
  constexpr auto F = static_cast<std::size_t>(Op::F), B = static_cast<std::size_t>(Op::B);
  constexpr auto BI = static_cast<std::size_t>(Op::BI), BW = static_cast<std::size_t>(Op::BW);
  constexpr auto SEND_F = static_cast<std::size_t>(Op::SEND_F), RECV_F = static_cast<std::size_t>(Op::RECV_F);
  constexpr auto SEND_B = static_cast<std::size_t>(Op::SEND_B), RECV_B = static_cast<std::size_t>(Op::RECV_B);
  for (std::int32_t st = 0; st < S; ++st) {
    const bool has_next = st + 1 < S;
    const bool next_local = has_next && flat.rank_of(st + 1) == flat.rank_of(st);
    const bool next_remote = has_next && !next_local;
    for (std::int32_t mb = 0; mb < M; ++mb) {
      const std::int32_t* const line = slots + flat.slot_index(Op::F, st, mb);
      const std::int32_t* const next = has_next ? slots + flat.slot_index(Op::F, st + 1, mb) : nullptr;
      const std::int32_t f = line[F];
      if (f == no_action) return false;
      std::int32_t bin = no_action;
      if (backward) {
        const std::int32_t b = line[B], bi = line[BI], bw = line[BW];
        if (b != no_action ? (bi != no_action || bw != no_action) : (bi == no_action || bw == no_action)) return false;
        bin = b != no_action ? b : bi;
        if (bin < f) return false;
        if (bi != no_action && bw < bi) return false;
      }
      if (next_local) {
        if (next[F] != no_action && next[F] < f) return false;
        const std::int32_t bin_next = next[B] != no_action ? next[B] : next[BI];
        if (bin != no_action && bin_next != no_action && bin < bin_next) return false;
      }
      if (!lowered) continue;
      const std::int32_t recv_f = line[RECV_F], send_f = line[SEND_F], recv_b = line[RECV_B], send_b = line[SEND_B];
      if (recv_f != no_action && f < recv_f) return false;
      if (send_f != no_action && send_f < f) return false;
      if (bin != no_action && recv_b != no_action && bin < recv_b) return false;
      if (bin != no_action && send_b != no_action && send_b < bin) return false;
      if (next_remote) {
        if (send_f == no_action || next[RECV_F] == no_action) return false;
        if (backward && (next[SEND_B] == no_action || recv_b == no_action)) return false;
      }
    }
  }
  return true;
}

// Overlapped pairs (docs/execution-model.md): each run of consecutive actions sharing a group
// that holds a compute action must be two compute actions, one F and one B or BI, of two
// micro-batches. Any backward of a micro-batch needs every forward of it (through the loss),
// so a pair of one micro-batch could never start. A run whose id recurs elsewhere on the rank
// is left to the contiguity check, which names both places.
inline void check_pairs(const FlatSchedule& flat, ProblemSink& sink) {
  for (std::int32_t r = 0; r < flat.ranks; ++r) {
    const std::int32_t count = flat.rank_begin[static_cast<std::size_t>(r) + 1] - flat.rank_begin[static_cast<std::size_t>(r)];
    const Action* prog = flat.rank_actions[static_cast<std::size_t>(r)];
    for (std::int32_t i = 0; i < count;) {
      const std::uint32_t g = prog[i].group;
      std::int32_t j = i + 1;
      while (j < count && g != 0 && prog[j].group == g) ++j;
      const std::int32_t first = i, size = j - i;
      i = j;
      if (g == 0) continue;
      std::int32_t computes = 0;
      for (std::int32_t k = first; k < first + size; ++k) computes += is_compute(prog[k].op) ? 1 : 0;
      if (computes == 0) continue;
      const Action& a = prog[first];
      if (computes != size) {
        std::int32_t c = first;
        while (!is_compute(prog[c].op)) ++c;
        sink.add(ProblemKind::group_mixed, r, c, prog[c],
                 concat(to_string(prog[c]), " at ", at_rank(r, c), " shares group ", g,
                        " with communication actions next to it; a group is either an overlapped pair of two compute "
                        "actions or communication posted together: give the pair its own id"));
        continue;
      }
      if (size != 2) {
        if (size == 1) {
          bool recurs = false;
          for (std::int32_t k = 0; k < count && !recurs; ++k) recurs = k != first && prog[k].group == g;
          if (recurs) continue;
        }
        sink.add(ProblemKind::pair_size, r, first, a,
                 concat("group ", g, " at ", at_rank(r, first), " holds ", size, " compute action",
                        size == 1 ? "" : "s", " (", to_string(a), size == 1 ? "" : ", ...",
                        "); a compute group is an overlapped pair of exactly two adjacent actions: ",
                        size == 1 ? "set its group to 0 or put its partner next to it" : "split it into pairs"));
        continue;
      }
      const Action& b = prog[first + 1];
      const auto backward = [](Op op) { return op == Op::B || op == Op::BI; };
      if (!((a.op == Op::F && backward(b.op)) || (backward(a.op) && b.op == Op::F))) {
        sink.add(ProblemKind::pair_ops, r, first, a,
                 concat("the pair ", to_string(a), " and ", to_string(b), " at ", at_rank(r, first),
                        " is not one forward and one backward (B or BI); only an F and a backward overlap: set "
                        "their group to 0"));
        continue;
      }
      if (a.microbatch == b.microbatch) {
        sink.add(ProblemKind::pair_dependent, r, first, a,
                 concat("the pair ", to_string(a), " and ", to_string(b), " at ", at_rank(r, first),
                        " is of one micro-batch, whose backward needs that forward's result (through the loss), "
                        "so the pair could never start; pair the forward with another micro-batch's backward"));
      }
    }
  }
}

// Checks that do not need the programs to run: shape, ranges, placement, completeness,
// orders within one rank, communication bookkeeping. Builds `flat` as it goes; returns
// false when the shape itself is unusable (nothing else could be checked).
// `proven`: `s` is the schedule lower() wrote last on this thread (is_remembered_lowering,
// below), whose checks its construction has proven: it is only indexed.
inline bool static_checks(const Schedule& s, FlatSchedule& flat, ProblemSink& sink, bool skip_comm = false,
                          bool proven = false) {
  // ---- shape
  bool shape_ok = true;
  if (s.ranks < 1) {
    sink.add(ProblemKind::shape, concat("the schedule has ", s.ranks, " ranks; it needs at least 1 (set Schedule::ranks)"));
    shape_ok = false;
  }
  if (s.microbatches < 1) {
    sink.add(ProblemKind::shape, concat("the schedule has ", s.microbatches,
                                        " micro-batches; it needs at least 1 (set Schedule::microbatches)"));
    shape_ok = false;
  }
  if (s.placement.empty()) {
    sink.add(ProblemKind::shape, "the placement is empty: give Schedule::placement one rank per stage");
    shape_ok = false;
  }
  if (shape_ok && s.programs.size() != static_cast<std::size_t>(s.ranks)) {
    sink.add(ProblemKind::shape, concat("the schedule has ", s.ranks, " ranks but ", s.programs.size(),
                                        " programs; give exactly one program per rank"));
    shape_ok = false;
  }
  if (shape_ok) {
    for (std::size_t st = 0; st < s.placement.size(); ++st) {
      const std::int32_t r = s.placement[st];
      if (r < 0 || r >= s.ranks) {
        sink.add(ProblemKind::shape, concat("placement[", st, "] = ", r, " is not a rank of this schedule (0..",
                                            s.ranks - 1, "); place stage ", st, " on one of them"));
        shape_ok = false;
      }
    }
  }
  if (!shape_ok) return false;

  flat.ranks = s.ranks;
  flat.stages = s.stages();
  flat.microbatches = s.microbatches;
  flat.placement = s.placement;
  const std::int32_t S = flat.stages, M = flat.microbatches, last = S - 1;

  // The programs indexed: the schedule's own, or copies without communication.
  std::vector<const std::vector<Action>*> programs;
  for (const auto& prog : s.programs) programs.push_back(&prog);
  if (skip_comm) {
    flat.kept.assign(s.programs.size(), {});
    for (std::size_t r = 0; r < s.programs.size(); ++r) {
      for (const Action& a : s.programs[r]) {
        if (is_compute(a.op)) flat.kept[r].push_back(a);
      }
      programs[r] = &flat.kept[r];
    }
  }
  std::size_t total = 0;
  for (const auto* prog : programs) total += prog->size();
  if (total > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max() / 2)) {
    fail({"schedule '" + s.name + "'", concat("has ", total, " actions, more than ppsched indexes"), "",
          "split the step into fewer micro-batches"});
  }
  // Every (stage, micro-batch) needs its F: fewer actions than that is a schedule of other
  // sizes than it declares (and indexing by the declared sizes could be unboundedly large).
  if (static_cast<std::int64_t>(S) * M > static_cast<std::int64_t>(total)) {
    sink.add(ProblemKind::shape, concat("the schedule declares ", S, " stages and ", M, " micro-batches, which need ",
                                        static_cast<std::int64_t>(S) * M, " forwards, but its programs hold ", total,
                                        " actions in all; set Schedule::microbatches and the placement to what the "
                                        "programs run"));
    return false;
  }
  flat.rank_actions.assign(static_cast<std::size_t>(s.ranks), nullptr);
  flat.owner.resize(total);
  std::int32_t next_index = 0;
  flat.rank_begin.assign(static_cast<std::size_t>(s.ranks) + 1, 0);
  flat.slots.resize(static_cast<std::size_t>(op_count) * static_cast<std::size_t>(S) * static_cast<std::size_t>(M));
  static_assert(no_action == -1, "no_action is all bits set, so the table is cleared bytewise");
  std::memset(flat.slots.data(), 0xff, flat.slots.size() * sizeof(std::int32_t));

  // Most schedules have nothing to report here: a tight loop indexes them, and only when it
  // meets a problem does the loop below, which names each one, start again from scratch.
  const bool indexed = index_clean_programs(programs, s.split_backward, flat);
  if (indexed) {
    next_index = static_cast<std::int32_t>(total);
  } else {
    std::memset(flat.slots.data(), 0xff, flat.slots.size() * sizeof(std::int32_t));
    flat.has_backward = false;
    flat.lowered = false;
    flat.has_pairs = false;
    flat.compute_count = 0;
  }
  bool reported_split = false;
  for (std::int32_t r = 0; !indexed && r < s.ranks; ++r) {
    flat.rank_begin[static_cast<std::size_t>(r)] = next_index;
    const auto& prog = *programs[static_cast<std::size_t>(r)];
    flat.rank_actions[static_cast<std::size_t>(r)] = prog.data();
    std::int32_t pos = -1;
    for (const Action& a : prog) {
      ++pos;
      const std::int32_t index = next_index++;
      const std::int32_t position = pos;
      flat.owner[static_cast<std::size_t>(index)] = r;
      if (a.stage < 0 || a.stage >= S) {
        sink.add(ProblemKind::stage_out_of_range, r, position, a,
                 concat(to_string(a), " at ", at_rank(r, pos), " names stage ", a.stage, ", but the schedule has stages 0..", last,
                        "; use a stage in that range or extend the placement"));
        continue;
      }
      if (a.microbatch < 0 || a.microbatch >= M) {
        sink.add(ProblemKind::microbatch_out_of_range, r, position, a,
                 concat(to_string(a), " at ", at_rank(r, pos), " names micro-batch ", a.microbatch,
                        ", but the schedule has micro-batches 0..", M - 1,
                        "; use one in that range or raise Schedule::microbatches"));
        continue;
      }
      const std::int32_t home = flat.rank_of(a.stage);
      if (is_compute(a.op)) {
        flat.has_backward = flat.has_backward || a.op != Op::F;
        flat.has_pairs = flat.has_pairs || a.group != 0;
        ++flat.compute_count;
        if ((a.op == Op::BI || a.op == Op::BW) && !s.split_backward && !reported_split) {
          reported_split = true;
          sink.add(ProblemKind::split_flag, r, position, a,
                   concat(to_string(a), " at ", at_rank(r, pos),
                          " splits the backward, but Schedule::split_backward is false; set it to true so the "
                          "executor asks for backward_input / backward_weight callables"));
        }
        if (home != r) {
          sink.add(ProblemKind::wrong_rank, r, position, a,
                   concat(to_string(a), " is on rank ", r, " (position ", pos, "), but stage ", a.stage,
                          " is placed on rank ", home, "; move it to rank ", home,
                          "'s program or change the placement"));
        }
      } else {
        flat.lowered = true;
        // The peer stage of this communication, and whether it exists and is remote.
        const bool forward = a.op == Op::SEND_F || a.op == Op::RECV_F;
        const bool send = is_send(a.op);
        const std::int32_t peer_stage = (a.op == Op::SEND_F || a.op == Op::RECV_B) ? a.stage + 1 : a.stage - 1;
        if (peer_stage < 0 || peer_stage > last) {
          sink.add(ProblemKind::no_peer, r, position, a,
                   concat(to_string(a), " at ", at_rank(r, pos), ": stage ", a.stage, " is the ", a.stage == 0 ? "first" : "last",
                          " stage, so there is no stage ", peer_stage, " to ", send ? "send to" : "receive from",
                          "; remove it"));
          continue;
        }
        if (flat.rank_of(peer_stage) == home) {
          sink.add(ProblemKind::needless_comm, r, position, a,
                   concat(to_string(a), " at ", at_rank(r, pos), " crosses the boundary between stages ", std::min(a.stage, peer_stage),
                          " and ", std::max(a.stage, peer_stage), ", which are both on rank ", home,
                          "; a local boundary needs no communication: remove it"));
          continue;
        }
        if (home != r) {
          const std::int32_t sender_stage = send ? a.stage : peer_stage;
          const std::int32_t receiver_stage = send ? peer_stage : a.stage;
          const Action other{send ? (forward ? Op::RECV_F : Op::RECV_B) : (forward ? Op::SEND_F : Op::SEND_B),
                             peer_stage, a.microbatch, 0};
          sink.add(ProblemKind::wrong_peer, r, position, a,
                   send ? concat(to_string(a), " is on rank ", r, " (position ", pos, "), but stage ", a.stage,
                                 " that produces it is placed on rank ", home, "; its receive ", to_string(other),
                                 " expects it from rank ", home, ": move the send to rank ", home)
                        : concat(to_string(a), " is on rank ", r, " (position ", pos, "), but stage ", receiver_stage,
                                 " is placed on rank ", home, ": ", to_string(other), " from rank ",
                                 flat.rank_of(sender_stage), " (stage ", sender_stage, ") goes to rank ", home,
                                 "; move the receive to rank ", home));
        }
      }
      std::int32_t& slot = flat.slots[flat.slot_index(a.op, a.stage, a.microbatch)];
      if (slot != no_action) {
        const std::int32_t first_rank = flat.owner[static_cast<std::size_t>(slot)];
        sink.add(ProblemKind::duplicate, r, position, a,
                 concat(to_string(a), " appears twice: at ", at_rank(first_rank, flat.position(slot)), " and at ", at_rank(r, pos),
                        "; each action runs exactly once per step: remove one"));
      } else {
        slot = index;
      }
    }
  }
  flat.rank_begin[static_cast<std::size_t>(s.ranks)] = next_index;
  if (proven && indexed) return true;

  auto same_rank = [&](std::int32_t x, std::int32_t y) {
    return x != no_action && y != no_action && flat.owner[static_cast<std::size_t>(x)] == flat.owner[static_cast<std::size_t>(y)];
  };
  auto describe = [&](std::int32_t x) {
    return concat(to_string(flat.at(x)), " (", at_rank(flat.owner[static_cast<std::size_t>(x)], flat.position(x)), ")");
  };
  auto report_order = [&](ProblemKind kind, std::int32_t late, std::int32_t early, const char* why) {
    sink.add(kind, flat.owner[static_cast<std::size_t>(early)], flat.position(early), flat.at(early),
             concat(describe(early), " comes before ", describe(late), ", but ", why, "; move ",
                    to_string(flat.at(late)), " before ", to_string(flat.at(early))));
  };
  // The checks below name each problem they find, which makes them heavy; a schedule that
  // passed the per-action checks usually has none, and one light pass over the identity
  // table says so (it tests exactly the conditions they report).
  if (sink.any() || !table_consistent(flat)) {
    // ---- completeness of compute, and (lowered) of communication
    for (std::int32_t st = 0; st < S; ++st) {
      const std::int32_t home = flat.rank_of(st);
      for (std::int32_t mb = 0; mb < M; ++mb) {
        if (flat.find(Op::F, st, mb) == no_action) {
          sink.add(ProblemKind::missing_compute, home, -1, Action{Op::F, st, mb, 0},
                   concat(to_string(Action{Op::F, st, mb, 0}), " is missing: every (stage, micro-batch) runs its forward "
                          "once; add it to rank ", home, "'s program"));
        }
        if (!flat.has_backward) continue;
        const bool b = flat.find(Op::B, st, mb) != no_action;
        const bool bi = flat.find(Op::BI, st, mb) != no_action;
        const bool bw = flat.find(Op::BW, st, mb) != no_action;
        if (b && (bi || bw)) {
          sink.add(ProblemKind::mixed_backward, home, -1, Action{Op::B, st, mb, 0},
                   concat("micro-batch ", mb, " on stage ", st, " has both B and ", bi ? "BI" : "BW",
                          ": its backward is either one B or a BI then a BW; remove one form"));
        } else if (!b && !bi && !bw) {
          sink.add(ProblemKind::missing_compute, home, -1, Action{Op::B, st, mb, 0},
                   concat("the backward of micro-batch ", mb, " on stage ", st, " is missing (", to_string(Action{Op::B, st, mb, 0}),
                          ", or ", to_string(Action{Op::BI, st, mb, 0}), " then ", to_string(Action{Op::BW, st, mb, 0}),
                          "); the schedule has backwards elsewhere, so add it to rank ", home, "'s program"));
        } else if (bi != bw) {
          const Action absent{bi ? Op::BW : Op::BI, st, mb, 0};
          sink.add(ProblemKind::missing_compute, home, -1, absent,
                   concat(to_string(absent), " is missing: a split backward runs BI then BW; add it to rank ", home,
                          "'s program"));
        }
      }
    }
    if (flat.lowered) {
      auto check_transfer = [&](Op send_op, std::int32_t from, Op recv_op, std::int32_t to, std::int32_t mb) {
        const std::int32_t snd = flat.find(send_op, from, mb);
        const std::int32_t rcv = flat.find(recv_op, to, mb);
        const Action send_action{send_op, from, mb, 0}, recv_action{recv_op, to, mb, 0};
        const std::int32_t rf = flat.rank_of(from), rt = flat.rank_of(to);
        if (snd == no_action && rcv == no_action) {
          sink.add(ProblemKind::missing_transfer, rf, -1, send_action,
                   concat("the transfer ", to_string(send_action), " (rank ", rf, ") -> ", to_string(recv_action), " (rank ",
                          rt, ") has neither its send nor its receive, while the schedule communicates elsewhere; "
                          "a lowered schedule carries every transfer: add both, or lower() the compute-only schedule"));
        } else if (snd == no_action) {
          sink.add(ProblemKind::missing_send, rf, -1, send_action,
                   concat(to_string(send_action), " is missing on rank ", rf, ": ", to_string(recv_action), " at ",
                          at_rank(flat.owner[static_cast<std::size_t>(rcv)], flat.position(rcv)),
                          " waits for it; add it to rank ", rf, "'s program after ",
                          to_string(Action{send_op == Op::SEND_F ? Op::F : (s.split_backward ? Op::BI : Op::B), from, mb, 0})));
        } else if (rcv == no_action) {
          sink.add(ProblemKind::missing_recv, rt, -1, recv_action,
                   concat(to_string(send_action), " at ", at_rank(flat.owner[static_cast<std::size_t>(snd)], flat.position(snd)),
                          " has no matching receive: ", to_string(recv_action), " is missing on rank ", rt,
                          "; add it to rank ", rt, "'s program before the compute that needs it"));
        }
      };
      for (std::int32_t st = 0; st + 1 < S; ++st) {
        if (flat.rank_of(st) == flat.rank_of(st + 1)) continue;
        for (std::int32_t mb = 0; mb < M; ++mb) {
          check_transfer(Op::SEND_F, st, Op::RECV_F, st + 1, mb);
          if (flat.has_backward) check_transfer(Op::SEND_B, st + 1, Op::RECV_B, st, mb);
        }
      }
    }

    // ---- orders within one rank (the programs are issue orders, so index order is issue order)
    for (std::int32_t st = 0; st < S; ++st) {
      for (std::int32_t mb = 0; mb < M; ++mb) {
        const std::int32_t f = flat.find(Op::F, st, mb);
        const std::int32_t bin = flat.backward_input(st, mb);
        if (same_rank(f, bin) && bin < f) {
          report_order(ProblemKind::backward_before_forward, f, bin, "a backward needs the activation its forward stores");
        }
        const std::int32_t bi = flat.find(Op::BI, st, mb), bw = flat.find(Op::BW, st, mb);
        if (same_rank(bi, bw) && bw < bi) {
          report_order(ProblemKind::weight_before_input, bi, bw, "BW uses the output gradient that BI consumes first");
        }
        if (st + 1 < S && flat.rank_of(st) == flat.rank_of(st + 1)) {
          const std::int32_t f_next = flat.find(Op::F, st + 1, mb);
          if (same_rank(f, f_next) && f_next < f) {
            report_order(ProblemKind::local_order, f, f_next,
                         "both stages are on this rank and the next stage's forward consumes this one's output");
          }
          const std::int32_t bin_next = flat.backward_input(st + 1, mb);
          if (same_rank(bin, bin_next) && bin < bin_next) {
            report_order(ProblemKind::local_order, bin_next, bin,
                         "both stages are on this rank and a stage's backward consumes the next stage's input gradient");
          }
        }
        if (!flat.lowered) continue;
        const std::int32_t recv_f = flat.find(Op::RECV_F, st, mb), send_f = flat.find(Op::SEND_F, st, mb);
        const std::int32_t recv_b = flat.find(Op::RECV_B, st, mb), send_b = flat.find(Op::SEND_B, st, mb);
        const char* recv_why = "the compute waits on the receive's completion event, which must be recorded first";
        const char* send_why = "the send waits on the compute's completion event, which must be recorded first";
        if (same_rank(recv_f, f) && f < recv_f) report_order(ProblemKind::recv_after_consumer, recv_f, f, recv_why);
        if (same_rank(recv_b, bin) && bin < recv_b) report_order(ProblemKind::recv_after_consumer, recv_b, bin, recv_why);
        if (same_rank(send_f, f) && send_f < f) report_order(ProblemKind::send_before_producer, f, send_f, send_why);
        if (same_rank(send_b, bin) && send_b < bin) report_order(ProblemKind::send_before_producer, bin, send_b, send_why);
      }
    }
  }

  if (flat.has_pairs) check_pairs(flat, sink);
  if (!flat.lowered && !flat.has_pairs) return true;

  // ---- groups: one group id is one contiguous run of actions on a rank
  for (std::int32_t r = 0; r < s.ranks; ++r) {
    const std::int32_t begin = flat.rank_begin[static_cast<std::size_t>(r)];
    const std::int32_t end = flat.rank_begin[static_cast<std::size_t>(r) + 1];
    const Action* prog = flat.rank_actions[static_cast<std::size_t>(r)];
    // The start of a run of one group: a grouped action not continuing the previous.
    auto run_starts = [&](std::int32_t i) {
      const Action& a = prog[i - begin];
      if (a.group == 0) return false;
      return i == begin || prog[i - begin - 1].group != a.group;
    };
    // Group ids that only grow cannot repeat (what lower() writes): the common case is one
    // pass. Pairs and communication grow apart (lower() numbers communication above the
    // pairs), so each kind is followed on its own, and all pair ids must lie below the others.
    bool increasing = true;
    std::uint32_t last_comm = 0, last_pair = 0, first_comm = 0;
    for (std::int32_t i = begin; i < end && increasing; ++i) {
      if (!run_starts(i)) continue;
      const std::uint32_t g = prog[i - begin].group;
      std::uint32_t& last = is_compute(prog[i - begin].op) ? last_pair : last_comm;
      increasing = g > last;
      last = g;
      if (first_comm == 0 && is_comm(prog[i - begin].op)) first_comm = g;
    }
    if (increasing && (first_comm == 0 || last_pair < first_comm)) continue;
    std::vector<std::pair<std::uint32_t, std::int32_t>> runs;  // (group, index of first action)
    for (std::int32_t i = begin; i < end; ++i) {
      if (run_starts(i)) runs.emplace_back(prog[i - begin].group, i);
    }
    std::sort(runs.begin(), runs.end());
    for (std::size_t k = 1; k < runs.size(); ++k) {
      if (runs[k].first != runs[k - 1].first || (k >= 2 && runs[k - 2].first == runs[k].first)) continue;
      const std::int32_t i = runs[k].second;
      sink.add(ProblemKind::group_not_contiguous, r, flat.position(i), flat.at(i),
               concat("group ", runs[k].first, " on rank ", r, " is not contiguous: it starts at position ",
                      flat.position(runs[k - 1].second), " and again at position ", flat.position(i),
                      is_compute(flat.at(i).op)
                          ? "; an overlapped pair runs as one unit, so its two actions must be adjacent: renumber or "
                            "move them"
                          : "; a group is posted as one unit, so its actions must be consecutive: renumber or move them"));
    }
  }

  if (!flat.lowered) return true;

  // ---- NCCL matches the messages between two ranks in posting order (it has no tags), so
  // each ordered pair of ranks must post its sends and its receives in the same order.
  if (!sink.any()) {
    // With every transfer matched one to one, the receives of rank b from rank a are posted
    // in rank a's send order exactly when their sends' indices increase along b's program.
    std::vector<std::vector<std::pair<std::int32_t, std::int32_t>>> last_send(static_cast<std::size_t>(s.ranks));
    std::vector<std::pair<std::int32_t, std::int32_t>> reported;  // (from, to) pairs already reported
    for (std::int32_t to = 0; to < s.ranks; ++to) {
    const std::int32_t begin = flat.rank_begin[static_cast<std::size_t>(to)];
    const Action* prog = flat.rank_actions[static_cast<std::size_t>(to)];
    for (std::int32_t i = begin; i < flat.rank_begin[static_cast<std::size_t>(to) + 1]; ++i) {
      const Action& a = prog[i - begin];
      if (!is_recv(a.op)) continue;
      const std::int32_t peer_stage = a.op == Op::RECV_F ? a.stage - 1 : a.stage + 1;
      const std::int32_t q = flat.find(a.op == Op::RECV_F ? Op::SEND_F : Op::SEND_B, peer_stage, a.microbatch);
      const std::int32_t from = flat.rank_of(peer_stage);  // every action is on its stage's rank here
      auto& seen = last_send[static_cast<std::size_t>(to)];
      auto it = std::find_if(seen.begin(), seen.end(), [from](const auto& e) { return e.first == from; });
      if (it == seen.end()) {
        seen.emplace_back(from, q);
        continue;
      }
      const std::int32_t previous = it->second;
      it->second = q;
      if (q > previous) continue;
      if (std::find(reported.begin(), reported.end(), std::make_pair(from, to)) != reported.end()) continue;
      reported.emplace_back(from, to);
      const std::int32_t previous_recv = flat.links(previous).peer;
      sink.add(ProblemKind::pair_order, to, flat.position(i), a,
               concat("rank ", from, " and rank ", to, " post their messages in different orders: rank ", to,
                      " receives ", describe(previous_recv), " before ", describe(i), ", but rank ", from, " sends ",
                      describe(q), " before ", describe(previous),
                      ". NCCL matches point-to-point messages between two ranks in posting order (it has no tags), "
                      "so these receives would get each other's data; post the receives in the order the peer "
                      "sends (lower() does)"));
    }
    }
  }
  return true;
}

// Peak activation memory per rank. Memory on a rank changes only at its compute actions,
// which run in program order on one stream, so the peak is a property of the order alone.
// An overlapped pair holds its forward's new activation while its backward still holds the
// one it frees, so the pair's forward counts first whatever the order of the two.
// A forward-only schedule stores nothing for a backward.
// `bytes_of(stage, mb)` is the size of one stored activation.
// (Pairs: the schedule has overlapped pairs; a separate instance keeps the common walk lean.)
template <bool Pairs, class BytesOf>
void measure_memory_walk(const FlatSchedule& flat, double w, const BytesOf& bytes_of, ValidationReport& report) {
  std::vector<std::int32_t> stage_now(static_cast<std::size_t>(flat.stages), 0);
  for (std::int32_t r = 0; r < flat.ranks; ++r) {
    double units = 0.0, peak_units = 0.0, b = 0.0, peak_b = 0.0;
    std::int32_t in_flight = 0, peak_in_flight = 0;
    const Action* const prog = flat.rank_actions[static_cast<std::size_t>(r)];
    const std::int32_t count = flat.rank_begin[static_cast<std::size_t>(r) + 1] - flat.rank_begin[static_cast<std::size_t>(r)];
    for (std::int32_t k = 0; k < count; ++k) {
      std::int32_t at = k;
      if constexpr (Pairs) {
        if (prog[k].group != 0 && is_compute(prog[k].op)) {
          // In a pair written backward first, visit its forward first (and the backward next).
          const bool first_of_pair = k + 1 < count && prog[k + 1].group == prog[k].group && is_compute(prog[k + 1].op);
          const bool second_of_pair = k > 0 && prog[k - 1].group == prog[k].group && is_compute(prog[k - 1].op);
          if (first_of_pair && prog[k].op != Op::F && prog[k + 1].op == Op::F) at = k + 1;
          if (second_of_pair && prog[k].op == Op::F && prog[k - 1].op != Op::F) at = k - 1;
        }
      }
      const Action& a = prog[at];
      if (is_comm(a.op) || a.stage < 0 || a.stage >= flat.stages) continue;
      const auto st = static_cast<std::size_t>(a.stage);
      if (a.microbatch < 0 || a.microbatch >= flat.microbatches) continue;
      const double size = bytes_of(a.stage, a.microbatch);
      switch (a.op) {
        case Op::F:
          units += 1.0;
          b += size;
          ++in_flight;
          report.stage_peak_in_flight[st] = std::max(report.stage_peak_in_flight[st], ++stage_now[st]);
          break;
        case Op::B:
          units -= 1.0;
          b -= size;
          --in_flight;
          --stage_now[st];
          break;
        case Op::BI:
          units -= 1.0 - w;
          b -= (1.0 - w) * size;
          --in_flight;
          --stage_now[st];
          break;
        case Op::BW:
          units -= w;
          b -= w * size;
          break;
        default: break;
      }
      peak_units = std::max(peak_units, units);
      peak_b = std::max(peak_b, b);
      peak_in_flight = std::max(peak_in_flight, in_flight);
    }
    report.memory[static_cast<std::size_t>(r)] = RankMemory{peak_units, peak_b, peak_in_flight};
  }
}

template <class BytesOf>
void measure_memory(const FlatSchedule& flat, double w, const BytesOf& bytes_of, ValidationReport& report) {
  report.memory.assign(static_cast<std::size_t>(flat.ranks), RankMemory{});
  report.stage_peak_in_flight.assign(static_cast<std::size_t>(flat.stages), 0);
  if (!flat.has_backward) return;
  if (flat.has_pairs) {
    measure_memory_walk<true>(flat, w, bytes_of, report);
  } else {
    measure_memory_walk<false>(flat, w, bytes_of, report);
  }
}

// The abstract execution of docs/execution-model.md. Each rank has a compute stream
// (2r) and a comm stream (2r+1; unused when communication is on the compute stream or the
// schedule has none). A stream's items are compute actions or communication groups, run
// in order. A compute item starts when its stream is free and its dependencies are done; a
// group is posted when it is at the head and the producers of its sends are done; a
// transfer runs when both of its sides are posted; a group ends with its last transfer.
//
// With no communication in the schedule the dependencies between stages are direct
// (dependency-only execution), each remote one delayed by `input_delay`.
//
// An overlapped pair (two adjacent compute actions sharing a group) is one compute item: it
// starts when the stream is free and the inputs of both actions are done, lasts
// T_a + T_b - fb_overlap x min(T_a, T_b), and both actions end with it.
//
// Every start condition is a conjunction of "done" facts, so which actions complete is the
// same for any durations, and each time is the max-plus closure of its dependencies: the
// run is evaluated in dependency order with a worklist of streams rather than a global
// event queue, and gives exactly the times an event-driven simulation would.
class AbstractExecution {
 public:
  // Unit compute time and instant transfers: what validation runs with (any durations
  // decide the same).
  AbstractExecution(const FlatSchedule& flat, StreamMode mode) : flat_(flat), mode_(mode), input_delay_(nullptr) {
    build_items([](const Action& a) { return is_compute(a.op) ? 1.0 : 0.0; });
  }
  // duration_of(a): the compute time of action a, or for communication its transfer time
  // (the same on both sides). input_delay (optional, dependency-only runs): added to action
  // i's remote input; it must outlive the execution.
  // fb_overlap in [0, 1] (checked by the callers): the share of the shorter action of each
  // overlapped pair hidden under the longer.
  template <class DurationOf>
  AbstractExecution(const FlatSchedule& flat, StreamMode mode, const DurationOf& duration_of,
                    const std::vector<double>* input_delay = nullptr, double fb_overlap = 0.0)
      : flat_(flat), mode_(mode), input_delay_(input_delay), fb_overlap_(fb_overlap) {
    build_items(duration_of);
  }

  // Runs to completion or to a deadlock; true when every action completed.
  bool run() {
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

  // Per action: compute start and end; communication: when its group was posted, and when
  // its transfer completed. -1 for what never happened.
  [[nodiscard]] double start(std::size_t i) const noexcept { return starts_[i]; }
  [[nodiscard]] double end(std::size_t i) const noexcept { return ends_[i]; }
  // After a run that completed: the earliest start and the latest end of any action (0 for an
  // empty schedule). Each stream starts its items in order, and its `free` is the latest end
  // of its items once they are done, so no pass over the actions is needed.
  [[nodiscard]] double earliest_start() const noexcept {
    double earliest = 0.0;
    bool any = false;
    for (std::size_t st = 0; st + 1 < stream_begin_.size(); ++st) {
      if (stream_begin_[st] == stream_begin_[st + 1]) continue;
      const double s = starts_[static_cast<std::size_t>(items_[static_cast<std::size_t>(stream_begin_[st])].first)];
      earliest = any && earliest < s ? earliest : s;
      any = true;
    }
    return earliest;
  }
  [[nodiscard]] double latest_end() const noexcept {
    double latest = 0.0;
    bool any = false;
    for (std::size_t st = 0; st + 1 < stream_begin_.size(); ++st) {
      if (stream_begin_[st] == stream_begin_[st + 1]) continue;
      latest = any && latest > streams_[st].free ? latest : streams_[st].free;
      any = true;
    }
    return latest;
  }
  [[nodiscard]] StreamMode mode() const noexcept { return mode_; }
  [[nodiscard]] bool on_comm_stream(std::int32_t i) const noexcept {
    return mode_ == StreamMode::separate_comm_stream && is_comm(flat_.at(i).op);
  }

  // After a run that did not complete: one line per stuck stream head, naming what it waits
  // for and where that is.
  [[nodiscard]] std::string describe_stuck() const {
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
      const auto rank = static_cast<std::int32_t>(st / 2);
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

 private:
  // One entry of a stream: a compute action (count 0), with its dependencies gathered here
  // so that a run reads each stream's items in order; an overlapped pair (count pair_item,
  // the actions first and first + 1, whose four dependencies start at pair_deps_[dep_a]:
  // DualPipeV's steady state is all pairs); or a communication group of `count` actions
  // starting at `first`, whose CommOps start at ops_[ops].
  // (No default member initializers: the arrays are allocated without being cleared.)
  struct Item {
    std::int32_t first;
    std::int32_t count;
    std::int32_t dep_a;  // compute: same-stage predecessor; group: its first CommOp; pair: its pair_deps_
    std::int32_t dep_b;  // compute: input
    std::int32_t wake;   // compute: the stream that may wait for it (-1: none)
    double duration;     // compute; a pair: the pair's
  };
  static constexpr std::int32_t pair_item = -1;
  [[nodiscard]] static constexpr std::int32_t item_size(const Item& item) noexcept {
    return item.count > 0 ? item.count : (item.count == pair_item ? 2 : 1);
  }
  struct CommOp {
    std::int32_t action;
    std::int32_t peer;
    std::int32_t producer;  // sends: the compute whose output it sends; receives: no_action
    std::int32_t peer_stream;
    double duration;
  };

  [[nodiscard]] std::size_t stream_of(std::int32_t i) const noexcept {
    return 2 * static_cast<std::size_t>(flat_.owner[static_cast<std::size_t>(i)]) + (on_comm_stream(i) ? 1 : 0);
  }

  // The stream that may be waiting for compute action a (on rank r) to finish in a run
  // without communication: its consumer's compute stream when that is on another rank.
  [[nodiscard]] std::int32_t dependency_waiter(std::int32_t r, const Action& a) const noexcept {
    std::int32_t consumer_stage = -1;
    if (a.op == Op::F && a.stage + 1 < flat_.stages) consumer_stage = a.stage + 1;
    if ((a.op == Op::B || a.op == Op::BI) && a.stage > 0) consumer_stage = a.stage - 1;
    if (consumer_stage < 0) return -1;
    const std::int32_t cr = flat_.rank_of(consumer_stage);
    return cr != r ? 2 * cr : -1;
  }

  template <class DurationOf>
  void build_items(const DurationOf& duration) {
    if (flat_.has_pairs) {
      build_items_of<true>(duration);
    } else {
      build_items_of<false>(duration);
    }
  }

  // (Pairs: the schedule has overlapped pairs; a separate instance keeps the common build lean.)
  template <bool Pairs, class DurationOf>
  void build_items_of(const DurationOf& duration) {
    const std::size_t streams = 2 * static_cast<std::size_t>(flat_.ranks);
    const bool separate = mode_ == StreamMode::separate_comm_stream;
    std::vector<std::int32_t> counts(streams + 1, 0);
    // Rank r's items go to stream 2r, or 2r+1 for communication on its own stream.
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
          ++counts[2 * static_cast<std::size_t>(r) + (comm && separate ? 2 : 1)];
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
      std::int32_t fills[2] = {counts[2 * static_cast<std::size_t>(r)], counts[2 * static_cast<std::size_t>(r) + 1]};
      std::int32_t& compute_fill = fills[0];
      std::int32_t& comm_fill = fills[separate ? 1 : 0];
      // In a lowered schedule a compute's waiter is always its rank's comm stream (its send).
      const std::int32_t lowered_waiter = separate ? 2 * r + 1 : -1;
      Item* open = nullptr;  // the group being extended
      std::uint32_t open_group = 0;
      [[maybe_unused]] std::uint32_t open_pair = 0;
      const Action* prog = flat_.rank_actions[static_cast<std::size_t>(r)];
      for (std::int32_t i = b; i < e; ++i) {
        const Action& a = prog[i - b];
        const Links l = flat_.links(a);
        if (is_compute(a.op)) {
          if constexpr (Pairs) {
            if (a.group != 0 && a.group == open_pair) {  // the second action of a pair
              Item& pair = items_[static_cast<std::size_t>(compute_fill - 1)];
              const double first = pair.duration, second = duration(a);
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
              Item{i, 0, l.same_stage, l.input, lowered ? lowered_waiter : dependency_waiter(r, a), duration(a)};
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
        const auto peer_stream = static_cast<std::int32_t>(2 * flat_.rank_of(peer_stage) + (separate ? 1 : 0));
        ops_[next_op++] = CommOp{i, l.peer, is_send(a.op) ? l.same_stage : no_action, peer_stream, duration(a)};
      }
    }
  }

  void wake(std::size_t st) {
    if (streams_[st].queued) return;
    streams_[st].queued = 1;
    worklist_.push_back(static_cast<std::int32_t>(st));
  }
  // Wakes a stream only if it stopped for this very action: most completions concern no
  // other stream, and a needless visit costs cache misses on a cold stream.
  void wake_for(std::size_t st, std::int32_t action) {
    if (streams_[st].blocked_on == action) wake(st);
  }

  // A hint only, so an index that names nothing (no_action, or a group whose operations
  // are not built yet) is skipped rather than formed into an out-of-range address.
  template <class Vector>
  static void prefetch([[maybe_unused]] const Vector& v, [[maybe_unused]] std::int32_t index) noexcept {
#if defined(__GNUC__)
    if (index >= 0 && static_cast<std::size_t>(index) < v.size()) __builtin_prefetch(v.data() + index);
#endif
  }

  void advance(std::size_t st) {
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

  // The first input of a pair that is not done yet, or no_action.
  [[nodiscard]] std::int32_t unmet_input(const Item& item) const noexcept {
    for (std::int32_t x = item.first; x < item.first + 2; ++x) {
      const Links l = flat_.links(x);
      for (const std::int32_t d : {l.same_stage, l.input}) {
        if (d != no_action && ends_[static_cast<std::size_t>(d)] < 0.0) return d;
      }
    }
    return no_action;
  }

  // Runs the pair at the head of stream st once the inputs of both its actions are done;
  // false (with the stream's blocked_on set) while one is not.
#if defined(__GNUC__)
  [[gnu::noinline]]  // rare outside DualPipeV: keep it out of advance()'s loop
#endif
  bool run_pair(std::size_t st, const Item& item, double& free) {
    double t = free;
    const std::int32_t* deps = pair_deps_.data() + item.dep_a;  // per action: same stage, input
    for (std::int32_t x = item.first; x < item.first + 2; ++x, deps += 2) {
      if (deps[0] != no_action) {
        const double e = ends_[static_cast<std::size_t>(deps[0])];
        if (e < 0.0) {
          streams_[st].blocked_on = deps[0];
          return false;
        }
        t = std::max(t, e);
      }
      if (deps[1] != no_action) {
        const double e = ends_[static_cast<std::size_t>(deps[1])];
        if (e < 0.0) {
          streams_[st].blocked_on = deps[1];
          return false;
        }
        t = std::max(t, e + (input_delay_ != nullptr ? (*input_delay_)[static_cast<std::size_t>(x)] : 0.0));
      }
    }
    free = t + item.duration;
    const auto r = static_cast<std::int32_t>(st / 2);
    for (std::int32_t x = item.first; x < item.first + 2; ++x) {
      starts_[static_cast<std::size_t>(x)] = t;
      ends_[static_cast<std::size_t>(x)] = free;
    }
    for (std::int32_t x = item.first; x < item.first + 2; ++x) {
      const std::int32_t waiter = flat_.lowered ? (mode_ == StreamMode::separate_comm_stream ? 2 * r + 1 : -1)
                                                : dependency_waiter(r, flat_.at(x));
      if (waiter >= 0) wake_for(static_cast<std::size_t>(waiter), x);
    }
    return true;
  }

  // "RECV_F3@s1 on rank 1, which is behind F4@s1" and the like: where action x stands.
  [[nodiscard]] std::string where(std::int32_t x, std::int32_t from_rank) const {
    const auto xi = static_cast<std::size_t>(x);
    const std::int32_t rank = flat_.owner[xi];
    const std::size_t st = stream_of(x);
    std::string s = to_string(flat_.at(x));
    if (rank != from_rank) s += concat(" on rank ", rank);
    const std::int32_t it = item_of_[xi];
    const std::int32_t head = streams_[st].head;
    const char* stream_name = mode_ == StreamMode::comm_on_compute_stream ? "stream"
                              : (st % 2 == 1)                              ? "comm stream"
                                                                           : "compute stream";
    if (it > head) {
      s += concat(", which is behind ", item_text(head), " on rank ", rank, "'s ", stream_name);
    } else if (it == head) {
      if (is_compute(flat_.at(x).op)) {
        s += concat(", which is itself waiting (see rank ", rank, ")");
      } else if (!streams_[st].posted) {
        s += concat(", whose group is not posted yet (see rank ", rank, ")");
      } else {
        s += concat(", which is posted and waits for its own peer (see rank ", rank, ")");
      }
    }
    return s;
  }

  [[nodiscard]] std::string item_text(std::int32_t index) const {
    const Item& item = items_[static_cast<std::size_t>(index)];
    if (item_size(item) == 1) return to_string(flat_.at(item.first));
    std::string s = "{";
    for (std::int32_t i = item.first; i < item.first + item_size(item); ++i) {
      if (i != item.first) s += ", ";
      s += to_string(flat_.at(i));
    }
    return s + "}";
  }

  const FlatSchedule& flat_;
  StreamMode mode_;
  const std::vector<double>* input_delay_;
  double fb_overlap_ = 0.0;
  std::vector<std::int32_t> stream_begin_;  // item offsets per stream (size streams + 1)
  pooled_vector<Item, uninitialised_allocator<Item>> items_;
  std::size_t item_total_ = 0;
  pooled_vector<CommOp, uninitialised_allocator<CommOp>> ops_;
  pooled_vector<std::int32_t> pair_deps_;  // four per pair: each action's same-stage and input
  mutable std::vector<std::int32_t> item_of_;  // action -> item, built for describe_stuck only
  // Per action: compute start and end; communication: when its group was posted and when
  // its transfer completed; -1 for what has not happened. Two arrays rather than pairs:
  // dependencies read only ends, so the randomly read array is half as large.
  pooled_vector<double> starts_;
  pooled_vector<double> ends_;
  // A stream's whole state on one cache line: a run switches streams once per item or so.
  struct StreamState {
    std::int32_t head = 0;                // next item
    std::int32_t blocked_on = no_action;  // the action the head waits for, or waiting_for_peers
    double free = 0.0;                    // when the previous item ended
    std::uint8_t posted = 0;              // the head group is posted
    std::uint8_t queued = 1;              // on the worklist
  };
  std::vector<StreamState> streams_;
  std::vector<std::int32_t> worklist_;
  static constexpr std::int32_t waiting_for_peers = -2;
};

// The schedule lower() wrote last on this thread. lower() writes only what its construction
// proves (lower.hpp: every check of static_checks holds and no timing can deadlock, in both
// stream settings) from a compute-only schedule whose checks and dependency-only run it has
// just passed. Checking that proof again is most of what validate() costs on such a schedule
// (the usual sequence is lower, validate, simulate, or run), so validate() takes it for the
// very schedule lower() wrote: compared in full, field by field, so a schedule changed in any
// way after lowering, or never lowered on this thread, is validated from scratch. One schedule
// per thread, copied into storage kept between calls (so the copy takes no fresh pages);
// schedules larger than the pool's buffers are not remembered.
struct LoweringProof {
  bool held = false;
  bool lowered = false;  // lower() wrote communication (not so when every stage is on one rank)
  bool has_backward = false;
  bool has_pairs = false;
  bool split_backward = false;
  std::int32_t ranks = 0;
  std::int32_t microbatches = 0;
  std::vector<std::int32_t> placement;
  std::vector<std::size_t> program_end;  // per rank: end of its program in `actions`
  std::vector<Action> actions;           // every program, rank by rank
};

[[nodiscard]] inline LoweringProof& lowering_proof() noexcept {
  thread_local LoweringProof proof;
  return proof;
}

// Drops the remembered schedule: the next validate() of it checks everything again.
inline void forget_lowering_proof() noexcept { lowering_proof().held = false; }

// lower() remembers the schedule it writes as it writes it, each program copied while it is
// still in the cache: begin_remembering with the shape and the compute-only input's flags,
// remember_program for each rank in order, finish_remembering once all are written. A false
// begin (too large to keep, or no memory for the copy) leaves nothing remembered.
inline bool begin_remembering(const Schedule& lowered, std::size_t total_actions, bool communicates, bool has_backward,
                              bool has_pairs) noexcept {
  LoweringProof& proof = lowering_proof();
  proof.held = false;
  if (total_actions > pool_max_bytes / sizeof(Action)) return false;
  try {
    proof.placement = lowered.placement;
    proof.program_end.clear();
    proof.program_end.reserve(lowered.programs.size());
    proof.actions.clear();
    proof.actions.reserve(total_actions);
  } catch (...) {  // no room for the copy: the schedule is validated in full when asked
    return false;
  }
  proof.lowered = communicates;
  proof.has_backward = has_backward;
  proof.has_pairs = has_pairs;
  proof.split_backward = lowered.split_backward;
  proof.ranks = lowered.ranks;
  proof.microbatches = lowered.microbatches;
  return true;
}

// Within the capacity begin_remembering reserved: allocates nothing.
inline void remember_program(const std::vector<Action>& program) noexcept {
  LoweringProof& proof = lowering_proof();
  proof.actions.insert(proof.actions.end(), program.begin(), program.end());
  proof.program_end.push_back(proof.actions.size());
}

inline void finish_remembering() noexcept { lowering_proof().held = true; }

// True when `s` is, action for action, the schedule lower() wrote last on this thread.
[[nodiscard]] inline bool is_remembered_lowering(const Schedule& s) noexcept {
  const LoweringProof& proof = lowering_proof();
  if (!proof.held || s.ranks != proof.ranks || s.microbatches != proof.microbatches ||
      s.split_backward != proof.split_backward || s.placement != proof.placement ||
      s.programs.size() != proof.program_end.size()) {
    return false;
  }
  std::size_t begin = 0;
  for (std::size_t r = 0; r < s.programs.size(); ++r) {
    const std::vector<Action>& prog = s.programs[r];
    if (prog.size() != proof.program_end[r] - begin) return false;
    const Action* const kept = proof.actions.data() + begin;
    // Field by field (the padding after `op` may differ), without a branch per field.
    std::uint32_t differ = 0;
    for (std::size_t k = 0; k < prog.size(); ++k) {
      const Action& a = prog[k];
      const Action& b = kept[k];
      differ |= (static_cast<std::uint32_t>(a.op) ^ static_cast<std::uint32_t>(b.op)) |
                (static_cast<std::uint32_t>(a.stage) ^ static_cast<std::uint32_t>(b.stage)) |
                (static_cast<std::uint32_t>(a.microbatch) ^ static_cast<std::uint32_t>(b.microbatch)) | (a.group ^ b.group);
    }
    if (differ != 0) return false;
    begin = proof.program_end[r];
  }
  return true;
}

inline void check_memory_options(const ValidateOptions& options, std::int32_t stages) {
  if (!options.memory.activation_bytes.empty() &&
      options.memory.activation_bytes.size() != static_cast<std::size_t>(stages)) {
    fail({"validate options", concat("MemoryModel::activation_bytes has ", options.memory.activation_bytes.size(),
                                     " entries for a schedule of ", stages, " stages"),
          "", "give one size per stage, or none"});
  }
}

[[nodiscard]] inline auto stage_sizes(const ValidateOptions& options) {
  return [&sizes = options.memory.activation_bytes](std::int32_t stage, std::int32_t) {
    return sizes.empty() ? 0.0 : sizes[static_cast<std::size_t>(stage)];
  };
}

// validate() of the schedule lower() wrote last (is_remembered_lowering): what the full checks
// would report for it — no problems, and its memory, measured from the programs as always.
inline ValidationReport validate_remembered_lowering(const Schedule& s, const ValidateOptions& options,
                                                     FlatSchedule& flat) {
  const LoweringProof& proof = lowering_proof();
  ValidationReport report;
  report.schedule_name = s.name;
  report.lowered = proof.lowered;
  flat.ranks = s.ranks;
  flat.stages = s.stages();
  flat.microbatches = s.microbatches;
  flat.lowered = proof.lowered;
  flat.has_backward = proof.has_backward;
  flat.has_pairs = proof.has_pairs;
  check_memory_options(options, flat.stages);
  // The memory walk reads only the programs, rank by rank.
  flat.rank_actions.resize(s.programs.size());
  flat.rank_begin.assign(s.programs.size() + 1, 0);
  for (std::size_t r = 0; r < s.programs.size(); ++r) {
    flat.rank_actions[r] = s.programs[r].data();
    flat.rank_begin[r + 1] = static_cast<std::int32_t>(proof.program_end[r]);
  }
  measure_memory(flat, options.memory.weight_fraction, stage_sizes(options), report);
  report.deadlock_checked = options.check_deadlock;
  return report;
}

// Static checks, memory and (when they pass) the deadlock proof in both stream settings.
inline ValidationReport validate_into(const Schedule& s, const ValidateOptions& options, FlatSchedule& flat) {
  if (is_remembered_lowering(s)) return validate_remembered_lowering(s, options, flat);
  ValidationReport report;
  report.schedule_name = s.name;
  ProblemSink sink(report, options.max_problems);
  if (!static_checks(s, flat, sink)) return report;
  report.lowered = flat.lowered;
  check_memory_options(options, flat.stages);
  measure_memory(flat, options.memory.weight_fraction, stage_sizes(options), report);
  if (sink.any() || !options.check_deadlock) return report;
  report.deadlock_checked = true;
  // Communication on the compute stream only adds waits to those of a separate comm stream
  // (each action waits for everything before it on the rank, not just for its own stream),
  // and every rule is monotone, so a run that completes with one stream per rank completes
  // with two. One run proves both settings; on a deadlock, the separate-stream run says
  // whether it deadlocks there too.
  AbstractExecution single(flat, StreamMode::comm_on_compute_stream);
  if (single.run()) return report;
  if (!flat.lowered) {
    sink.add(ProblemKind::deadlock, concat("deadlock: the compute order is impossible: ", single.describe_stuck(),
                                           "\n  fix: order each rank's program so that every action's inputs can be "
                                           "computed first"));
    return report;
  }
  AbstractExecution separate(flat, StreamMode::separate_comm_stream);
  const bool separate_ok = separate.run();
  const AbstractExecution& stuck = separate_ok ? single : separate;
  sink.add(ProblemKind::deadlock,
           concat("deadlock under rendezvous with ",
                  separate_ok ? "communication on the compute stream (with a separate comm stream it runs)"
                              : "communication on its own stream (and on the compute stream)",
                  ": ", stuck.describe_stuck(),
                  "\n  fix: post each send's receive before anything that waits for that send completes, group "
                  "sends and receives that must progress together, or lower() the compute-only schedule"));
  return report;
}

}  // namespace detail

// Validates a schedule (compute-only or lowered) and reports every problem found, plus
// peak activation memory per rank. Throws only for unusable options.
[[nodiscard]] inline ValidationReport validate(const Schedule& schedule, const ValidateOptions& options = {}) {
  detail::FlatSchedule flat;
  return detail::validate_into(schedule, options, flat);
}

inline std::ostream& operator<<(std::ostream& out, const ValidationReport& r) {
  out << "schedule '" << r.schedule_name << "': ";
  if (r.ok()) {
    out << "valid";
    if (r.deadlock_checked) {
      out << (r.lowered ? ", deadlock-free under rendezvous with communication on its own stream and on the compute stream"
                        : ", its compute order can run");
    }
  } else {
    out << (r.problems.size() + r.unlisted_problems) << " problem(s)";
  }
  if (!r.memory.empty()) {
    out << "\n  peak activations per rank (M_B):";
    for (const RankMemory& m : r.memory) out << ' ' << m.peak_activations;
  }
  for (const Problem& p : r.problems) out << "\n  - " << p.message;
  if (r.unlisted_problems != 0) out << "\n  - ... and " << r.unlisted_problems << " more";
  if (!r.ok() && !r.deadlock_checked) out << "\n  (deadlock freedom is checked once the problems above are fixed)";
  return out;
}

[[nodiscard]] inline std::string to_string(const ValidationReport& r) {
  std::ostringstream out;
  out << r;
  return out.str();
}

// Validates and throws ppsched::error listing every problem (at most 20 in the message)
// when there is any; returns the report (with its memory figures) otherwise.
inline ValidationReport validate_or_throw(const Schedule& schedule, const ValidateOptions& options = {}) {
  ValidationReport report = validate(schedule, options);
  if (report.ok()) return report;
  std::string list;
  const std::size_t shown = std::min<std::size_t>(report.problems.size(), 20);
  for (std::size_t i = 0; i < shown; ++i) list += "\n  - " + report.problems[i].message;
  const std::size_t hidden = report.problems.size() - shown + report.unlisted_problems;
  if (hidden != 0) list += detail::concat("\n  - ... and ", hidden, " more (see validate()'s report)");
  fail({"schedule '" + schedule.name + "'",
        detail::concat("is not valid: ", report.problems.size() + report.unlisted_problems, " problem(s):", list), "",
        "fix each problem as it says; lower() writes the communication of a compute-only schedule"});
}

}  // namespace ppsched
