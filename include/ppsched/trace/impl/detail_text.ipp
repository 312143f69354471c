// The bodies of <ppsched/trace/detail/text.hpp>'s functions that compiled mode compiles once
// (<ppsched/config.hpp>): that header includes this file at its end where PPSCHED_OUTLINE_BODY
// is 1 (header-only, or the library's own file), and only there.
#pragma once

#include <charconv>

#include "ppsched/config.hpp"

namespace ppsched::inline PPSCHED_MODE::detail {

[[nodiscard]] PPSCHED_OUTLINE std::string json_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for_each_code_point(text, [&out](char32_t cp, std::string_view bytes) {
    if (cp == U'"') {
      out += "\\\"";
    } else if (cp == U'\\') {
      out += "\\\\";
    } else if (cp == U'\n') {
      out += "\\n";
    } else if (cp == U'\t') {
      out += "\\t";
    } else if (cp == U'\r') {
      out += "\\r";
    } else if (cp < 0x20) {
      constexpr std::string_view hex = "0123456789abcdef";
      out += "\\u00";
      out += hex[(cp >> 4U) & 0xFU];
      out += hex[cp & 0xFU];
    } else {
      out += bytes;
    }
  });
  return out;
}

[[nodiscard]] PPSCHED_OUTLINE std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for_each_code_point(text, [&out](char32_t cp, std::string_view bytes) {
    switch (cp) {
      case U'&': out += "&amp;"; return;
      case U'<': out += "&lt;"; return;
      case U'>': out += "&gt;"; return;
      case U'"': out += "&quot;"; return;
      case U'\'': out += "&apos;"; return;
      default: break;
    }
    const bool forbidden =
        (cp < 0x20 && cp != U'\t' && cp != U'\n' && cp != U'\r') || cp == 0xFFFE || cp == 0xFFFF;
    out += forbidden ? utf8_replacement : bytes;
  });
  return out;
}

[[nodiscard]] PPSCHED_OUTLINE std::string format_shortest(double value) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ec == std::errc{} ? result.ptr : buffer);
}

[[nodiscard]] PPSCHED_OUTLINE std::string format_fixed(double value, int decimals) {
  char buffer[512];
  const auto result =
      std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::fixed, decimals);
  return std::string(buffer, result.ec == std::errc{} ? result.ptr : buffer);
}

[[nodiscard]] PPSCHED_OUTLINE std::string format_readable(double value, int digits) {
  if (value == 0.0) return "0";  // also folds -0 into 0
  char buffer[64];
  const auto result =
      std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::general, digits);
  return std::string(buffer, result.ec == std::errc{} ? result.ptr : buffer);
}

[[nodiscard]] PPSCHED_OUTLINE double nice_tick_step(double range, double target) {
  if (!(range > 0.0) || !(target >= 1.0)) return 1.0;
  const double raw = range / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double m = raw / magnitude;
  const double factor = m <= 1.0 ? 1.0 : m <= 2.0 ? 2.0 : m <= 5.0 ? 5.0 : 10.0;
  return factor * magnitude;
}

[[nodiscard]] PPSCHED_OUTLINE int tick_decimals(double step) {
  const double digits = -std::floor(std::log10(step) + 1e-9);
  return digits > 0.0 ? static_cast<int>(std::min(digits, 12.0)) : 0;
}

}  // namespace ppsched
