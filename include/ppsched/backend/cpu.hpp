// The CPU backend, in one include: a CpuCluster of p ranks whose CpuBackend objects model
// CUDA streams and events and NCCL point-to-point on host threads, with a checking mode that
// reports what would be silent races on CUDA and a deterministic mode that runs one fixed
// interleaving. See backend/cpu/backend.hpp.
#pragma once

#include "ppsched/backend/cpu/backend.hpp"
#include "ppsched/backend/cpu/options.hpp"
