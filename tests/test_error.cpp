// error.hpp: the one exception type and the shape of its messages ("subject: problem (at
// where). fix", empty parts left out), concat, and that the library's own rejections have
// that shape.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <iomanip>
#include <limits>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "ppsched/error.hpp"
#include "ppsched/schedule/generators.hpp"

using namespace ppsched;
using detail::concat;  // the library's message helpers sit in detail (issue 38)
using detail::fail;
using detail::make_error;

TEST_CASE("format_error writes subject, problem, place and fix, leaving out the empty parts", "[error]") {
  CHECK(format_error({"profile 'gpt.json'", "layer 3 has a negative forward time", "line 4, column 7",
                      "give a time >= 0"}) ==
        "profile 'gpt.json': layer 3 has a negative forward time (at line 4, column 7). give a time >= 0");
  CHECK(format_error({"partition", "more stages than layers"}) == "partition: more stages than layers");
  CHECK(format_error({"partition", "more stages than layers", "", "use at most 4 stages"}) ==
        "partition: more stages than layers. use at most 4 stages");
  CHECK(format_error({"partition", "more stages than layers", "stages", ""}) ==
        "partition: more stages than layers (at stages)");
  CHECK(format_error({"", "bare problem"}) == "bare problem");
}

TEST_CASE("fail throws ppsched::error, a std::runtime_error, with the formatted message", "[error]") {
  static_assert(std::is_base_of_v<std::runtime_error, error>);
  const error_context c{"schedule 'x'", "is empty", "rank 0", "add an action"};
  // What a user writes for an error in the library's shape.
  CHECK(std::string(error({.subject = "schedule 'x'", .problem = "is empty", .where = "rank 0", .fix = "add an action"})
                        .what()) == format_error(c));
  try {
    fail(c);
    FAIL("fail() returned");
  } catch (const error& e) {
    CHECK(std::string(e.what()) == format_error(c));
  }
  CHECK(std::string(make_error(c).what()) == "schedule 'x': is empty (at rank 0). add an action");
  CHECK_THROWS_AS(fail({"a", "b"}), std::runtime_error);
}

TEST_CASE("concat streams every argument into one string", "[error]") {
  CHECK(concat("alone") == "alone");
  CHECK(concat("p=", 4, ", m=", 8u, ", ratio ", 0.5, ' ', std::string("ok")) == "p=4, m=8, ratio 0.5 ok");
}

