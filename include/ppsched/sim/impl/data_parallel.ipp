// The bodies of <ppsched/sim/data_parallel.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

PPSCHED_OUTLINE void check_all_reduce_model(const AllReduceModel& m) {
  if (m.replicas < 1) {
    detail::fail({"all-reduce model", detail::concat("replicas = ", m.replicas), "AllReduceModel::replicas", "give at least 1 replica"});
  }
  if (!(m.link.latency >= 0.0 && m.link.latency <= std::numeric_limits<double>::max())) {
    detail::fail({"all-reduce model", detail::concat("link latency ", m.link.latency), "AllReduceModel::link.latency",
          "give a finite latency >= 0 in the model's time unit"});
  }
  if (!(m.link.bandwidth > 0.0)) {
    detail::fail({"all-reduce model", detail::concat("link bandwidth ", m.link.bandwidth), "AllReduceModel::link.bandwidth",
          "give bytes per time unit > 0, or infinity for free bytes"});
  }
}

}  // namespace detail
}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE double all_reduce_time(double bytes, const AllReduceModel& model) {
  detail::check_all_reduce_model(model);
  if (!(bytes >= 0.0 && bytes <= std::numeric_limits<double>::max())) {
    detail::fail({"all_reduce_time", detail::concat("size ", bytes, " bytes"), "bytes", "give a finite size >= 0"});
  }
  const double d = model.replicas;
  if (model.replicas == 1) return 0.0;
  const double a = model.link.latency, per_byte = 1.0 / model.link.bandwidth;
  const double time = model.algorithm == AllReduceAlgorithm::ring
                          ? 2.0 * (d - 1.0) * a + 2.0 * (d - 1.0) / d * bytes * per_byte
                          : 2.0 * std::ceil(std::log2(d)) * a + 2.0 * bytes * per_byte;
  // A bandwidth near zero (1e-300) or a latency near the top of the range make a time no
  // double holds; a plan priced with it would "win" or lose by infinity (issue 24).
  if (!(time <= std::numeric_limits<double>::max())) {
    detail::fail({"all-reduce model",
          detail::concat("all-reducing ", bytes, " bytes over ", model.replicas, " replicas at bandwidth ",
                         model.link.bandwidth, " and latency ", model.link.latency,
                         " takes longer than a double holds (the time is not finite)"),
          "AllReduceModel::link.bandwidth",
          "give the link's real bandwidth in bytes per time unit of the model (and a latency in that unit)"});
  }
  return time;
}

}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

