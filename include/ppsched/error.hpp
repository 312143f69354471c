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
[[nodiscard]] PPSCHED_OUTLINE std::string bytes_text(double bytes);

// Levenshtein distance between two short texts (field and flag names): the one measure behind
// every "did you mean" of the library and its tools.
[[nodiscard]] PPSCHED_OUTLINE std::size_t edit_distance(std::string_view a, std::string_view b);

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
[[nodiscard]] PPSCHED_OUTLINE std::string format_error(const error_context& c);

[[nodiscard]] inline error make_error(const error_context& c) { return error(format_error(c)); }

[[noreturn]] inline void fail(const error_context& c) { throw make_error(c); }

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/error.ipp"
#endif