namespace {
// What concat's text must equal: the arguments streamed, in order, into one ostringstream.
template <class... Args>
std::string streamed(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

struct point {
  int x, y;
};
std::ostream& operator<<(std::ostream& out, const point& p) { return out << '(' << p.x << ", " << p.y << ')'; }

enum class colour { red, blue };
std::ostream& operator<<(std::ostream& out, colour c) { return out << (c == colour::red ? "red" : "blue"); }

enum plain_enum { plain_zero, plain_seven = 7 };

std::ostream& bracket(std::ostream& out) { return out << '['; }
}  // namespace

TEST_CASE("concat gives, for every kind of argument, what one ostringstream gives", "[error]") {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (double d : {0.1, 1e20, 1.0 / 3, -0.0, 0.0, inf, -inf, nan, 1e-300, 123456789.0, 5e-324}) {
    INFO(streamed(d));
    CHECK(concat(d) == streamed(d));
  }
  CHECK(concat(0.1f) == streamed(0.1f));
  CHECK(concat(1e30f, -2.5f) == streamed(1e30f, -2.5f));
  CHECK(concat(1.0L / 3) == streamed(1.0L / 3));  // a long double stays one

  CHECK(concat(std::numeric_limits<int>::min(), ' ', std::numeric_limits<int>::max()) ==
        streamed(std::numeric_limits<int>::min(), ' ', std::numeric_limits<int>::max()));
  CHECK(concat(std::numeric_limits<long long>::min()) == streamed(std::numeric_limits<long long>::min()));
  CHECK(concat(std::numeric_limits<unsigned long long>::max()) ==
        streamed(std::numeric_limits<unsigned long long>::max()));
  CHECK(concat(short{-3}, 7L, 8u, std::size_t{9}, static_cast<unsigned short>(65535)) ==
        streamed(short{-3}, 7L, 8u, std::size_t{9}, static_cast<unsigned short>(65535)));
  // int8_t and uint8_t are chars to a stream.
  CHECK(concat(std::int8_t{65}, std::uint8_t{66}, static_cast<signed char>(67)) == "ABC");

  CHECK(concat('x', '\0', 'y') == streamed('x', '\0', 'y'));
  CHECK(concat(true, false) == streamed(true, false));
  CHECK(concat(true) == "1");

  const char* c_string = "c string";
  char buffer[16] = "short";  // streamed up to its NUL, as the const char* it decays to
  const std::string text = "std::string";
  const std::string_view view = std::string_view("a view, cut").substr(0, 6);
  CHECK(concat(c_string, '|', buffer, '|', text, '|', view, '|', "literal") ==
        streamed(c_string, '|', buffer, '|', text, '|', view, '|', "literal"));
  CHECK(concat(std::string("with\0nul", 8)) == std::string("with\0nul", 8));
  CHECK(concat(std::string("temporary"), std::string_view("!")) == "temporary!");

  int object = 0;
  const void* address = &object;
  CHECK(concat(address, ' ', &object, ' ', nullptr) == streamed(address, ' ', &object, ' ', nullptr));

  CHECK(concat(point{1, -2}, ' ', colour::blue, ' ', plain_seven) ==
        streamed(point{1, -2}, ' ', colour::blue, ' ', plain_seven));
  CHECK(concat(point{3, 4}) == "(3, 4)");

  CHECK(concat() == "");
}

TEST_CASE("concat keeps the stream state a manipulator sets for the arguments after it", "[error]") {
  CHECK(concat(std::hex, 255, ' ', -1, ' ', short{-1}, ' ', -1LL, std::dec, ' ', 255) ==
        streamed(std::hex, 255, ' ', -1, ' ', short{-1}, ' ', -1LL, std::dec, ' ', 255));
  CHECK(concat(std::oct, -8, ' ', 8u) == streamed(std::oct, -8, ' ', 8u));
  CHECK(concat(std::fixed, std::setprecision(2), 1.0 / 3, ' ', 2.5f) ==
        streamed(std::fixed, std::setprecision(2), 1.0 / 3, ' ', 2.5f));
  CHECK(concat(std::fixed, std::setprecision(2), 1.0 / 3) == "0.33");
  CHECK(concat(std::hexfloat, 0.1, ' ', 1e20) == streamed(std::hexfloat, 0.1, ' ', 1e20));
  CHECK(concat(std::scientific, 0.1) == streamed(std::scientific, 0.1));
  CHECK(concat(std::boolalpha, true, ' ', false) == "true false");
  CHECK(concat(std::setw(6), "ab", '|', std::left, std::setw(4), 7, '|', std::setfill('*'), std::right,
               std::setw(5), std::string("x"), '|', std::setw(3), 'c') ==
        streamed(std::setw(6), "ab", '|', std::left, std::setw(4), 7, '|', std::setfill('*'), std::right,
                 std::setw(5), std::string("x"), '|', std::setw(3), 'c'));
  CHECK(concat(std::showpos, 3, ' ', 2.5, std::noshowpos, ' ', 3) ==
        streamed(std::showpos, 3, ' ', 2.5, std::noshowpos, ' ', 3));
  CHECK(concat(std::uppercase, std::hex, 0xabcU) == "ABC");
  CHECK(concat(bracket, 1, ']') == "[1]");  // a manipulator of the user's own
  // The state is the call's own: the next call starts from a fresh stream.
  CHECK(concat(255) == "255");
}

TEST_CASE("a library rejection has the shape: it names the input, the problem and the fix", "[error]") {
  try {
    (void)make_schedule("no-such-family", {2, 4, 1});
    FAIL("an unknown family was accepted");
  } catch (const error& e) {
    const std::string m = e.what();
    INFO(m);
    CHECK(m.rfind("schedule family: unknown family 'no-such-family'", 0) == 0);
    CHECK(m.find(". use one of: ") != std::string::npos);
    for (std::string_view name : family_names()) CHECK(m.find(name) != std::string::npos);
  }
}
