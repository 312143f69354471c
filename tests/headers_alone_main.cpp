// The header translation units are compiled into a library linked here; compiling them is
// the test. Linking catches definitions in headers that are not inline. The counts come from
// tests/meson.build, so the log says what was covered, the detail/ headers included.
#include <cstdio>

int main() {
  std::printf("%d headers compiled alone, %d of them internals under a detail/ folder\n", PPSCHED_HEADERS_ALONE,
              PPSCHED_HEADERS_ALONE_DETAIL);
  return 0;
}
