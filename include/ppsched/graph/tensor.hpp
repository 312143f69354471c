// The element types and shapes of the tensors that cross a stage boundary. A boundary is a
// list of TensorSpec, each a dtype and a maximum element count; a micro-batch may carry
// fewer elements of each. Everything that sizes a transfer — the executor's buffers, the
// simulator's transfer bytes — works from the payload layout here, so the two agree.
//
// The layout of one micro-batch's payload, in bytes: a header of one 64-bit actual count per
// tensor, then each tensor's region (its maximum, at a 16-byte aligned offset), the total
// rounded up to 16 bytes. Actual counts travel in the header, with the data, so the receiver
// learns them without a second message. A boundary's buffers are sized once, at the declared
// maximum, and reused for every length up to it; a transfer moves that maximum, or, for a
// variable-length batch (Batch::sizes), the micro-batch's own payload_floats(specs, counts).
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>

#include "ppsched/error.hpp"

namespace ppsched::inline PPSCHED_MODE {

enum class DType : std::uint8_t { f32, f64, bf16, f16, i32, i64, bytes };

// Storage of the 16-bit float types (the bits; ppsched does no arithmetic on them).
struct bf16 {
  std::uint16_t bits = 0;
};
struct f16 {
  std::uint16_t bits = 0;
};

[[nodiscard]] constexpr std::size_t dtype_size(DType d) noexcept {
  switch (d) {
    case DType::f64:
    case DType::i64:
      return 8;
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::bf16:
    case DType::f16:
      return 2;
    case DType::bytes:
      return 1;
  }
  return 1;
}

[[nodiscard]] constexpr std::string_view to_string(DType d) noexcept {
  switch (d) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::bytes:
      return "bytes";
  }
  return "?";
}

// The DType of a C++ element type (a compile error for any other).
template <class T>
inline constexpr DType dtype_of = [] {
  static_assert(sizeof(T) == 0, "ppsched: no DType for this element type (float, double, bf16, f16, int32_t, "
                                "int64_t, std::byte, unsigned char)");
  return DType::bytes;
}();
template <>
inline constexpr DType dtype_of<float> = DType::f32;
template <>
inline constexpr DType dtype_of<double> = DType::f64;
template <>
inline constexpr DType dtype_of<bf16> = DType::bf16;
template <>
inline constexpr DType dtype_of<f16> = DType::f16;
template <>
inline constexpr DType dtype_of<std::int32_t> = DType::i32;
template <>
inline constexpr DType dtype_of<std::int64_t> = DType::i64;
template <>
inline constexpr DType dtype_of<std::byte> = DType::bytes;
template <>
inline constexpr DType dtype_of<unsigned char> = DType::bytes;

struct TensorSpec {
  DType dtype = DType::f32;
  std::size_t max_count = 0;  // elements

  friend constexpr bool operator==(const TensorSpec&, const TensorSpec&) = default;
};

inline constexpr std::size_t payload_alignment = 16;

namespace detail {

// `bytes` rounded up to the payload alignment (each tensor and the header start on one).
[[nodiscard]] constexpr std::size_t align_payload(std::size_t bytes) noexcept {
  return (bytes + payload_alignment - 1) / payload_alignment * payload_alignment;
}

}  // namespace detail

// Byte offset of tensor `i`'s data in a payload of `specs`.
[[nodiscard]] constexpr std::size_t payload_offset(std::span<const TensorSpec> specs, std::size_t i) noexcept {
  std::size_t at = detail::align_payload(specs.size() * sizeof(std::uint64_t));
  for (std::size_t k = 0; k < i; ++k) at += detail::align_payload(specs[k].max_count * dtype_size(specs[k].dtype));
  return at;
}

// Bytes of one micro-batch's payload of `specs` (the header and every tensor at its maximum).
[[nodiscard]] constexpr std::size_t payload_bytes(std::span<const TensorSpec> specs) noexcept {
  return payload_offset(specs, specs.size());
}

// The same in floats: the unit the backends allocate and move.
[[nodiscard]] constexpr std::size_t payload_floats(std::span<const TensorSpec> specs) noexcept {
  return payload_bytes(specs) / sizeof(float);
}

// Floats of a payload whose tensor i holds counts[i] elements: the header and every tensor up
// to the end of the last one's data, rounded up to 16 bytes. What a variable-length transfer
// moves (Batch::sizes, docs/runtime.md): the tensors keep their declared offsets, so a short
// tensor before a longer one still moves its whole region, and the last tensor with data moves
// only its count. At most payload_floats(specs); the header alone when every count is 0.
// Throws ppsched::error for a count above its tensor's maximum, or a count per tensor missing.
[[nodiscard]] inline std::size_t payload_floats(std::span<const TensorSpec> specs, std::span<const std::size_t> counts) {
  if (counts.size() != specs.size()) {
    detail::fail({"payload_floats", detail::concat("got ", counts.size(), " counts for ", specs.size(), " tensors"), "",
                  "Give one element count per tensor of the list"});
  }
  std::size_t end = detail::align_payload(specs.size() * sizeof(std::uint64_t));
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (counts[i] > specs[i].max_count) {
      detail::fail({"payload_floats",
                    detail::concat("tensor ", i, " is given ", counts[i], " elements, above its declared maximum ",
                                   specs[i].max_count),
                    detail::concat("tensor ", i), "Raise the TensorSpec's max_count, or split the micro-batch"});
    }
    if (counts[i] > 0) end = std::max(end, payload_offset(specs, i) + counts[i] * dtype_size(specs[i].dtype));
  }
  return detail::align_payload(end) / sizeof(float);
}

namespace detail {

// Bytes that carry data when tensor i holds counts[i] elements (the header included): what a
// transfer of exactly the actual sizes would move.
[[nodiscard]] constexpr std::size_t payload_used_bytes(std::span<const TensorSpec> specs,
                                                       std::span<const std::size_t> counts) noexcept {
  std::size_t n = specs.size() * sizeof(std::uint64_t);
  for (std::size_t i = 0; i < specs.size() && i < counts.size(); ++i) n += counts[i] * dtype_size(specs[i].dtype);
  return n;
}

// Throws unless every spec has a size whose payload fits a size_t. `where` names the boundary.
PPSCHED_OUTLINE void check_tensor_specs(std::span<const TensorSpec> specs, std::string_view where);

}  // namespace detail

}  // namespace ppsched

// The bodies of the functions above that compiled mode compiles once (config.hpp).
#if PPSCHED_OUTLINE_BODY
#include "ppsched/graph/impl/tensor.ipp"
#endif
