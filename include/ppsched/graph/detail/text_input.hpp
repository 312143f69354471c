// Internals of <ppsched/graph/text_input.hpp>, which includes this file: reading a stream to its
// end up to a bound, with an error that names the input. They are in ppsched::detail and not part
// of the API: no example or page uses them, and they may change in any release
// (docs/architecture.md).
#pragma once

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <istream>
#include <string>
#include <string_view>
#include <system_error>

#include "ppsched/config.hpp"
#include "ppsched/error.hpp"

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

// Reads `in` to its end; `subject` names the input in the error ("profile 'x.json'").
[[nodiscard]] inline std::string read_bounded(std::istream& in, std::size_t max_bytes, std::string_view subject,
                                              std::string_view where) {
  std::string text;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof buffer), in.gcount() > 0) {
    const auto got = static_cast<std::size_t>(in.gcount());
    if (got > max_bytes - text.size()) {
      detail::fail({std::string(subject), detail::concat("is larger than ", max_bytes, " bytes (the bound for this input)"),
            std::string(where),
            "give a file of this kind (a device such as /dev/zero never ends), or raise the bound the reader takes"});
    }
    text.append(buffer, got);
  }
  if (in.bad()) detail::fail({std::string(subject), "could not be read to the end", std::string(where), "check the file and the disk"});
  return text;
}

// Opens `path` (a file, a FIFO or a character device; not a directory) and reads it whole.
[[nodiscard]] inline std::string read_text_file(const std::filesystem::path& path, std::size_t max_bytes,
                                                std::string_view subject) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    detail::fail({std::string(subject), "is a directory", path.string(), "give the path of a file"});
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    detail::fail({std::string(subject), "cannot be opened", path.string(), "check that the file exists and is readable"});
  }
  return read_bounded(in, max_bytes, subject, path.string());
}

}  // namespace detail

}  // namespace ppsched
