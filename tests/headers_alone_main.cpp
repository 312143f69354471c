// The header translation units are compiled into a library linked here; compiling them is
// the test. Linking catches definitions in headers that are not inline. The counts come from
// tests/meson.build, so the log says what was covered, the detail/ headers included (a unit
// compiled without them, as check_warnings.py compiles every unit, prints nothing).
#include <cstdio>

int main() {
#if defined(PPSCHED_HEADERS_ALONE) && defined(PPSCHED_HEADERS_ALONE_DETAIL)
  std::printf("%d headers compiled alone, %d of them internals under a detail/ folder\n", PPSCHED_HEADERS_ALONE,
              PPSCHED_HEADERS_ALONE_DETAIL);
#endif
  return 0;
}
