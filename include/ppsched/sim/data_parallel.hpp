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
[[nodiscard]] PPSCHED_OUTLINE DataParallelStep data_parallel_step(const Timeline& pipeline, std::span<const double> gradient_bytes,
                                                         const AllReduceModel& model,
                                                         std::span<const double> optimizer_time = {});

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/sim/impl/data_parallel.ipp"
#endif
