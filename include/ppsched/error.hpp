// ppsched::error, the library's one exception type, and the helpers that build its
// messages. Every rejection of bad input says three things a user can act on: what input
// was wrong, where in it, and how to fix it. Keeping that shape in one place keeps the
// messages uniform across the partitioner, the schedules, the loaders and the runtime.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <memory>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace ppsched::inline PPSCHED_MODE {

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

class error : public std::runtime_error {
 public:
  explicit error(const std::string& message) : std::runtime_error(message) {}
  explicit error(const char* message) : std::runtime_error(message) {}
  // The library's own shape of message: `throw ppsched::error({.subject = "profile 'a.json'",
  // .problem = "...", .where = "...", .fix = "..."})` reads like every error ppsched throws.
  explicit error(const error_context& c) : std::runtime_error(format_error(c)) {}
};

namespace detail {

// concat's arguments, held without their types, so that one non-template function
// (`concat_args`) does all the streaming. Every call of concat with its own list of argument
// types used to instantiate the ostringstream code again (issue 38); now a call only stores,
// per argument, a FormatArg and the FormatKind its type gives (and a FormatPrinter for the
// kind `custom`). Each kind is streamed as the argument itself was, so the text is the same
// byte for byte, stream state included (a manipulator affects the arguments after it).

// An argument's value, or its address: it lives only within the full expression of the call.
union FormatArg {
  const void* object;  // std::string, std::string_view, void*, and the `custom` kind's objects
  const char* c_string;
  long long signed_integer;  // also a char (as char) and a bool (as 0 or 1): no padding to fill
  unsigned long long unsigned_integer;
  double floating;
  void (*function)();  // a function given (a manipulator such as std::hex or std::fixed)
};

// What is known of an argument from its type alone.
enum class FormatKind : unsigned char {
  string,            // std::string
  string_view,       // std::string_view
  c_string,          // const char*, char*, a char array (streamed as const char*: up to its NUL)
  character,         // char, signed char, unsigned char (the stream writes all three as a char)
  boolean,           // bool (1/0, or true/false after std::boolalpha)
  // The signed integers, each as its own type: in hex and oct a negative short or int prints
  // in its own width.
  short_,
  int_,
  long_,
  long_long,
  unsigned_integer,  // unsigned short .. unsigned long long (all print alike)
  floating,          // double, float (the stream widens a float to double)
  pointer,           // void*, const void*
  custom,            // anything else the stream takes, functions included: a FormatPrinter streams it
};

// Streams an argument of the kind `custom`: one instantiation per type, not per call.
using FormatPrinter = void (*)(std::ostream&, FormatArg);

template <class T, class... U>
inline constexpr bool is_one_of = (std::is_same_v<T, U> || ...);

template <class T>
constexpr FormatKind format_kind() {
  using K = FormatKind;
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, std::string>) return K::string;
  else if constexpr (std::is_same_v<U, std::string_view>) return K::string_view;
  else if constexpr (is_one_of<U, const char*, char*> ||
                     (std::is_array_v<U> && std::is_same_v<std::remove_cv_t<std::remove_extent_t<U>>, char>))
    return K::c_string;
  else if constexpr (is_one_of<U, char, signed char, unsigned char>) return K::character;
  else if constexpr (std::is_same_v<U, bool>) return K::boolean;
  else if constexpr (std::is_same_v<U, short>) return K::short_;
  else if constexpr (std::is_same_v<U, int>) return K::int_;
  else if constexpr (std::is_same_v<U, long>) return K::long_;
  else if constexpr (std::is_same_v<U, long long>) return K::long_long;
  else if constexpr (is_one_of<U, unsigned short, unsigned, unsigned long, unsigned long long>)
    return K::unsigned_integer;
  else if constexpr (is_one_of<U, double, float>) return K::floating;
  else if constexpr (is_one_of<U, void*, const void*>) return K::pointer;
  else return K::custom;
}

template <class T>
void print_custom(std::ostream& out, FormatArg a) {
  if constexpr (std::is_function_v<T>) {
    out << reinterpret_cast<T*>(a.function);
  } else {
    out << *static_cast<const T*>(a.object);
  }
}

template <class T>
constexpr FormatPrinter format_printer() {
  if constexpr (format_kind<T>() == FormatKind::custom) {
    return &print_custom<std::remove_cv_t<T>>;
  } else {
    return nullptr;
  }
}

template <class T>
[[nodiscard]] FormatArg format_arg(const T& v) noexcept {
  using K = FormatKind;
  constexpr K kind = format_kind<T>();
  if constexpr (kind == K::string || kind == K::string_view) {
    return {.object = std::addressof(v)};
  } else if constexpr (kind == K::c_string) {
    return {.c_string = v};
  } else if constexpr (kind == K::character) {
    return {.signed_integer = static_cast<char>(v)};
  } else if constexpr (kind == K::boolean) {
    return {.signed_integer = v ? 1 : 0};
  } else if constexpr (kind == K::short_ || kind == K::int_ || kind == K::long_ || kind == K::long_long) {
    return {.signed_integer = v};
  } else if constexpr (kind == K::unsigned_integer) {
    return {.unsigned_integer = v};
  } else if constexpr (kind == K::floating) {
    return {.floating = v};
  } else if constexpr (kind == K::pointer) {
    return {.object = v};
  } else if constexpr (std::is_function_v<T>) {
    return {.function = reinterpret_cast<void (*)()>(&v)};
  } else {
    return {.object = std::addressof(v)};
  }
}

// Streams args[0 .. count), of the kinds kinds[0 .. count), in order into one
// std::ostringstream and returns its text. `printers` (null where no argument is `custom`)
// holds the printer of each `custom` argument at its index.
[[nodiscard]] PPSCHED_OUTLINE std::string concat_args(const FormatKind* kinds, const FormatArg* args,
                                                      const FormatPrinter* printers, std::size_t count);

// Streams every argument into one string: the library builds its messages with it. Any
// argument an std::ostream takes will do, manipulators included; the text is what one
// std::ostringstream given the arguments in order holds.
template <class... Args>
[[nodiscard]] std::string concat(Args&&... args) {
  if constexpr (sizeof...(Args) == 0) {
    return std::string();
  } else {
    // Constants, in automatic arrays: a static one would be a symbol per list of types.
    const detail::FormatKind kinds[] = {detail::format_kind<std::remove_reference_t<Args>>()...};
    const detail::FormatArg values[] = {detail::format_arg<std::remove_reference_t<Args>>(args)...};
    if constexpr (((detail::format_kind<std::remove_reference_t<Args>>() == detail::FormatKind::custom) || ...)) {
      const detail::FormatPrinter printers[] = {detail::format_printer<std::remove_reference_t<Args>>()...};
      return detail::concat_args(kinds, values, printers, sizeof...(Args));
    } else {
      return detail::concat_args(kinds, values, nullptr, sizeof...(Args));
    }
  }
}

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

namespace detail {
[[nodiscard]] inline error make_error(const error_context& c) { return error(c); }

// The library's throw sites: one out-of-line call each instead of a constructed exception.
[[noreturn]] inline void fail(const error_context& c) { throw error(c); }
}  // namespace detail

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/error.ipp"
#endif
