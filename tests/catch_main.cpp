// The one Catch2 main shared by every test executable, compiled once. It is Catch2's main
// (CATCH_CONFIG_MAIN's: Session().run) plus the skips of tests/skip.hpp: a case that calls
// PPSCHED_SKIP is reported as skipped, and the program exits 77 (Meson's SKIP) when every case
// that ran skipped, 1 when a case skipped beside others that ran; never 0 for a skip.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#define PPSCHED_SKIP_MAIN
#include "skip.hpp"

int main(int argc, char* argv[]) {
  const int status = Catch::Session().run(argc, argv);
  return ppsched::test_support::exit_status(status);
}
