// The bodies of <ppsched/engine/detail/static_checks.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include <cstring>

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE::detail {

// Problems of the shape leave nothing else checkable: every later check indexes by ranks,
// stages and micro-batches, so they are all reported and the rest is skipped.
PPSCHED_OUTLINE bool check_schedule_shape(const Schedule& s, ProblemSink& sink) {
  bool shape_ok = true;
  if (s.ranks < 1) {
    sink.add(ProblemKind::shape, detail::concat("the schedule has ", s.ranks, " ranks; it needs at least 1 (set Schedule::ranks)"));
    shape_ok = false;
  }
  if (s.microbatches < 1) {
    sink.add(ProblemKind::shape, detail::concat("the schedule has ", s.microbatches,
                                        " micro-batches; it needs at least 1 (set Schedule::microbatches)"));
    shape_ok = false;
  }
  if (s.placement.empty()) {
    sink.add(ProblemKind::shape, "the placement is empty: give Schedule::placement one rank per stage");
    shape_ok = false;
  }
  if (shape_ok && s.programs.size() != static_cast<std::size_t>(s.ranks)) {
    sink.add(ProblemKind::shape, detail::concat("the schedule has ", s.ranks, " ranks but ", s.programs.size(),
                                        " programs; give exactly one program per rank"));
    shape_ok = false;
  }
  if (shape_ok) {
    for (std::size_t st = 0; st < s.placement.size(); ++st) {
      const std::int32_t r = s.placement[st];
      if (r < 0 || r >= s.ranks) {
        sink.add(ProblemKind::shape, detail::concat("placement[", st, "] = ", r, " is not a rank of this schedule (0..",
                                            s.ranks - 1, "); place stage ", st, " on one of them"));
        shape_ok = false;
      }
    }
  }
  return shape_ok;
}

// The programs indexed: the schedule's own, or (`skip_comm`, a dependency-only run) copies
// without communication kept in `flat.kept`. A compute-only schedule is its own copy: the
// dependency runs of the search are of those, and copying them would cost each run.
PPSCHED_OUTLINE std::vector<const std::vector<Action>*> programs_to_index(const Schedule& s, bool skip_comm,
                                                                          FlatSchedule& flat) {
  std::vector<const std::vector<Action>*> programs;
  for (const auto& prog : s.programs) programs.push_back(&prog);
  const auto communicates = [&s] {
    for (const auto& prog : s.programs)
      for (const Action& a : prog)
        if (is_comm(a.op)) return true;
    return false;
  };
  if (skip_comm && communicates()) {
    flat.kept.resize(s.programs.size());
    for (std::size_t r = 0; r < s.programs.size(); ++r) {
      flat.kept[r].clear();
      for (const Action& a : s.programs[r]) {
        if (!is_comm(a.op)) flat.kept[r].push_back(a);
      }
      programs[r] = &flat.kept[r];
    }
  }
  return programs;
}

// Whether the declared sizes can index `total` actions: more than an int32 index holds is an
// error thrown, and fewer actions than every (stage, micro-batch)'s F is a schedule of other
// sizes than it declares (indexing by the declared sizes could then be unboundedly large).
PPSCHED_OUTLINE bool check_action_count(const Schedule& s, std::int32_t S, std::int32_t M, std::size_t total,
                                        ProblemSink& sink) {
  if (total > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max() / 2)) {
    detail::fail({"schedule '" + s.name + "'", detail::concat("has ", total, " actions, more than ppsched indexes"), "",
          "split the step into fewer micro-batches"});
  }
  if (static_cast<std::int64_t>(S) * M > static_cast<std::int64_t>(total)) {
    sink.add(ProblemKind::shape, detail::concat("the schedule declares ", S, " stages and ", M, " micro-batches, which need ",
                                        static_cast<std::int64_t>(S) * M, " forwards, but its programs hold ", total,
                                        " actions in all; set Schedule::microbatches and the placement to what the "
                                        "programs run"));
    return false;
  }
  return true;
}

