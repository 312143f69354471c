// Data parallelism on GPUs: the GradientAllReduce engine (runtime/data_parallel.hpp) that sums
// a stage's gradient over its replicas with ncclAllReduce, on the rank's data-parallel stream.
// Each device holds one communicator for its data-parallel group (the d devices that run the
// same pipeline rank in the d replicas: ncclCommSplit of the world by pipeline rank, or
// init_rank with a unique id per group), in replica order, so that NCCL's rank r is replica r.
// NCCL sums in its own order (ring or tree): results agree with the in-process sum within
// float rounding, not bit for bit.
//
// Host-only: usable from .cpp files compiled by a plain C++ compiler that link cudart and nccl.
#pragma once

#include "ppsched/config.hpp"

#include <cstdint>
#include <stop_token>

#include "ppsched/backend/cuda/nccl.hpp"
#include "ppsched/error.hpp"
#include "ppsched/runtime/data_parallel.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace cuda {

class NcclAllReduce {
 public:
  // `group` must outlive the engine; its stop watch is the step's (NcclCommunicator::watch).
  explicit NcclAllReduce(NcclCommunicator& group) noexcept : group_(&group) {}

  // Every stage a rank holds shares the rank's group, so the rank's sums run one after the
  // other on its data-parallel stream, in the order their gradients are ready — the same
  // order on every replica, as NCCL requires.
  template <class B>
  void all_reduce(B&, typename B::stream& stream, std::int32_t stage, typename B::buffer& gradient, std::stop_token stop) {
    if (stop.stop_requested()) {
      throw error(detail::concat("stage ", stage, " all-reduce: the step failed before it was issued"));
    }
    group_->watch(std::move(stop));
    group_->all_reduce_sum(gradient.data(), gradient.size(), stream.ref());
  }

 private:
  NcclCommunicator* group_;
};

}  // namespace cuda
}  // namespace ppsched
