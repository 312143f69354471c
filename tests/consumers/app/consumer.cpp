// A downstream program: includes the umbrella header and uses a value from it.
#include <ppsched/ppsched.hpp>

#include <iostream>

int main() {
  const ppsched::Action a{ppsched::Op::BW, 3, 5};
  const std::string s = ppsched::to_string(a);
  std::cout << "consumer sees " << s << '\n';
  return s == "BW5@s3" ? 0 : 1;
}
