// The plan of one rank's step and the shapes it is made for (<ppsched/runtime/step_plan.hpp>,
// whose header comment describes the planning): StageShape, the planned steps and transfers, the
// buffer pools and RankPlan. They sit in a header of their own so that the internals in
// runtime/detail/step_plan.hpp build on them without including the public header back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ppsched/config.hpp"
#include "ppsched/trace/timeline.hpp"

namespace ppsched::inline PPSCHED_MODE {

// Floats per micro-batch entering and leaving one stage.
struct StageShape {
  std::size_t input_size = 0;
  std::size_t output_size = 0;
  std::size_t offload_size = 0;  // floats of the stage's saved state an OFFLOAD moves to host
};

// One send or receive of a comm step.
struct PlannedTransfer {
  bool send = false;
  std::int32_t action = 0;  // index in the rank's program
  std::int32_t buffer = -1;
  std::int32_t peer = 0;
  std::size_t count = 0;
  std::uint64_t match = 0;  // the same on both sides of the transfer
};

struct PlannedStep {
  // OFFLOAD and RELOAD run on the rank's copy stream: `lane` is Lane::copy and `copy` is set.
  Lane lane = Lane::compute;
  bool copy = false;
  std::int32_t first_action = 0;  // index in the rank's program
  std::int32_t action_count = 1;  // > 1 only for a group
  // Steps of other streams whose end this step waits for: `wait_on` on the compute or comm
  // stream (the other one, for a compute or comm step; compute, for a copy step),
  // `copy_wait` on the copy stream (a backward, or an R, after its RELOAD).
  std::int32_t wait_on = -1;
  std::int32_t copy_wait = -1;

  // Compute steps. Buffers are physical indices; -1 means none.
  std::int32_t input = -1;        // F, B, BI, BW: the forward input (-1 with input_from_batch)
  bool input_from_batch = false;  // stage 0: the micro-batch's slice of the batch
  std::int32_t output = -1;       // F: forward output; B, BI: gradient for the input (stage > 0)
  std::int32_t grad_output = -1;  // B, BI, BW: gradient of the output (written by the loss
                                  // on the last stage)
  std::int32_t loss_input = -1;   // last stage's B or BI: the forward output the loss reads
  bool computes_loss = false;
  // F of a micro-batch the schedule recomputes (an R follows): the stage need not keep what
  // its backward needs (StageContext::keep_activation false).
  bool drops_activation = false;
  // R: `output` is a scratch buffer the default recompute (forward again) writes and nobody
  // reads. OFFLOAD / RELOAD: the host buffer (index into RankPlan::host_floats).
  std::int32_t host = -1;

  std::vector<PlannedTransfer> transfers;  // comm steps
};

// `count` buffers of `floats` each.
struct BufferPool {
  std::size_t floats = 0;
  std::int32_t count = 0;

  friend bool operator==(const BufferPool&, const BufferPool&) = default;
};

struct RankPlan {
  std::int32_t rank = 0;
  std::vector<std::int32_t> stages;        // stages placed on this rank, ascending
  std::vector<PlannedStep> steps;          // in issue order
  std::vector<std::size_t> buffer_floats;  // per physical buffer
  std::vector<BufferPool> pools;           // by size, ascending
  // The host pool of offloaded activations: a host buffer holds one micro-batch's saved
  // state from its OFFLOAD to its RELOAD, in issue order, and is then reused by a later
  // OFFLOAD of the same size (both on the copy stream, so in order): as many as the
  // schedule has offloaded at once.
  std::vector<std::size_t> host_floats;  // per host buffer
  std::vector<BufferPool> host_pools;    // by size, ascending
  bool has_copies = false;               // any OFFLOAD or RELOAD: the rank needs a copy stream

  [[nodiscard]] std::size_t total_floats() const noexcept {
    std::size_t n = 0;
    for (std::size_t f : buffer_floats) n += f;
    return n;
  }
};

}  // namespace ppsched