// The identity table emptied (every slot no_action) and the per-action arrays sized.
PPSCHED_OUTLINE void size_index(FlatSchedule& flat, std::size_t total) {
  const auto ranks = static_cast<std::size_t>(flat.ranks);
  flat.rank_actions.assign(ranks, nullptr);
  flat.owner.resize(total);
  flat.rank_begin.assign(ranks + 1, 0);
  flat.slots.resize(FlatSchedule::slot_stride * static_cast<std::size_t>(flat.stages) *
                    static_cast<std::size_t>(flat.microbatches));
  static_assert(no_action == -1, "no_action is all bits set, so the table is cleared bytewise");
  std::memset(flat.slots.data(), 0xff, flat.slots.size() * sizeof(std::int32_t));
}

// What index_clean_programs left behind when it stopped at a problem, undone: the reporting
// pass starts from an empty table.
PPSCHED_OUTLINE void clear_index(FlatSchedule& flat) noexcept {
  std::memset(flat.slots.data(), 0xff, flat.slots.size() * sizeof(std::int32_t));
  flat.has_backward = false;
  flat.lowered = false;
  flat.has_pairs = false;
  flat.has_memory = false;
  flat.has_copies = false;
  flat.compute_count = 0;
}

// A compute action's flags, and whether it may split the backward and runs on its stage's rank.
PPSCHED_OUTLINE void check_compute_action(const Schedule& s, FlatSchedule& flat, ProblemSink& sink, std::int32_t r,
                                          std::int32_t pos, const Action& a, bool& reported_split) {
  const std::int32_t home = flat.rank_of(a.stage);
  flat.has_backward = flat.has_backward || is_backward(a.op);
  flat.has_pairs = flat.has_pairs || a.group != 0;
  ++flat.compute_count;
  // Once per schedule: every other split action has the same fix.
  if ((a.op == Op::BI || a.op == Op::BW) && !s.split_backward && !reported_split) {
    reported_split = true;
    sink.add(ProblemKind::split_flag, r, pos, a,
             detail::concat(to_string(a), " at ", at_rank(r, pos),
                    " splits the backward, but Schedule::split_backward is false; set it to true so the "
                    "executor asks for backward_input / backward_weight callables"));
  }
  if (home != r) {
    sink.add(ProblemKind::wrong_rank, r, pos, a,
             detail::concat(to_string(a), " is on rank ", r, " (position ", pos, "), but stage ", a.stage,
                    " is placed on rank ", home, "; move it to rank ", home,
                    "'s program or change the placement"));
  }
}

// A memory action's flags, and whether it runs where its activation is and stands alone.
PPSCHED_OUTLINE void check_memory_placement(FlatSchedule& flat, ProblemSink& sink, std::int32_t r, std::int32_t pos,
                                            const Action& a) {
  const std::int32_t home = flat.rank_of(a.stage);
  flat.has_memory = true;
  flat.has_copies = flat.has_copies || is_copy(a.op);
  ++flat.compute_count;
  if (home != r) {
    sink.add(ProblemKind::wrong_rank, r, pos, a,
             detail::concat(to_string(a), " is on rank ", r, " (position ", pos, "), but stage ", a.stage,
                    " is placed on rank ", home, "; a memory action runs on the rank that holds the activation: move it to rank ", home,
                    "'s program"));
  }
  if (a.group != 0) {
    sink.add(ProblemKind::memory_grouped, r, pos, a,
             detail::concat(to_string(a), " at ", at_rank(r, pos), " has group ", a.group,
                    "; groups are overlapped pairs of F and B or communication posted together, and a memory "
                    "action is neither: set its group to 0"));
  }
}

