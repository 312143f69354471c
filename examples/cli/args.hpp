// Command-line parsing shared by ppsched-plan and ppsched-bubbles. Each program declares
// its flags in a table; this file turns argv into (flag, value) pairs and the value texts
// into numbers, and rejects everything else with a ppsched::error that names the flag, the
// argument's position and what would be accepted. Nothing is clamped or guessed: a count
// out of range, a number with trailing text or a flag given twice is an error, because a
// planner that quietly ran something other than what was asked would mislead the user.
#pragma once

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "ppsched/error.hpp"
#include "text.hpp"

namespace ppsched::cli {

// One accepted flag. A flag with an empty `value_name` is a switch and takes no value.
struct FlagSpec {
  std::string_view name;        // "--stages"
  std::string_view value_name;  // "P", or empty for a switch
  std::string_view help;        // one line for --help
};

// One flag as the user gave it. `position` is the 1-based argv index of the flag, so that
// error messages can point at it.
struct GivenFlag {
  std::string_view name;
  std::string value;
  int position = 0;
};

[[nodiscard]] inline std::string flag_list(std::span<const FlagSpec> specs) {
  std::string list;
  for (const FlagSpec& spec : specs) {
    if (!list.empty()) list += ", ";
    list += spec.name;
  }
  return list;
}

[[nodiscard]] inline std::string argument_place(int position) {
  return concat("argument ", position);
}

// Lists the valid choices in one line: "gpipe, 1f1b, zb-h1".
[[nodiscard]] inline std::string join(std::span<const std::string> items, std::string_view separator = ", ") {
  std::string out;
  for (const std::string& item : items) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

// Splits argv[1..] into flags. Accepts "--flag value" and "--flag=value". Rejects unknown
// flags (listing the valid ones and the closest match), positional arguments, a missing
// value, a value given to a switch, and a flag given twice.
[[nodiscard]] inline std::vector<GivenFlag> split_flags(std::span<const char* const> argv,
                                                        std::span<const FlagSpec> specs) {
  std::vector<GivenFlag> given;
  for (std::size_t i = 1; i < argv.size(); ++i) {
    const int position = static_cast<int>(i);
    const std::string_view arg = argv[i];
    if (!arg.starts_with("--") || arg.size() == 2) {
      fail({"command line", concat("unexpected argument '", arg, "'"), argument_place(position),
            concat("every argument is a flag followed by its value; valid flags: ", flag_list(specs))});
    }
    const std::size_t equals = arg.find('=');
    const std::string_view name = arg.substr(0, equals);
    const auto spec = std::find_if(specs.begin(), specs.end(), [&](const FlagSpec& s) { return s.name == name; });
    if (spec == specs.end()) {
      const auto closest = std::min_element(specs.begin(), specs.end(), [&](const FlagSpec& a, const FlagSpec& b) {
        return ppsched::edit_distance(name, a.name) < ppsched::edit_distance(name, b.name);
      });
      std::string fix;
      if (closest != specs.end() && ppsched::edit_distance(name, closest->name) <= 3) {
        fix = concat("did you mean ", closest->name, "? ");
      }
      fail({"command line", concat("unknown flag '", name, "'"), argument_place(position),
            concat(fix, "valid flags: ", flag_list(specs))});
    }
    if (std::any_of(given.begin(), given.end(), [&](const GivenFlag& g) { return g.name == spec->name; })) {
      fail({concat("flag ", name), "given more than once", argument_place(position),
            "give each flag once"});
    }
    GivenFlag flag{spec->name, {}, position};
    if (spec->value_name.empty()) {
      if (equals != std::string_view::npos) {
        fail({concat("flag ", name), "is a switch and takes no value", argument_place(position),
              concat("write ", name, " alone")});
      }
    } else if (equals != std::string_view::npos) {
      flag.value = std::string(arg.substr(equals + 1));
    } else {
      if (i + 1 >= argv.size()) {
        fail({concat("flag ", name), "needs a value", argument_place(position),
              concat("write ", name, ' ', spec->value_name)});
      }
      flag.value = argv[++i];
    }
    given.push_back(std::move(flag));
  }
  return given;
}

// Parses a whole number in [min, max]; the full text must be the number.
[[nodiscard]] inline std::int64_t parse_integer(const GivenFlag& flag, std::int64_t min, std::int64_t max) {
  std::int64_t value = 0;
  const std::string& text = flag.value;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range || (ec == std::errc{} && end == text.data() + text.size() &&
                                               (value < min || value > max))) {
    fail({concat("flag ", flag.name), concat("value '", text, "' is out of range"),
          argument_place(flag.position), concat("give a whole number from ", min, " to ", max)});
  }
  if (ec != std::errc{} || end != text.data() + text.size()) {
    fail({concat("flag ", flag.name), concat("value '", text, "' is not a whole number"),
          argument_place(flag.position), concat("give a whole number from ", min, " to ", max)});
  }
  return value;
}

// Parses one finite number at or above `min` (strictly above when `min_excluded`).
[[nodiscard]] inline double parse_real_text(std::string_view text, std::string_view subject, int position,
                                            double min, bool min_excluded) {
  const std::string bound = concat(min_excluded ? "greater than " : "at least ", min);
  double value = 0.0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || !std::isfinite(value)) {
    fail({std::string(subject), concat("value '", text, "' is not a finite number"), argument_place(position),
          concat("give a number ", bound, ", e.g. 1.5 or 2e-3")});
  }
  if (value < min || (min_excluded && value == min)) {
    fail({std::string(subject), concat("value '", text, "' is out of range"), argument_place(position),
          concat("give a number ", bound)});
  }
  return value;
}

