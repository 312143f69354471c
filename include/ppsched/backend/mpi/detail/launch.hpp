// Internals of <ppsched/backend/mpi/launch.hpp>, which includes this file: the environment
// variables each launcher (mpirun, Slurm, torchrun) sets, and reading them. They are in
// ppsched::detail and not part of the API: no example or page uses them, and they may change in
// any release (docs/architecture.md).
#pragma once

#include <array>
#include <charconv>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "ppsched/config.hpp"
#include "ppsched/error.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail::launch {

struct Names {
  std::string_view source;
  const char* rank;
  const char* size;
  const char* local_rank;
  bool outer;  // Slurm: describes the task a launcher of the inner level may run inside
};

// In the order they are reported when they disagree.
inline constexpr std::array<Names, 4> launchers{{
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", false},
    {"PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", false},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", true},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", false},
}};

[[nodiscard]] inline std::optional<int> number(const std::function<const char*(const char*)>& getenv,
                                               const char* name) {
  const char* text = getenv(name);
  if (text == nullptr) return std::nullopt;
  const std::string_view s(text);
  int value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size() || value < 0) {
    detail::fail({"launch environment", detail::concat(name, "='", s, "' is not a non-negative integer"), name,
          "Check how the launcher (mpirun, srun, torchrun) sets it, or unset it"});
  }
  return value;
}

}  // namespace detail::launch

}  // namespace ppsched