// A send or receive: its peer stage must exist and be remote (false: leave it out of the
// table, its problem named), and the action must be on its stage's rank.
PPSCHED_OUTLINE bool check_comm_action(FlatSchedule& flat, ProblemSink& sink, std::int32_t r, std::int32_t pos,
                                       const Action& a) {
  const std::int32_t home = flat.rank_of(a.stage), last = flat.stages - 1;
  flat.lowered = true;
  const bool forward = a.op == Op::SEND_F || a.op == Op::RECV_F;
  const bool send = is_send(a.op);
  const std::int32_t peer_stage = (a.op == Op::SEND_F || a.op == Op::RECV_B) ? a.stage + 1 : a.stage - 1;
  if (peer_stage < 0 || peer_stage > last) {
    sink.add(ProblemKind::no_peer, r, pos, a,
             detail::concat(to_string(a), " at ", at_rank(r, pos), ": stage ", a.stage, " is the ", a.stage == 0 ? "first" : "last",
                    " stage, so there is no stage ", peer_stage, " to ", send ? "send to" : "receive from",
                    "; remove it"));
    return false;
  }
  if (flat.rank_of(peer_stage) == home) {
    sink.add(ProblemKind::needless_comm, r, pos, a,
             detail::concat(to_string(a), " at ", at_rank(r, pos), " crosses the boundary between stages ", std::min(a.stage, peer_stage),
                    " and ", std::max(a.stage, peer_stage), ", which are both on rank ", home,
                    "; a local boundary needs no communication: remove it"));
    return false;
  }
  if (home != r) {
    const std::int32_t sender_stage = send ? a.stage : peer_stage;
    const std::int32_t receiver_stage = send ? peer_stage : a.stage;
    const Action other{send ? (forward ? Op::RECV_F : Op::RECV_B) : (forward ? Op::SEND_F : Op::SEND_B),
                       peer_stage, a.microbatch, 0};
    sink.add(ProblemKind::wrong_peer, r, pos, a,
             send ? detail::concat(to_string(a), " is on rank ", r, " (position ", pos, "), but stage ", a.stage,
                           " that produces it is placed on rank ", home, "; its receive ", to_string(other),
                           " expects it from rank ", home, ": move the send to rank ", home)
                  : detail::concat(to_string(a), " is on rank ", r, " (position ", pos, "), but stage ", receiver_stage,
                           " is placed on rank ", home, ": ", to_string(other), " from rank ",
                           flat.rank_of(sender_stage), " (stage ", sender_stage, ") goes to rank ", home,
                           "; move the receive to rank ", home));
  }
  return true;
}

// One action's problems; false when it names a stage, micro-batch or peer that does not
// exist, so it has no slot in the table.
PPSCHED_OUTLINE bool check_action(const Schedule& s, FlatSchedule& flat, ProblemSink& sink, std::int32_t r,
                                  std::int32_t pos, const Action& a, bool& reported_split) {
  if (a.stage < 0 || a.stage >= flat.stages) {
    sink.add(ProblemKind::stage_out_of_range, r, pos, a,
             detail::concat(to_string(a), " at ", at_rank(r, pos), " names stage ", a.stage, ", but the schedule has stages 0..",
                    flat.stages - 1, "; use a stage in that range or extend the placement"));
    return false;
  }
  if (a.microbatch < 0 || a.microbatch >= flat.microbatches) {
    sink.add(ProblemKind::microbatch_out_of_range, r, pos, a,
             detail::concat(to_string(a), " at ", at_rank(r, pos), " names micro-batch ", a.microbatch,
                    ", but the schedule has micro-batches 0..", flat.microbatches - 1,
                    "; use one in that range or raise Schedule::microbatches"));
    return false;
  }
  if (is_compute(a.op)) {
    check_compute_action(s, flat, sink, r, pos, a, reported_split);
    return true;
  }
  if (is_memory(a.op)) {
    check_memory_placement(flat, sink, r, pos, a);
    return true;
  }
  return check_comm_action(flat, sink, r, pos, a);
}

// The action's slot in the identity table, or the duplicate it would overwrite named.
PPSCHED_OUTLINE void record_action(FlatSchedule& flat, ProblemSink& sink, std::int32_t r, std::int32_t pos,
                                   std::int32_t index, const Action& a) {
  std::int32_t& slot = flat.slots[flat.slot_index(a.op, a.stage, a.microbatch)];
  if (slot != no_action) {
    const std::int32_t first_rank = flat.owner[static_cast<std::size_t>(slot)];
    sink.add(ProblemKind::duplicate, r, pos, a,
             detail::concat(to_string(a), " appears twice: at ", at_rank(first_rank, flat.position(slot)), " and at ", at_rank(r, pos),
                    "; each action runs exactly once per step: remove one"));
  } else {
    slot = index;
  }
}