[[nodiscard]] inline double parse_real(const GivenFlag& flag, double min, bool min_excluded = false) {
  return parse_real_text(flag.value, concat("flag ", flag.name), flag.position, min, min_excluded);
}

// Parses "F,B,W": three finite non-negative numbers separated by commas, F and B+W positive.
[[nodiscard]] inline std::array<double, 3> parse_cost_triple(const GivenFlag& flag) {
  std::array<double, 3> costs{};
  std::string_view rest = flag.value;
  for (std::size_t k = 0; k < costs.size(); ++k) {
    const std::size_t comma = rest.find(',');
    const bool last = k + 1 == costs.size();
    if (last != (comma == std::string_view::npos)) {
      fail({concat("flag ", flag.name), concat("value '", flag.value, "' is not three comma-separated numbers"),
            argument_place(flag.position),
            "write forward,backward-for-input,backward-for-weights, e.g. 1,1,1 (use 1,2,0 for an unsplit backward)"});
    }
    static constexpr std::array<std::string_view, 3> parts{"forward", "backward-for-input", "backward-for-weights"};
    costs[k] = parse_real_text(rest.substr(0, comma), concat("flag ", flag.name, " (", parts[k], " time)"),
                               flag.position, 0.0, false);
    rest = last ? std::string_view{} : rest.substr(comma + 1);
  }
  if (costs[0] <= 0.0 || costs[1] + costs[2] <= 0.0) {
    fail({concat("flag ", flag.name), concat("value '", flag.value, "' has a zero forward or backward time"),
          argument_place(flag.position), "give a positive forward time and a positive B+W"});
  }
  return costs;
}

