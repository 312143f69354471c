// The CUDA backend, in one include — opt-in: <ppsched/ppsched.hpp> never reaches it. It maps
// the runtime's Backend concept onto CUDA streams and events and NCCL point-to-point
// (`CudaBackend`, backend/cuda/backend.cuh), with the pieces it is built from usable on their
// own: checked calls (check.hpp), stream and event owners and refs (stream.hpp), stream-ordered
// device memory (memory.hpp), the NCCL communicator and unique-id sharing (nccl.hpp), the
// in-process device-copy transport for ranks that share a GPU (local_exchange.hpp), the
// calibrated spin kernel (spin.cuh) and synthetic stages built on it (synthetic.cuh).
//
// Compiled by nvcc, everything is available. Compiled by a plain C++ compiler (a .cpp file
// that links cudart and nccl), only the host-only parts are: the backend itself and the spin
// kernel need device code.
#pragma once

#include "ppsched/backend/cuda/all_reduce.hpp"
#include "ppsched/backend/cuda/check.hpp"
#include "ppsched/backend/cuda/device.hpp"
#include "ppsched/backend/cuda/local_exchange.hpp"
#include "ppsched/backend/cuda/memory.hpp"
#include "ppsched/backend/cuda/nccl.hpp"
#include "ppsched/backend/cuda/stream.hpp"
#include "ppsched/backend/cuda/wait.hpp"

#if defined(__CUDACC__)
#include "ppsched/backend/cuda/backend.cuh"
#include "ppsched/backend/cuda/spin.cuh"
#include "ppsched/backend/cuda/synthetic.cuh"
#endif