// index_clean_programs' work again, naming every problem of every action as it goes.
PPSCHED_OUTLINE void index_reporting_programs(const Schedule& s, const std::vector<const std::vector<Action>*>& programs,
                                              FlatSchedule& flat, ProblemSink& sink) {
  std::int32_t next_index = 0;
  bool reported_split = false;
  for (std::int32_t r = 0; r < flat.ranks; ++r) {
    flat.rank_begin[static_cast<std::size_t>(r)] = next_index;
    const auto& prog = *programs[static_cast<std::size_t>(r)];
    flat.rank_actions[static_cast<std::size_t>(r)] = prog.data();
    std::int32_t pos = -1;
    for (const Action& a : prog) {
      ++pos;
      const std::int32_t index = next_index++;
      flat.owner[static_cast<std::size_t>(index)] = r;
      if (check_action(s, flat, sink, r, pos, a, reported_split)) record_action(flat, sink, r, pos, index, a);
    }
  }
}

// Two indexed actions (no_action: neither) on one rank, where program order is issue order.
[[nodiscard]] inline bool on_same_rank(const FlatSchedule& flat, std::int32_t x, std::int32_t y) noexcept {
  return x != no_action && y != no_action && flat.owner[static_cast<std::size_t>(x)] == flat.owner[static_cast<std::size_t>(y)];
}

// "F(0, 1) (rank 0, position 2)": an indexed action and where it is.
[[nodiscard]] inline std::string describe_indexed(const FlatSchedule& flat, std::int32_t x) {
  return detail::concat(to_string(flat.at(x)), " (", at_rank(flat.owner[static_cast<std::size_t>(x)], flat.position(x)), ")");
}

// `early` is issued before `late` though `why` needs it after: reported at `early`.
PPSCHED_OUTLINE void report_order(const FlatSchedule& flat, ProblemSink& sink, ProblemKind kind, std::int32_t late,
                                  std::int32_t early, const char* why) {
  sink.add(kind, flat.owner[static_cast<std::size_t>(early)], flat.position(early), flat.at(early),
           detail::concat(describe_indexed(flat, early), " comes before ", describe_indexed(flat, late), ", but ", why, "; move ",
                  to_string(flat.at(late)), " before ", to_string(flat.at(early))));
}

// Every (stage, micro-batch) runs its F once and, when the schedule has backwards anywhere,
// one B or one BI and one BW.
PPSCHED_OUTLINE void check_compute_complete(const FlatSchedule& flat, ProblemSink& sink) {
  for (std::int32_t st = 0; st < flat.stages; ++st) {
    const std::int32_t home = flat.rank_of(st);
    for (std::int32_t mb = 0; mb < flat.microbatches; ++mb) {
      if (flat.find(Op::F, st, mb) == no_action) {
        sink.add(ProblemKind::missing_compute, home, -1, Action{Op::F, st, mb, 0},
                 detail::concat(to_string(Action{Op::F, st, mb, 0}), " is missing: every (stage, micro-batch) runs its forward "
                        "once; add it to rank ", home, "'s program"));
      }
      if (!flat.has_backward) continue;
      const bool b = flat.find(Op::B, st, mb) != no_action;
      const bool bi = flat.find(Op::BI, st, mb) != no_action;
      const bool bw = flat.find(Op::BW, st, mb) != no_action;
      if (b && (bi || bw)) {
        sink.add(ProblemKind::mixed_backward, home, -1, Action{Op::B, st, mb, 0},
                 detail::concat("micro-batch ", mb, " on stage ", st, " has both B and ", bi ? "BI" : "BW",
                        ": its backward is either one B or a BI then a BW; remove one form"));
      } else if (!b && !bi && !bw) {
        sink.add(ProblemKind::missing_compute, home, -1, Action{Op::B, st, mb, 0},
                 detail::concat("the backward of micro-batch ", mb, " on stage ", st, " is missing (", to_string(Action{Op::B, st, mb, 0}),
                        ", or ", to_string(Action{Op::BI, st, mb, 0}), " then ", to_string(Action{Op::BW, st, mb, 0}),
                        "); the schedule has backwards elsewhere, so add it to rank ", home, "'s program"));
      } else if (bi != bw) {
        const Action absent{bi ? Op::BW : Op::BI, st, mb, 0};
        sink.add(ProblemKind::missing_compute, home, -1, absent,
                 detail::concat(to_string(absent), " is missing: a split backward runs BI then BW; add it to rank ", home,
                        "'s program"));
      }
    }
  }
}

