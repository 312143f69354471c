// With odr_b.cpp: two translation units include <ppsched/all.hpp> and are linked into one
// program, so a non-inline definition in any header fails the link.
#include <ppsched/all.hpp>

int odr_b();

int main() {
  const ppsched::Action a{ppsched::Op::F, 1, 2};
  return (ppsched::to_string(a) == "F2@s1" && odr_b() == 10) ? 0 : 1;
}
