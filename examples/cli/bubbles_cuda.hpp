// The CUDA backend of ppsched-bubbles, as the host compiler sees it: one function, defined
// in examples/ppsched_bubbles_cuda.cu (compiled by nvcc, linked only into the CUDA build of
// the tool), so the tool's own sources stay plain C++ and name no CUDA header.
#pragma once

#include "bubbles_backend.hpp"

namespace ppsched::cli {

// Synthetic stages as calibrated spin kernels, p ranks spread round-robin over the visible
// GPUs (NCCL when every rank has its own GPU, device-to-device copies when ranks share one).
// prepare() throws BackendUnavailable, naming cudaGetDeviceCount's answer, when no GPU is
// usable.
[[nodiscard]] BubblesBackend cuda_bubbles_backend();

}  // namespace ppsched::cli