// One transfer of a lowered schedule: its send and its receive, each present.
PPSCHED_OUTLINE void check_transfer(const Schedule& s, const FlatSchedule& flat, ProblemSink& sink, Op send_op,
                                    std::int32_t from, Op recv_op, std::int32_t to, std::int32_t mb) {
  const std::int32_t snd = flat.find(send_op, from, mb);
  const std::int32_t rcv = flat.find(recv_op, to, mb);
  const Action send_action{send_op, from, mb, 0}, recv_action{recv_op, to, mb, 0};
  const std::int32_t rf = flat.rank_of(from), rt = flat.rank_of(to);
  if (snd == no_action && rcv == no_action) {
    sink.add(ProblemKind::missing_transfer, rf, -1, send_action,
             detail::concat("the transfer ", to_string(send_action), " (rank ", rf, ") -> ", to_string(recv_action), " (rank ",
                    rt, ") has neither its send nor its receive, while the schedule communicates elsewhere; "
                    "a lowered schedule carries every transfer: add both, or lower() the compute-only schedule"));
  } else if (snd == no_action) {
    sink.add(ProblemKind::missing_send, rf, -1, send_action,
             detail::concat(to_string(send_action), " is missing on rank ", rf, ": ", to_string(recv_action), " at ",
                    at_rank(flat.owner[static_cast<std::size_t>(rcv)], flat.position(rcv)),
                    " waits for it; add it to rank ", rf, "'s program after ",
                    to_string(Action{send_op == Op::SEND_F ? Op::F : (s.split_backward ? Op::BI : Op::B), from, mb, 0})));
  } else if (rcv == no_action) {
    sink.add(ProblemKind::missing_recv, rt, -1, recv_action,
             detail::concat(to_string(send_action), " at ", at_rank(flat.owner[static_cast<std::size_t>(snd)], flat.position(snd)),
                    " has no matching receive: ", to_string(recv_action), " is missing on rank ", rt,
                    "; add it to rank ", rt, "'s program before the compute that needs it"));
  }
}

// Every boundary between two ranks carries each micro-batch's activation forward and, with
// backwards, its gradient back.
PPSCHED_OUTLINE void check_transfers_complete(const Schedule& s, const FlatSchedule& flat, ProblemSink& sink) {
  for (std::int32_t st = 0; st + 1 < flat.stages; ++st) {
    if (flat.rank_of(st) == flat.rank_of(st + 1)) continue;
    for (std::int32_t mb = 0; mb < flat.microbatches; ++mb) {
      check_transfer(s, flat, sink, Op::SEND_F, st, Op::RECV_F, st + 1, mb);
      if (flat.has_backward) check_transfer(s, flat, sink, Op::SEND_B, st + 1, Op::RECV_B, st, mb);
    }
  }
}

// The dependencies within one rank, in issue order (the programs are issue orders, so index
// order is issue order): forward before backward, BI before BW, local stage boundaries, and
// (lowered) receives before their consumers and sends after their producers.
PPSCHED_OUTLINE void check_rank_orders(const FlatSchedule& flat, ProblemSink& sink) {
  const std::int32_t S = flat.stages;
  for (std::int32_t st = 0; st < S; ++st) {
    for (std::int32_t mb = 0; mb < flat.microbatches; ++mb) {
      const std::int32_t f = flat.find(Op::F, st, mb);
      const std::int32_t bin = flat.backward_input(st, mb);
      if (on_same_rank(flat, f, bin) && bin < f) {
        report_order(flat, sink, ProblemKind::backward_before_forward, f, bin, "a backward needs the activation its forward stores");
      }
      const std::int32_t bi = flat.find(Op::BI, st, mb), bw = flat.find(Op::BW, st, mb);
      if (on_same_rank(flat, bi, bw) && bw < bi) {
        report_order(flat, sink, ProblemKind::weight_before_input, bi, bw, "BW uses the output gradient that BI consumes first");
      }
      if (st + 1 < S && flat.rank_of(st) == flat.rank_of(st + 1)) {
        const std::int32_t f_next = flat.find(Op::F, st + 1, mb);
        if (on_same_rank(flat, f, f_next) && f_next < f) {
          report_order(flat, sink, ProblemKind::local_order, f, f_next,
                       "both stages are on this rank and the next stage's forward consumes this one's output");
        }
        const std::int32_t bin_next = flat.backward_input(st + 1, mb);
        if (on_same_rank(flat, bin, bin_next) && bin < bin_next) {
          report_order(flat, sink, ProblemKind::local_order, bin_next, bin,
                       "both stages are on this rank and a stage's backward consumes the next stage's input gradient");
        }
      }
      if (!flat.lowered) continue;
      const std::int32_t recv_f = flat.find(Op::RECV_F, st, mb), send_f = flat.find(Op::SEND_F, st, mb);
      const std::int32_t recv_b = flat.find(Op::RECV_B, st, mb), send_b = flat.find(Op::SEND_B, st, mb);
      const char* recv_why = "the compute waits on the receive's completion event, which must be recorded first";
      const char* send_why = "the send waits on the compute's completion event, which must be recorded first";
      if (on_same_rank(flat, recv_f, f) && f < recv_f) report_order(flat, sink, ProblemKind::recv_after_consumer, recv_f, f, recv_why);
      if (on_same_rank(flat, recv_b, bin) && bin < recv_b) report_order(flat, sink, ProblemKind::recv_after_consumer, recv_b, bin, recv_why);
      if (on_same_rank(flat, send_f, f) && send_f < f) report_order(flat, sink, ProblemKind::send_before_producer, f, send_f, send_why);
      if (on_same_rank(flat, send_b, bin) && send_b < bin) report_order(flat, sink, ProblemKind::send_before_producer, bin, send_b, send_why);
    }
  }
}

