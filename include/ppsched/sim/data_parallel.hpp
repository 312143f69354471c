// Data x pipeline parallelism in the simulator: d replicas of one pipeline, each stage's weight
// gradient summed across its d replicas by an all-reduce. The replicas run the same schedule on
// the same costs, so one replica's simulated Timeline stands for all of them; what data
// parallelism adds is the all-reduce of each stage, which starts when that stage's last
// weight-gradient action (BW, or B where the schedule does not split it) ends and so overlaps
// the pipeline's drain, and the optimizer, which runs once a rank's compute and its stages'
// all-reduces are done. The step ends when the last rank's optimizer does.
//
// Cost of one all-reduce of n bytes over d replicas joined by a link of latency a and
// bandwidth w (docs/data-parallel.md derives both):
//   ring  2(d-1) a + 2(d-1)/d x n / w   (reduce-scatter then all-gather, d-1 steps each)
//   tree  2 ceil(log2 d) a + 2 n / w    (pipelined reduce up a binary tree, then broadcast down)
// and nothing for d = 1.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <vector>

#include "ppsched/error.hpp"
#include "ppsched/graph/hardware.hpp"
#include "ppsched/schedule/action.hpp"
#include "ppsched/trace/timeline.hpp"

namespace ppsched::inline PPSCHED_MODE {

enum class AllReduceAlgorithm : std::uint8_t { ring, tree };

[[nodiscard]] constexpr std::string_view all_reduce_algorithm_name(AllReduceAlgorithm a) noexcept {
  return a == AllReduceAlgorithm::ring ? "ring" : "tree";
}

// How a stage's replicas are joined: how many, over which link, with which algorithm. Each
// stage's replicas form their own group with the link's full bandwidth (one NIC per device,
// as a rail-optimised cluster gives); the groups of different stages do not share it.
struct AllReduceModel {
  std::int32_t replicas = 1;
  Interconnect link{};
  AllReduceAlgorithm algorithm = AllReduceAlgorithm::ring;
};

namespace detail {

PPSCHED_OUTLINE void check_all_reduce_model(const AllReduceModel& m);

}  // namespace detail

// The time `model.replicas` replicas take to all-reduce `bytes` (formulas above). Throws
// ppsched::error for a negative or non-finite size or a bad model.
[[nodiscard]] PPSCHED_OUTLINE double all_reduce_time(double bytes, const AllReduceModel& model);

// One stage's all-reduce in a step.
struct StageAllReduce {
  std::int32_t rank = 0;
  double gradient_bytes = 0.0;
  double weights_done = 0.0;  // end of the stage's last BW (or B)
  double start = 0.0;         // when the rank's data-parallel channel takes it up
  double end = 0.0;

  friend bool operator==(const StageAllReduce&, const StageAllReduce&) = default;
};

// A data-parallel step predicted from one replica's pipeline timeline. Times are from the
// timeline's earliest start.
struct DataParallelStep {
  std::int32_t replicas = 1;
  double pipeline_time = 0.0;       // the replica's makespan: compute and transfers
  double step_time = 0.0;           // every all-reduce and every optimizer done
  double all_reduce_exposed = 0.0;  // what the all-reduces add: step_time minus the same step with free all-reduces
  double all_reduce_longest = 0.0;  // the longest single stage all-reduce
  std::vector<StageAllReduce> stages;
  std::vector<double> rank_end;  // per rank: its optimizer done

  friend bool operator==(const DataParallelStep&, const DataParallelStep&) = default;
};

namespace detail {

// The step's end per rank, given each stage's all-reduce duration (filled into `stages`).
PPSCHED_OUTLINE double run_data_parallel(std::vector<StageAllReduce>& stages, const std::vector<double>& duration,
                                 const std::vector<double>& compute_end, std::span<const double> optimizer_time,
                                 std::vector<double>& rank_end);

}  // namespace detail

// Predicts the data-parallel step of `model.replicas` copies of the pipeline whose one-replica
// timeline is `pipeline` (simulate()'s, or a measured one): `gradient_bytes` per (virtual)
// stage, `optimizer_time` per stage (empty: free). Throws ppsched::error when the sizes do not
// match the timeline's stages, a stage has no weight-gradient action (a forward-only
// schedule), or a value is negative or not finite.
[[nodiscard]] inline DataParallelStep data_parallel_step(const Timeline& pipeline, std::span<const double> gradient_bytes,
                                                         const AllReduceModel& model,
                                                         std::span<const double> optimizer_time = {}) {
  using detail::concat;
  detail::check_all_reduce_model(model);
  DataParallelStep out;
  out.replicas = model.replicas;
  if (pipeline.spans.empty() || pipeline.ranks < 1) {
    fail({"data_parallel_step", "the pipeline timeline is empty", "pipeline", "simulate the schedule with record_timeline on"});
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
    fail({"data_parallel_step", concat(gradient_bytes.size(), " gradient sizes for a pipeline of ", stages, " stages"),
          "gradient_bytes", "give one size per (virtual) stage"});
  }
  if (!optimizer_time.empty() && optimizer_time.size() != S) {
    fail({"data_parallel_step", concat(optimizer_time.size(), " optimizer times for a pipeline of ", stages, " stages"),
          "optimizer_time", "give one time per (virtual) stage, or none"});
  }
  for (std::size_t s = 0; s < S; ++s) {
    for (const auto& [v, what] : {std::pair{gradient_bytes[s], "gradient_bytes"},
                                  std::pair{optimizer_time.empty() ? 0.0 : optimizer_time[s], "optimizer_time"}}) {
      if (!(v >= 0.0 && v <= std::numeric_limits<double>::max())) {
        fail({"data_parallel_step", concat(what, "[", s, "] is ", v), concat(what, "[", s, "]"), "give a finite value >= 0"});
      }
    }
  }
  out.pipeline_time = last - origin;
  out.stages.assign(S, StageAllReduce{});
  std::vector<bool> has_weights(S, false);
  std::vector<double> compute_end(static_cast<std::size_t>(pipeline.ranks), 0.0);
  for (const Span& sp : pipeline.spans) {
    if (sp.rank < 0 || sp.rank >= pipeline.ranks) {
      fail({"data_parallel_step", concat("a span names rank ", sp.rank, " of ", pipeline.ranks), "pipeline.spans",
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
      fail({"data_parallel_step", concat("stage ", s, " has no weight-gradient action (B or BW) in the timeline"), "pipeline",
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
    fail({"data_parallel_step",
          concat("the step time is not finite: the pipeline's ", out.pipeline_time,
                 " plus the all-reduces and optimizer steps overflow a double"),
          "optimizer_time, model.link", "give finite times that sum within the range of a double"});
  }
  return out;
}

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/sim/impl/data_parallel.ipp"
#endif
