// Text helpers shared by the timeline writers: escaping for JSON strings and XML text or
// attributes, locale-independent number formatting, and round tick steps for time axes.
// The writers produce files other programs parse (Perfetto, browsers, spreadsheets), so a
// stray quote in a user's unit or label, a byte that is not UTF-8, or a comma decimal
// separator from the global locale must never reach the output; everything textual goes
// through these functions.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

namespace ppsched::inline PPSCHED_MODE::detail {

inline constexpr std::string_view utf8_replacement = "\xEF\xBF\xBD";  // U+FFFD

// Calls f(code_point, bytes) for each code point of `text`. A byte that does not start a
// well-formed UTF-8 sequence (overlong forms, surrogates and values above U+10FFFF
// included) is reported as U+FFFD with the replacement's bytes, and decoding resumes at
// the next byte, so any input yields valid UTF-8 downstream.
template <class F>
constexpr void for_each_code_point(std::string_view text, F&& f) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    std::size_t length = 0;
    char32_t cp = 0;
    char32_t min_cp = 0;
    if (lead < 0x80) {
      length = 1;
      cp = lead;
    } else if ((lead & 0xE0U) == 0xC0U) {
      length = 2;
      cp = lead & 0x1FU;
      min_cp = 0x80;
    } else if ((lead & 0xF0U) == 0xE0U) {
      length = 3;
      cp = lead & 0x0FU;
      min_cp = 0x800;
    } else if ((lead & 0xF8U) == 0xF0U) {
      length = 4;
      cp = lead & 0x07U;
      min_cp = 0x10000;
    }
    bool ok = length != 0 && i + length <= text.size();
    for (std::size_t k = 1; ok && k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0U) != 0x80U) {
        ok = false;
      } else {
        cp = static_cast<char32_t>((cp << 6U) | (next & 0x3FU));
      }
    }
    ok = ok && cp >= min_cp && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (ok) {
      f(cp, text.substr(i, length));
      i += length;
    } else {
      f(char32_t{0xFFFD}, utf8_replacement);
      ++i;
    }
  }
}

// The body of a JSON string (without the surrounding quotes), per RFC 8259.
[[nodiscard]] inline std::string json_escape(std::string_view text) {
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

// Text safe inside an XML 1.0 element or a quoted attribute value. Characters XML 1.0
// forbids outright (control characters other than tab, newline and carriage return, and
// U+FFFE/U+FFFF) cannot be written even as references, so they become U+FFFD.
[[nodiscard]] inline std::string xml_escape(std::string_view text) {
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

// Shortest text that reads back as the same double ("0.1", "1e+20"); always a valid JSON
// number for finite input, independent of the global locale.
[[nodiscard]] inline std::string format_shortest(double value) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ec == std::errc{} ? result.ptr : buffer);
}

// Fixed-point text with `decimals` digits after the point ("12.50"), for coordinates.
[[nodiscard]] inline std::string format_fixed(double value, int decimals) {
  char buffer[512];
  const auto result =
      std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::fixed, decimals);
  return std::string(buffer, result.ec == std::errc{} ? result.ptr : buffer);
}

// At most `digits` significant digits with trailing zeros dropped ("0.375", "117",
// "1.5e+06"), for numbers a person reads in a table or a label.
[[nodiscard]] inline std::string format_readable(double value, int digits = 4) {
  if (value == 0.0) return "0";  // also folds -0 into 0
  char buffer[64];
  const auto result =
      std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::general, digits);
  return std::string(buffer, result.ec == std::errc{} ? result.ptr : buffer);
}

// A step of 1, 2 or 5 × 10^k giving about `target` intervals over `range`.
[[nodiscard]] inline double nice_tick_step(double range, double target) {
  if (!(range > 0.0) || !(target >= 1.0)) return 1.0;
  const double raw = range / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double m = raw / magnitude;
  const double factor = m <= 1.0 ? 1.0 : m <= 2.0 ? 2.0 : m <= 5.0 ? 5.0 : 10.0;
  return factor * magnitude;
}

// Digits after the point that show every multiple of `step` exactly enough.
[[nodiscard]] inline int tick_decimals(double step) {
  const double digits = -std::floor(std::log10(step) + 1e-9);
  return digits > 0.0 ? static_cast<int>(std::min(digits, 12.0)) : 0;
}

}  // namespace ppsched::detail