// One group id is one contiguous run of actions on a rank: a pair runs as one unit, and a
// communication group is posted as one.
PPSCHED_OUTLINE void check_groups_contiguous(const FlatSchedule& flat, ProblemSink& sink) {
  for (std::int32_t r = 0; r < flat.ranks; ++r) {
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
      std::uint32_t& last_of_kind = is_compute(prog[i - begin].op) ? last_pair : last_comm;
      increasing = g > last_of_kind;
      last_of_kind = g;
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
               detail::concat("group ", runs[k].first, " on rank ", r, " is not contiguous: it starts at position ",
                      flat.position(runs[k - 1].second), " and again at position ", flat.position(i),
                      is_compute(flat.at(i).op)
                          ? "; an overlapped pair runs as one unit, so its two actions must be adjacent: renumber or "
                            "move them"
                          : "; a group is posted as one unit, so its actions must be consecutive: renumber or move them"));
    }
  }
}

// NCCL matches the messages between two ranks in posting order (it has no tags), so each
// ordered pair of ranks must post its sends and its receives in the same order. Called with
// every transfer matched one to one: the receives of rank b from rank a are then posted in
// rank a's send order exactly when their sends' indices increase along b's program.
PPSCHED_OUTLINE void check_posting_order(const FlatSchedule& flat, ProblemSink& sink) {
  std::vector<std::vector<std::pair<std::int32_t, std::int32_t>>> last_send(static_cast<std::size_t>(flat.ranks));
  std::vector<std::pair<std::int32_t, std::int32_t>> reported;  // (from, to) pairs already reported
  for (std::int32_t to = 0; to < flat.ranks; ++to) {
    const std::int32_t begin = flat.rank_begin[static_cast<std::size_t>(to)];
    const std::int32_t end = flat.rank_begin[static_cast<std::size_t>(to) + 1];
    const Action* prog = flat.rank_actions[static_cast<std::size_t>(to)];
    for (std::int32_t i = begin; i < end; ++i) {
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
               detail::concat("rank ", from, " and rank ", to, " post their messages in different orders: rank ", to,
                      " receives ", describe_indexed(flat, previous_recv), " before ", describe_indexed(flat, i), ", but rank ", from, " sends ",
                      describe_indexed(flat, q), " before ", describe_indexed(flat, previous),
                      ". NCCL matches point-to-point messages between two ranks in posting order (it has no tags), "
                      "so these receives would get each other's data; post the receives in the order the peer "
                      "sends (lower() does)"));
    }
  }
}

