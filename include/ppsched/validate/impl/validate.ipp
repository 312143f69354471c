// The bodies of <ppsched/validate/validate.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE::detail {

PPSCHED_OUTLINE ValidationReport validate_proven(const LoweredSchedule& lowered, const ValidateOptions& options,
                                        FlatSchedule& flat) {
  const Schedule& s = lowered.schedule();
  ValidationReport report;
  report.schedule_name = s.name;
  report.lowered = lowered.communicates();
  flat.ranks = s.ranks;
  flat.stages = s.stages();
  flat.microbatches = s.microbatches;
  flat.lowered = lowered.communicates();
  flat.has_backward = lowered.has_backward();
  flat.has_pairs = lowered.has_pairs();
  check_memory_options(options, flat.stages);
  flat.placement = s.placement;  // the M_B weight of each stage
  // The memory walk reads only the programs, rank by rank.
  flat.rank_actions.resize(s.programs.size());
  flat.rank_begin.assign(s.programs.size() + 1, 0);
  for (std::size_t r = 0; r < s.programs.size(); ++r) {
    flat.rank_actions[r] = s.programs[r].data();
    flat.rank_begin[r + 1] = flat.rank_begin[r] + static_cast<std::int32_t>(s.programs[r].size());
  }
  measure_memory(flat, stage_sizes(options), stage_fractions(options.memory), report);
  report.deadlock_checked = options.check_deadlock;
  return report;
}

PPSCHED_OUTLINE ValidationReport validate_into(const Schedule& s, const ValidateOptions& options, Workspace& ws) {
  FlatSchedule& flat = ws.flat();
  ValidationReport report;
  report.schedule_name = s.name;
  ProblemSink sink(report.problems, report.unlisted_problems, options.max_problems);
  if (!static_checks(s, flat, sink)) return report;
  report.lowered = flat.lowered;
  check_memory_options(options, flat.stages);
  measure_memory(flat, stage_sizes(options), stage_fractions(options.memory), report);
  if (sink.any() || !options.check_deadlock) return report;
  report.deadlock_checked = true;
  // Communication on the compute stream only adds waits to those of a separate comm stream
  // (each action waits for everything before it on the rank, not just for its own stream),
  // and every rule is monotone, so a run that completes with one stream per rank completes
  // with two. One run proves both settings; on a deadlock, the separate-stream run says
  // whether it deadlocks there too.
  AbstractExecution single(flat, StreamMode::comm_on_compute_stream, &ws.execution());
  if (single.run()) return report;
  if (!flat.lowered) {
    sink.add(ProblemKind::deadlock, detail::concat("deadlock: the compute order is impossible: ", single.describe_stuck(),
                                           "\n  fix: order each rank's program so that every action's inputs can be "
                                           "computed first"));
    return report;
  }
  // Its own arrays: `single` is still read when it is the one reported.
  AbstractExecution separate(flat, StreamMode::separate_comm_stream);
  const bool separate_ok = separate.run();
  const AbstractExecution& stuck = separate_ok ? single : separate;
  sink.add(ProblemKind::deadlock,
           detail::concat("deadlock under rendezvous with ",
                  separate_ok ? "communication on the compute stream (with a separate comm stream it runs)"
                              : "communication on its own stream (and on the compute stream)",
                  ": ", stuck.describe_stuck(),
                  "\n  fix: post each send's receive before anything that waits for that send completes, group "
                  "sends and receives that must progress together, or lower() the compute-only schedule"));
  return report;
}

}  // namespace ppsched::PPSCHED_MODE::detail
