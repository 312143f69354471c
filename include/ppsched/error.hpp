// ppsched::error, the library's one exception type, and the helpers that build its
// messages. Every rejection of bad input says three things a user can act on: what input
// was wrong, where in it, and how to fix it. Keeping that shape in one place keeps the
// messages uniform across the partitioner, the schedules, the loaders and the runtime.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ppsched::inline PPSCHED_MODE {

class error : public std::runtime_error {
 public:
  explicit error(const std::string& message) : std::runtime_error(message) {}
  explicit error(const char* message) : std::runtime_error(message) {}
};

// Streams every argument into one string: the library builds its messages with it, and a
// user building a message for `fail` (or an error of their own) can use the same.
template <class... Args>
[[nodiscard]] std::string concat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

namespace detail {
using ppsched::concat;  // the library's own throw sites say detail::concat

// A number in a one-line message or reason: at most 3 decimals, no trailing zeros, "inf" for
// infinity. Past 1e15 there are no decimals to drop, and x * 1000 could overflow to "inf" for
// a finite x (issue 24).
[[nodiscard]] inline std::string short_number(double x) {
  return concat(x > -1e15 && x < 1e15 ? std::round(x * 1000.0) / 1000.0 : x);
}
}  // namespace detail

// Bytes as every result and message of the library prints them: "1.5 GiB", "312 MiB",
// "12 KiB", "100 B" (binary units, three significant figures at most), so that no report
// shows "6.09711e+10 B" beside another's GiB.
[[nodiscard]] inline std::string bytes_text(double bytes) {
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

// Levenshtein distance between two short texts (field and flag names): the one measure behind
// every "did you mean" of the library and its tools.
[[nodiscard]] inline std::size_t edit_distance(std::string_view a, std::string_view b) {
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

// The message parts of an error. `subject` names the input ("profile 'gpt.json'",
// "partition", "schedule '1f1b'"), `problem` says what is wrong, `where` points into the
// input ("layer 3 'attn' field 'forward'", "line 4, column 7"), `fix` says what would work.
struct error_context {
  std::string subject;
  std::string problem;
  std::string where{};
  std::string fix{};
};

// Formats as "subject: problem (at where). fix" with the empty parts left out.
[[nodiscard]] inline std::string format_error(const error_context& c) {
  std::string m = c.subject;
  if (!m.empty()) m += ": ";
  m += c.problem;
  if (!c.where.empty()) m += " (at " + c.where + ")";
  if (!c.fix.empty()) m += ". " + c.fix;
  return m;
}

[[nodiscard]] inline error make_error(const error_context& c) { return error(format_error(c)); }

[[noreturn]] inline void fail(const error_context& c) { throw make_error(c); }

}  // namespace ppsched
