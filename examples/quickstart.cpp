// Quickstart placeholder: prints the action IR of a tiny hand-written schedule.
#include <ppsched/ppsched.hpp>

#include <iostream>

int main() {
  using ppsched::Op;
  ppsched::Schedule s{"hand-written", 1, 2, {0}, {{{Op::F, 0, 0}, {Op::F, 0, 1}, {Op::B, 0, 0}, {Op::B, 0, 1}}}};
  std::cout << s;
}
