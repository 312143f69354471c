// Text helpers shared by the timeline writers: escaping for JSON strings and XML text or
// attributes, locale-independent number formatting, and round tick steps for time axes.
// The writers produce files other programs parse (Perfetto, browsers, spreadsheets), so a
// stray quote in a user's unit or label, a byte that is not UTF-8, or a comma decimal
// separator from the global locale must never reach the output; everything textual goes
// through these functions.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
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
[[nodiscard]] PPSCHED_OUTLINE std::string json_escape(std::string_view text);

// Text safe inside an XML 1.0 element or a quoted attribute value. Characters XML 1.0
// forbids outright (control characters other than tab, newline and carriage return, and
// U+FFFE/U+FFFF) cannot be written even as references, so they become U+FFFD.
[[nodiscard]] PPSCHED_OUTLINE std::string xml_escape(std::string_view text);

// Shortest text that reads back as the same double ("0.1", "1e+20"); always a valid JSON
// number for finite input, independent of the global locale.
[[nodiscard]] PPSCHED_OUTLINE std::string format_shortest(double value);

// Fixed-point text with `decimals` digits after the point ("12.50"), for coordinates.
[[nodiscard]] PPSCHED_OUTLINE std::string format_fixed(double value, int decimals);

// At most `digits` significant digits with trailing zeros dropped ("0.375", "117",
// "1.5e+06"), for numbers a person reads in a table or a label.
[[nodiscard]] PPSCHED_OUTLINE std::string format_readable(double value, int digits = 4);

// A step of 1, 2 or 5 × 10^k giving about `target` intervals over `range`.
[[nodiscard]] PPSCHED_OUTLINE double nice_tick_step(double range, double target);

// Digits after the point that show every multiple of `step` exactly enough.
[[nodiscard]] PPSCHED_OUTLINE int tick_decimals(double step);

}  // namespace ppsched::detail

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/trace/impl/detail_text.ipp"
#endif
