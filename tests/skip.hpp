// Skipping a Catch2 test case so that Meson reports SKIP with the reason, never a pass.
//
// Catch2 v2 has no skip: a case that returns early passes, and so does a program whose every
// case returned early. PPSCHED_SKIP(reason) records the reason (anything streamable) with the
// running case's name and returns from the case; the main (tests/catch_main.cpp, shared by
// every Catch2 test program; the CUDA tests' own main too) prints `SKIPPED: <case>: <reason>`
// for each after the run and exits
//   - with Catch2's own status when an assertion failed;
//   - 77 (Meson's SKIP) when every case that ran skipped;
//   - 1 when a case skipped in a run where other cases ran: Meson would count it as a pass.
// So a case that may skip is tagged [may_skip], plus one tag that names its condition, and
// runs as a Meson test of its own, one per condition (tests/meson.build): the part's main
// registration runs '~[may_skip]'. Skip at the top of the case, before the checks it is for.
#pragma once

#include <catch2/catch.hpp>
#include <cstddef>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace ppsched::test_support {

struct Skip {
  std::string test_case;
  std::string reason;
};

// The run's record, one per program (an inline function's static: it needs no .cpp file, so
// the CUDA tests, which have their own main, share it).
struct SkipRecord {
  bool listening = false;    // the listener of the main is registered (PPSCHED_SKIP_MAIN)
  std::string current_case;  // the case that is running
  std::size_t cases_run = 0;
  std::vector<Skip> skips;
};

inline SkipRecord& skip_record() {
  static SkipRecord record;
  return record;
}

// Records that the running case skips; the caller then returns from it (PPSCHED_SKIP).
inline void record_skip(std::string reason) {
  SkipRecord& r = skip_record();
  // Without the main's listener nobody would report the skip: the case would pass.
  if (!r.listening)
    FAIL("PPSCHED_SKIP needs the main of tests/catch_main.cpp (or PPSCHED_SKIP_MAIN's listener): skipping: "
         << reason);
  // A case with sections runs once per section: one skip per case.
  if (!r.skips.empty() && r.skips.back().test_case == r.current_case) return;
  r.skips.push_back({r.current_case, std::move(reason)});
}

}  // namespace ppsched::test_support

#define PPSCHED_SKIP(reason)                                                 \
  do {                                                                       \
    std::ostringstream ppsched_skip_reason_;                                 \
    ppsched_skip_reason_ << reason;                                          \
    ::ppsched::test_support::record_skip(ppsched_skip_reason_.str());        \
    return;                                                                  \
  } while (false)

// The main's half: defined (once per program) in the file that defines main, after
// `#define CATCH_CONFIG_RUNNER` and `#include <catch2/catch.hpp>` (which give the event
// listener's base class: CATCH_CONFIG_RUNNER implies CATCH_CONFIG_EXTERNAL_INTERFACES).
#if defined(PPSCHED_SKIP_MAIN)
#if !defined(CATCH_CONFIG_RUNNER)
#error "PPSCHED_SKIP_MAIN belongs in the file with main, which defines CATCH_CONFIG_RUNNER"
#endif

namespace ppsched::test_support {

// Counts the cases that run and names the running one for record_skip.
struct SkipListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testRunStarting(Catch::TestRunInfo const& info) override {
    TestEventListenerBase::testRunStarting(info);
    skip_record().listening = true;
  }
  void testCaseStarting(Catch::TestCaseInfo const& info) override {
    TestEventListenerBase::testCaseStarting(info);
    skip_record().current_case = info.name;
    ++skip_record().cases_run;
  }
};

// The program's exit status from Catch2's (Session::run's) and the skips: see the top.
inline int exit_status(int catch_status) {
  const SkipRecord& r = skip_record();
  for (const Skip& s : r.skips) std::cout << "SKIPPED: " << s.test_case << ": " << s.reason << '\n';
  std::cout.flush();
  if (catch_status != 0 || r.skips.empty()) return catch_status;
  if (r.skips.size() == r.cases_run) return 77;
  std::cerr << "error: " << r.skips.size() << " test case(s) skipped in a run where " << r.cases_run - r.skips.size()
            << " other case(s) ran, which would count the skip as a pass: run the cases that may skip "
               "(tag [may_skip]) as a test of their own, by their condition's tag (tests/meson.build)\n";
  return 1;
}

}  // namespace ppsched::test_support

namespace {
using PpschedSkipListener = ppsched::test_support::SkipListener;
}
CATCH_REGISTER_LISTENER(PpschedSkipListener)
#endif
