// error.hpp: the one exception type and the shape of its messages ("subject: problem (at
// where). fix", empty parts left out), concat, and that the library's own rejections have
// that shape.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>
#include <type_traits>

#include "ppsched/error.hpp"
#include "ppsched/schedule/generators.hpp"

using namespace ppsched;

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
  CHECK(detail::concat("same ", "function") == concat("same ", "function"));
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