PPSCHED_OUTLINE bool static_checks(const Schedule& s, FlatSchedule& flat, ProblemSink& sink, bool skip_comm,
                          bool proven) {
  if (!check_schedule_shape(s, sink)) return false;
  flat.ranks = s.ranks;
  flat.stages = s.stages();
  flat.microbatches = s.microbatches;
  flat.placement = s.placement;

  const std::vector<const std::vector<Action>*> programs = programs_to_index(s, skip_comm, flat);
  std::size_t total = 0;
  for (const auto* prog : programs) total += prog->size();
  if (!check_action_count(s, flat.stages, flat.microbatches, total, sink)) return false;
  size_index(flat, total);

  // Most schedules have nothing to report here: a tight loop indexes them, and only when it
  // meets a problem does the loop that names each one start again from scratch.
  const bool indexed = index_clean_programs(programs, s.split_backward, flat);
  if (!indexed) {
    clear_index(flat);
    index_reporting_programs(s, programs, flat, sink);
  }
  flat.rank_begin[static_cast<std::size_t>(s.ranks)] = static_cast<std::int32_t>(total);
  if (proven && indexed) return true;

  // The checks below name each problem they find, which makes them heavy; a schedule that
  // passed the per-action checks usually has none, and one light pass over the identity
  // table says so (it tests exactly the conditions they report).
  if (sink.any() || !table_consistent(flat)) {
    check_compute_complete(flat, sink);
    if (flat.lowered) check_transfers_complete(s, flat, sink);
    check_rank_orders(flat, sink);
    if (flat.has_memory) check_memory_actions(flat, sink);
  }

  if (flat.has_pairs) check_pairs(flat, sink);
  if (!flat.lowered && !flat.has_pairs) return true;
  check_groups_contiguous(flat, sink);
  if (!flat.lowered) return true;
  if (!sink.any()) check_posting_order(flat, sink);
  return true;
}

}  // namespace ppsched::PPSCHED_MODE::detail

namespace ppsched::inline PPSCHED_MODE::detail {

[[nodiscard]] PPSCHED_OUTLINE bool index_clean_programs(const std::vector<const std::vector<Action>*>& programs,
                                               bool split_backward, FlatSchedule& flat) noexcept {
  const auto S = static_cast<std::uint32_t>(flat.stages), M = static_cast<std::uint32_t>(flat.microbatches);
  const std::int32_t* const placement = flat.placement.data();
  std::int32_t* const slots = flat.slots.data();
  std::int32_t* const owner = flat.owner.data();
  bool has_backward = false, lowered = false, has_pairs = false, has_memory = false, has_copies = false;
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
      } else if (is_memory(a.op)) {
        if (a.group != 0) return false;
        has_memory = true;
        has_copies = has_copies || is_copy(a.op);
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
  flat.has_memory = has_memory;
  flat.has_copies = has_copies;
  flat.compute_count = compute_count;
  return true;
}

[[nodiscard]] PPSCHED_OUTLINE bool table_consistent(const FlatSchedule& flat) noexcept {
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
      if (flat.has_memory) {
        // F -> R -> B/BI, F -> OFFLOAD -> RELOAD -> B/BI, or both: F -> OFFLOAD -> RELOAD -> R ->
        // B/BI (the checkpoints of a recomputation offloaded).
        constexpr auto R = static_cast<std::size_t>(Op::R);
        constexpr auto OFFLOAD = static_cast<std::size_t>(Op::OFFLOAD), RELOAD = static_cast<std::size_t>(Op::RELOAD);
        const std::int32_t r = line[R], off = line[OFFLOAD], rel = line[RELOAD];
        if (r != no_action || off != no_action || rel != no_action) {
          if (bin == no_action) return false;
          if ((off == no_action) != (rel == no_action)) return false;
          if (r != no_action && !((off != no_action ? rel : f) < r && r < bin)) return false;
          if (off != no_action && !(f < off && off < rel && rel < bin)) return false;
        }
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

PPSCHED_OUTLINE void check_pairs(const FlatSchedule& flat, ProblemSink& sink) {
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
                 detail::concat(to_string(prog[c]), " at ", at_rank(r, c), " shares group ", g,
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
                 detail::concat("group ", g, " at ", at_rank(r, first), " holds ", size, " compute action",
                        size == 1 ? "" : "s", " (", to_string(a), size == 1 ? "" : ", ...",
                        "); a compute group is an overlapped pair of exactly two adjacent actions: ",
                        size == 1 ? "set its group to 0 or put its partner next to it" : "split it into pairs"));
        continue;
      }
      const Action& b = prog[first + 1];
      const auto backward = [](Op op) { return op == Op::B || op == Op::BI; };
      if (!((a.op == Op::F && backward(b.op)) || (backward(a.op) && b.op == Op::F))) {
        sink.add(ProblemKind::pair_ops, r, first, a,
                 detail::concat("the pair ", to_string(a), " and ", to_string(b), " at ", at_rank(r, first),
                        " is not one forward and one backward (B or BI); only an F and a backward overlap: set "
                        "their group to 0"));
        continue;
      }
      if (a.microbatch == b.microbatch) {
        sink.add(ProblemKind::pair_dependent, r, first, a,
                 detail::concat("the pair ", to_string(a), " and ", to_string(b), " at ", at_rank(r, first),
                        " is of one micro-batch, whose backward needs that forward's result (through the loss), "
                        "so the pair could never start; pair the forward with another micro-batch's backward"));
      }
    }
  }
}

