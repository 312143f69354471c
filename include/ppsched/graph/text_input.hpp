// Reading a whole text input (a profile, a schedule CSV) from a stream or a path, up to a
// bound. A path may name a FIFO or a character device as well as a file (`<(generate)`,
// /dev/stdin), and some never end (/dev/zero): without the bound such an input grows a string
// until the process runs out of memory (issue 24). Past the bound the reader stops and throws
// ppsched::error naming the input and the bound.
#pragma once

#include "ppsched/config.hpp"

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <istream>
#include <string>
#include <string_view>
#include <system_error>

#include "ppsched/error.hpp"
#include "ppsched/graph/detail/text_input.hpp"

namespace ppsched::inline PPSCHED_MODE {

// The default bound on a profile: a million layers of JSON take about 200 MB.
inline constexpr std::size_t max_profile_bytes = std::size_t{256} << 20;
// The default bound on a schedule CSV: the largest schedule a generator builds (2^26 actions)
// takes about 700 MB.
inline constexpr std::size_t max_csv_bytes = std::size_t{1} << 30;

}  // namespace ppsched
