// ppsched-bubbles: measures real pipeline bubbles. Each schedule runs through the real
// executor with synthetic stages whose every action takes the model's cost, and the measured
// timeline is set beside the simulator's prediction for the very same lowered schedule:
// bubble per rank and overall, makespan, and how far each action drifted. The tool itself is
// examples/cli/bubbles.hpp; this file only says which backends the build has.
//
// Built twice when CUDA is enabled: as is (the CPU backend; `--backend cuda` is bad input,
// exit 2) and, with PPSCHED_BUBBLES_CUDA defined, linked with ppsched_bubbles_cuda.cu, whose
// CUDA backend runs the stages as calibrated spin kernels on the GPUs (no usable GPU: exit
// 3). docs/cli.md documents the flags, the JSON and the exit statuses.
#include <vector>

#include "cli/bubbles.hpp"
#include "cli/bubbles_backend.hpp"
#if defined(PPSCHED_BUBBLES_CUDA)
#include "cli/bubbles_cuda.hpp"
#endif

int main(int argc, char** argv) {
  std::vector<ppsched::cli::BubblesBackend> backends{ppsched::cli::cpu_bubbles_backend()};
#if defined(PPSCHED_BUBBLES_CUDA)
  backends.push_back(ppsched::cli::cuda_bubbles_backend());
#endif
  return ppsched::cli::bubbles_main(argc, argv, backends);
}