PPSCHED_OUTLINE void check_memory_actions(const FlatSchedule& flat, ProblemSink& sink) {
  const auto describe = [&](std::int32_t x) {
    return detail::concat(to_string(flat.at(x)), " (", at_rank(flat.owner[static_cast<std::size_t>(x)], flat.position(x)), ")");
  };
  const auto place = [&](std::int32_t x, ProblemKind kind, const std::string& message) {
    sink.add(kind, flat.owner[static_cast<std::size_t>(x)], flat.position(x), flat.at(x), message);
  };
  const auto same_rank = [&](std::int32_t x, std::int32_t y) {
    return x != no_action && y != no_action && flat.owner[static_cast<std::size_t>(x)] == flat.owner[static_cast<std::size_t>(y)];
  };
  // `early` must come before `late` in the rank's program.
  const auto order = [&](std::int32_t early, std::int32_t late, const char* why) {
    if (!same_rank(early, late) || early < late) return;
    place(late, ProblemKind::memory_order,
          detail::concat(describe(late), " comes before ", describe(early), ", but ", why, "; move ", to_string(flat.at(late)),
                 " after ", to_string(flat.at(early))));
  };
  for (std::int32_t st = 0; st < flat.stages; ++st) {
    for (std::int32_t mb = 0; mb < flat.microbatches; ++mb) {
      const std::int32_t r = flat.find(Op::R, st, mb), off = flat.find(Op::OFFLOAD, st, mb);
      const std::int32_t rel = flat.find(Op::RELOAD, st, mb);
      if (r == no_action && off == no_action && rel == no_action) continue;
      const std::int32_t f = flat.find(Op::F, st, mb), bin = flat.backward_input(st, mb);
      const std::int32_t any = r != no_action ? r : (off != no_action ? off : rel);
      if (bin == no_action) {
        place(any, ProblemKind::memory_unmatched,
              detail::concat(describe(any), " keeps an activation for a backward, but micro-batch ", mb, " on stage ", st,
                     " has no B or BI in this schedule; remove it (a forward-only step stores nothing)"));
        continue;
      }
      if (off != no_action && rel == no_action) {
        place(off, ProblemKind::memory_unmatched,
              detail::concat(describe(off), " moves the activation to host memory, but nothing brings it back: add ",
                     to_string(Action{Op::RELOAD, st, mb, 0}), " before ", to_string(flat.at(bin))));
        continue;
      }
      if (rel != no_action && off == no_action) {
        place(rel, ProblemKind::memory_unmatched,
              detail::concat(describe(rel), " brings back an activation that was never offloaded: add ",
                     to_string(Action{Op::OFFLOAD, st, mb, 0}), " after ", to_string(Action{Op::F, st, mb, 0}),
                     ", or remove it"));
        continue;
      }
      if (r != no_action && off != no_action) {
        // The checkpoints R recomputes from are offloaded: they must be back before R.
        order(f, off, "OFFLOAD copies the checkpoints F keeps");
        order(off, rel, "RELOAD brings back what OFFLOAD moved to host memory");
        order(rel, r, "R recomputes from the checkpoints RELOAD brings back");
        order(r, bin, "the backward needs the activation R restores");
      } else if (r != no_action) {
        order(f, r, "R re-runs the forward from the input that F keeps");
        order(r, bin, "the backward needs the activation R restores");
      } else {
        order(f, off, "OFFLOAD copies the activation F stores");
        order(off, rel, "RELOAD brings back what OFFLOAD moved to host memory");
        order(rel, bin, "the backward needs the activation RELOAD brings back");
      }
    }
  }
}

}  // namespace ppsched
