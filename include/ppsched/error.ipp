// The bodies of <ppsched/error.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include "ppsched/config.hpp"

#include <cstddef>
#include <sstream>
#include <string>
#include <string_view>

namespace ppsched::inline PPSCHED_MODE {

namespace detail {

[[nodiscard]] PPSCHED_OUTLINE std::string concat_args(const FormatKind* kinds, const FormatArg* args,
                                                      const FormatPrinter* printers, std::size_t count) {
  using K = FormatKind;
  std::ostringstream out;
  for (std::size_t i = 0; i < count; ++i) {
    const FormatArg a = args[i];
    switch (kinds[i]) {
      case K::string: out << *static_cast<const std::string*>(a.object); break;
      case K::string_view: out << *static_cast<const std::string_view*>(a.object); break;
      case K::c_string: out << a.c_string; break;
      case K::character: out << static_cast<char>(a.signed_integer); break;
      case K::boolean: out << (a.signed_integer != 0); break;
      case K::short_: out << static_cast<short>(a.signed_integer); break;
      case K::int_: out << static_cast<int>(a.signed_integer); break;
      case K::long_: out << static_cast<long>(a.signed_integer); break;
      case K::long_long: out << a.signed_integer; break;
      case K::unsigned_integer: out << a.unsigned_integer; break;
      case K::floating: out << a.floating; break;
      case K::pointer: out << a.object; break;
      case K::custom: printers[i](out, a); break;
    }
  }
  return out.str();
}

}  // namespace detail

[[nodiscard]] PPSCHED_OUTLINE std::string bytes_text(double bytes) {
  if (!std::isfinite(bytes)) return detail::concat(bytes, " B");
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  std::size_t u = 0;
  while (bytes >= 1024.0 && u + 1 < sizeof units / sizeof units[0]) {
    bytes /= 1024.0;
    ++u;
  }
  const double rounded = bytes >= 100.0 ? std::round(bytes) : std::round(bytes * 10.0) / 10.0;
  return detail::concat(rounded, ' ', units[u]);
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
