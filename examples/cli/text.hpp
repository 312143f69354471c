// The command-line tools' two message helpers, written with the public API only (the tools
// are examples of what a user can write): `concat` streams its arguments into one string,
// `fail` throws the library's error shape. The library's own helpers are internal.
#pragma once

#include <sstream>
#include <string>

#include "ppsched/error.hpp"

namespace ppsched::cli {

template <class... Args>
[[nodiscard]] std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return std::move(out).str();
}

[[noreturn]] inline void fail(const error_context& c) { throw error(c); }

}  // namespace ppsched::cli
