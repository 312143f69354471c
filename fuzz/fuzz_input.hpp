// The fuzz harnesses' view of libFuzzer's bytes: a reader that turns them into the small
// integers, costs and choices an input to ppsched is made of. Running out of bytes yields
// zeros, so every byte string is a valid (if dull) input and the fuzzer never wastes an
// execution on a rejected encoding. Sizes are bounded by the harness, not by the bytes, so
// an execution stays within a millisecond or so and a hang means a real hang.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

// A property a harness checks: when it fails, say which one before aborting, so a CI log that
// shows only libFuzzer's "deadly signal" still names the broken property (the input itself is
// printed by .ci/reliability).
#define PPSCHED_FUZZ_CHECK(condition, property)                                                  \
  do {                                                                                           \
    if (!(condition)) {                                                                          \
      std::fprintf(stderr, "fuzz check failed: %s (%s:%d)\n", property, __FILE__, __LINE__);     \
      std::abort();                                                                              \
    }                                                                                            \
  } while (false)

namespace ppsched::fuzz {

class FuzzInput {
 public:
  FuzzInput(const std::uint8_t* data, std::size_t size) noexcept : data_(data), size_(size) {}

  [[nodiscard]] bool empty() const noexcept { return pos_ >= size_; }

  [[nodiscard]] std::uint8_t byte() noexcept { return pos_ < size_ ? data_[pos_++] : std::uint8_t{0}; }

  // An integer in [lo, hi], from one or two bytes.
  [[nodiscard]] std::int32_t in_range(std::int32_t lo, std::int32_t hi) noexcept {
    const auto span = static_cast<std::uint32_t>(hi - lo) + 1u;
    std::uint32_t raw = byte();
    if (span > 256u) raw = (raw << 8u) | byte();
    return lo + static_cast<std::int32_t>(raw % span);
  }

  // A cost: usually a small non-negative number, sometimes zero, huge, negative, NaN or
  // infinite — the values a profiler or a hand-written file gets wrong.
  [[nodiscard]] double cost() noexcept {
    const std::uint8_t kind = byte();
    switch (kind % 16u) {
      case 0:
        return 0.0;
      case 1:
        return -static_cast<double>(byte());
      case 2:
        return std::numeric_limits<double>::quiet_NaN();
      case 3:
        return std::numeric_limits<double>::infinity();
      case 4:
        return 1e300 * static_cast<double>(byte());
      case 5:
        return std::numeric_limits<double>::denorm_min() * static_cast<double>(byte());
      case 6: {
        double raw = 0.0;
        std::uint8_t bytes[sizeof raw];
        for (std::uint8_t& b : bytes) b = byte();
        std::memcpy(&raw, bytes, sizeof raw);
        return raw;  // any bit pattern
      }
      default:
        return static_cast<double>(byte()) / 8.0 + static_cast<double>(kind % 4u);
    }
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

}  // namespace ppsched::fuzz