PPSCHED_OUTLINE double run_data_parallel(std::vector<StageAllReduce>& stages, const std::vector<double>& duration,
                                 const std::vector<double>& compute_end, std::span<const double> optimizer_time,
                                 std::vector<double>& rank_end) {
  // A rank's all-reduces share its one data-parallel channel (one NCCL communicator, one
  // stream), in the order their gradients are ready; ties in stage order.
  std::vector<std::size_t> order(stages.size());
  for (std::size_t s = 0; s < order.size(); ++s) order[s] = s;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t x, std::size_t y) { return stages[x].weights_done < stages[y].weights_done; });
  std::vector<double> channel(compute_end.size(), 0.0);
  rank_end = compute_end;
  for (const std::size_t s : order) {
    StageAllReduce& st = stages[s];
    const auto r = static_cast<std::size_t>(st.rank);
    st.start = std::max(st.weights_done, channel[r]);
    st.end = st.start + duration[s];
    channel[r] = st.end;
    rank_end[r] = std::max(rank_end[r], st.end);
  }
  for (std::size_t s = 0; s < stages.size(); ++s) {
    if (!optimizer_time.empty()) rank_end[static_cast<std::size_t>(stages[s].rank)] += optimizer_time[s];
  }
  double end = 0.0;
  for (const double e : rank_end) end = std::max(end, e);
  return end;
}

}  // namespace detail
}  // namespace ppsched

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE DataParallelStep data_parallel_step(const Timeline& pipeline, std::span<const double> gradient_bytes,
                                                         const AllReduceModel& model,
                                                         std::span<const double> optimizer_time) {
  using detail::concat;
  detail::check_all_reduce_model(model);
  DataParallelStep out;
  out.replicas = model.replicas;
  if (pipeline.spans.empty() || pipeline.ranks < 1) {
    detail::fail({"data_parallel_step", "the pipeline timeline is empty", "pipeline", "simulate the schedule with record_timeline on"});
  }
  double origin = std::numeric_limits<double>::infinity(), last = -origin;
  std::int32_t stages = 0;
  for (const Span& s : pipeline.spans) {
    origin = std::min(origin, s.start);
    last = std::max(last, s.end);
    stages = std::max(stages, s.action.stage + 1);
  }
  const auto S = static_cast<std::size_t>(stages);
  if (gradient_bytes.size() != S) {
    detail::fail({"data_parallel_step", detail::concat(gradient_bytes.size(), " gradient sizes for a pipeline of ", stages, " stages"),
          "gradient_bytes", "give one size per (virtual) stage"});
  }
  if (!optimizer_time.empty() && optimizer_time.size() != S) {
    detail::fail({"data_parallel_step", detail::concat(optimizer_time.size(), " optimizer times for a pipeline of ", stages, " stages"),
          "optimizer_time", "give one time per (virtual) stage, or none"});
  }
  for (std::size_t s = 0; s < S; ++s) {
    for (const auto& [v, what] : {std::pair{gradient_bytes[s], "gradient_bytes"},
                                  std::pair{optimizer_time.empty() ? 0.0 : optimizer_time[s], "optimizer_time"}}) {
      if (!(v >= 0.0 && v <= std::numeric_limits<double>::max())) {
        detail::fail({"data_parallel_step", detail::concat(what, "[", s, "] is ", v), detail::concat(what, "[", s, "]"), "give a finite value >= 0"});
      }
    }
  }
  out.pipeline_time = last - origin;
  out.stages.assign(S, StageAllReduce{});
  std::vector<bool> has_weights(S, false);
  std::vector<double> compute_end(static_cast<std::size_t>(pipeline.ranks), 0.0);
  for (const Span& sp : pipeline.spans) {
    if (sp.rank < 0 || sp.rank >= pipeline.ranks) {
      detail::fail({"data_parallel_step", detail::concat("a span names rank ", sp.rank, " of ", pipeline.ranks), "pipeline.spans",
            "give a timeline whose spans name its own ranks"});
    }
    compute_end[static_cast<std::size_t>(sp.rank)] = std::max(compute_end[static_cast<std::size_t>(sp.rank)], sp.end - origin);
    if (sp.action.op != Op::B && sp.action.op != Op::BW) continue;
    StageAllReduce& st = out.stages[static_cast<std::size_t>(sp.action.stage)];
    st.rank = sp.rank;
    st.weights_done = std::max(st.weights_done, sp.end - origin);
    has_weights[static_cast<std::size_t>(sp.action.stage)] = true;
  }
  std::vector<double> duration(S, 0.0);
  for (std::size_t s = 0; s < S; ++s) {
    if (!has_weights[s]) {
      detail::fail({"data_parallel_step", detail::concat("stage ", s, " has no weight-gradient action (B or BW) in the timeline"), "pipeline",
            "data parallelism sums weight gradients: give a training schedule's timeline"});
    }
    out.stages[s].gradient_bytes = gradient_bytes[s];
    duration[s] = all_reduce_time(gradient_bytes[s], model);
    out.all_reduce_longest = std::max(out.all_reduce_longest, duration[s]);
  }
  // The same step with free all-reduces, for what they add.
  std::vector<StageAllReduce> free_stages = out.stages;
  std::vector<double> free_end;
  const double without = detail::run_data_parallel(free_stages, std::vector<double>(S, 0.0), compute_end, optimizer_time, free_end);
  out.step_time = std::max(out.pipeline_time,
                           detail::run_data_parallel(out.stages, duration, compute_end, optimizer_time, out.rank_end));
  out.all_reduce_exposed = out.step_time - std::max(out.pipeline_time, without);
  if (!(out.step_time <= std::numeric_limits<double>::max())) {
    detail::fail({"data_parallel_step",
          detail::concat("the step time is not finite: the pipeline's ", out.pipeline_time,
                 " plus the all-reduces and optimizer steps overflow a double"),
          "optimizer_time, model.link", "give finite times that sum within the range of a double"});
  }
  return out;
}

}  // namespace ppsched