// Parses a byte count: a number with an optional unit (B, KB, MB, GB, TB in powers of 1000;
// KiB, MiB, GiB, TiB in powers of 1024), e.g. "80GiB", "21.5GiB" or "1500000000". A decimal
// amount is read exactly (no rounding through a double) and must come to whole bytes:
// "1.5KiB" is 1536, "0.5B" is an error.
[[nodiscard]] inline std::uint64_t parse_bytes(const GivenFlag& flag) {
  const std::string& text = flag.value;
  const std::string fix = "give a positive number of bytes with an optional unit: 80GiB, 21.5GiB, 16GB, 1048576";
  const auto refuse = [&](const std::string& problem) {
    fail({concat("flag ", flag.name), problem, argument_place(flag.position), fix});
  };
  // The amount: digits, then optionally '.' and more digits.
  const char* const begin = text.data();
  const char* const stop = begin + text.size();
  const char* p = begin;
  while (p != stop && *p >= '0' && *p <= '9') ++p;
  const char* const whole_end = p;
  const char* fraction_begin = p;
  if (p != stop && *p == '.') {
    fraction_begin = ++p;
    while (p != stop && *p >= '0' && *p <= '9') ++p;
  }
  const char* const amount_end = p;
  if (whole_end == begin && amount_end == fraction_begin) refuse(concat("value '", text, "' is not a positive byte count"));
  std::string_view fraction(fraction_begin, static_cast<std::size_t>(amount_end - fraction_begin));
  while (!fraction.empty() && fraction.back() == '0') fraction.remove_suffix(1);  // "21.50" is "21.5"
  const std::string_view unit(amount_end, static_cast<std::size_t>(stop - amount_end));
  struct Unit {
    std::string_view name;
    std::uint64_t factor;
  };
  static constexpr std::array<Unit, 10> units{{{"", 1},
                                              {"B", 1},
                                              {"KB", 1000ULL},
                                              {"MB", 1000ULL * 1000},
                                              {"GB", 1000ULL * 1000 * 1000},
                                              {"TB", 1000ULL * 1000 * 1000 * 1000},
                                              {"KiB", 1ULL << 10},
                                              {"MiB", 1ULL << 20},
                                              {"GiB", 1ULL << 30},
                                              {"TiB", 1ULL << 40}}};
  const auto match = std::find_if(units.begin(), units.end(), [&](const Unit& u) { return u.name == unit; });
  if (match == units.end()) refuse(concat("unknown unit '", unit, "' in '", text, "'"));
  const std::uint64_t factor = match->factor;
  constexpr std::uint64_t most = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t whole = 0;
  if (whole_end != begin) {
    const auto [end, ec] = std::from_chars(begin, whole_end, whole);
    if (ec != std::errc{} || end != whole_end || whole > most / factor) refuse(concat("value '", text, "' is out of range"));
  }
  std::uint64_t bytes = whole * factor;
  if (!fraction.empty()) {
    // fraction / 10^k of the unit: whole bytes only when 10^k divides fraction x factor. The
    // factors are at most 2^40 and 10^12, so more than 12 significant decimals cannot be whole.
    if (fraction.size() > 12) refuse(concat("value '", text, "' is not a whole number of bytes"));
    std::uint64_t digits = 0, scale = 1;
    for (const char c : fraction) {
      digits = digits * 10 + static_cast<std::uint64_t>(c - '0');
      scale *= 10;
    }
    // digits x factor can exceed 64 bits (10^12 x 2^40); split the factor by the scale first.
    const std::uint64_t g = std::gcd(factor, scale);
    const std::uint64_t reduced_scale = scale / g, reduced_factor = factor / g;
    if (digits % reduced_scale != 0) refuse(concat("value '", text, "' is not a whole number of bytes"));
    const std::uint64_t part = digits / reduced_scale * reduced_factor;  // < factor: no overflow
    if (part > most - bytes) refuse(concat("value '", text, "' is out of range"));
    bytes += part;
  }
  if (bytes == 0) refuse(concat("value '", text, "' is not a positive byte count"));
  return bytes;
}

// The --help text: one line per flag, aligned.
[[nodiscard]] inline std::string flag_help(std::span<const FlagSpec> specs) {
  std::size_t width = 0;
  for (const FlagSpec& s : specs) width = std::max(width, s.name.size() + 1 + s.value_name.size());
  std::string out;
  for (const FlagSpec& s : specs) {
    std::string left = std::string(s.name);
    if (!s.value_name.empty()) left += ' ' + std::string(s.value_name);
    out += "  " + left + std::string(width + 2 - left.size(), ' ') + std::string(s.help) + '\n';
  }
  return out;
}

}  // namespace ppsched::cli
