// The bodies of <ppsched/error.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

#include "ppsched/error.hpp"

namespace ppsched::inline PPSCHED_MODE {

[[nodiscard]] PPSCHED_OUTLINE std::string bytes_text(double bytes) {
  if (!std::isfinite(bytes)) return concat(bytes, " B");
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  std::size_t u = 0;
  while (bytes >= 1024.0 && u + 1 < sizeof units / sizeof units[0]) {
    bytes /= 1024.0;
    ++u;
  }
  const double rounded = bytes >= 100.0 ? std::round(bytes) : std::round(bytes * 10.0) / 10.0;
  return concat(rounded, ' ', units[u]);
}

[[nodiscard]] PPSCHED_OUTLINE std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0U : 1U)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

[[nodiscard]] PPSCHED_OUTLINE std::string format_error(const error_context& c) {
  std::string m = c.subject;
  if (!m.empty()) m += ": ";
  m += c.problem;
  if (!c.where.empty()) m += " (at " + c.where + ")";
  if (!c.fix.empty()) m += ". " + c.fix;
  return m;
}

}  // namespace ppsched
