#include <ppsched/all.hpp>

int odr_b() {
  const ppsched::error e("x");
  return static_cast<int>(ppsched::op_count) - 1 + (e.what()[0] == 'x' ? 0 : 100);
}
