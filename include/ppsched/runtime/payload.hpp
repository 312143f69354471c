// Typed views of a stage boundary's payload. A stage that declares `input_tensors` /
// `output_tensors` (StageFunctions) still gets float spans — the raw payload, laid out as
// graph/tensor.hpp says — and reads and writes its tensors through these views: the actual
// count of each tensor (set by the writer, at most its maximum), and its elements as a span
// of the C++ type of its dtype. Gradients have the layout of the tensors they belong to.
//
// The views read the header on the host, so they work where the payload is host memory (the
// CPU backend, and stage 0's slice of the batch). On a GPU backend the payload is device
// memory: use payload_offset() for the pointers and write the counts from the device.
//
// Side inputs are per-micro-batch data that any stage may read without it travelling through
// the pipeline (attention masks, position ids, labels for a loss on another stage): the
// batch holds them, the context hands a stage its micro-batch's slice.
#pragma once

#include "ppsched/config.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

#include "ppsched/error.hpp"
#include "ppsched/graph/tensor.hpp"

namespace ppsched::inline PPSCHED_MODE {

template <bool writable>
class BasicPayload {
  using Float = std::conditional_t<writable, float, const float>;
  using Byte = std::conditional_t<writable, std::byte, const std::byte>;

 public:
  // `raw` holds payload_floats(specs), or, for a micro-batch of a variable-length batch
  // (Batch::sizes), fewer: at least the header, and then each tensor's count up to where the
  // span ends. `specs` must outlive the view.
  BasicPayload(std::span<Float> raw, std::span<const TensorSpec> specs) : specs_(specs) {
    const std::size_t header = detail::align_payload(specs.size() * sizeof(std::uint64_t)) / sizeof(float);
    if (raw.size() > payload_floats(specs) || raw.size() < header) {
      detail::fail({"payload",
                    detail::concat("has ", raw.size(), " floats but its ", specs.size(), " tensors take ",
                                   raw.size() < header ? header : payload_floats(specs),
                                   raw.size() < header ? " for their header" : " at most"),
                    "", "View a stage's own input or output span with the stage's own tensor list"});
    }
    bytes_ = byte_view(raw);
  }

  [[nodiscard]] std::size_t tensors() const noexcept { return specs_.size(); }
  [[nodiscard]] const TensorSpec& spec(std::size_t i) const { return specs_[checked(i)]; }

  // The actual element count of tensor i, as its writer set it.
  [[nodiscard]] std::size_t count(std::size_t i) const {
    std::uint64_t n = 0;
    std::memcpy(&n, bytes_.data() + checked(i) * sizeof(std::uint64_t), sizeof n);
    if (n > specs_[i].max_count) {
      detail::fail({"payload", detail::concat("tensor ", i, " says it holds ", n, " elements, above its maximum ",
                                      specs_[i].max_count, " (a count never set, or set by another layout)"),
            detail::concat("tensor ", i), "Set each output tensor's count (Payload::set_count) in the call that writes it"});
    }
    if (n > room(i)) {
      detail::fail({"payload",
                    detail::concat("tensor ", i, " says it holds ", n, " elements, but this micro-batch's payload of ",
                                   bytes_.size() / sizeof(float), " floats has room for ", room(i)),
                    detail::concat("tensor ", i),
                    "Give the micro-batch's size in Batch::sizes as payload_floats(specs, counts) of what it carries"});
    }
    return static_cast<std::size_t>(n);
  }

  // The most elements tensor i can hold in this span: its maximum, or, in a shorter payload
  // (a variable-length micro-batch, Batch::sizes), what fits before the span's end.
  [[nodiscard]] std::size_t room(std::size_t i) const {
    const std::size_t at = payload_offset(specs_, checked(i));
    const std::size_t fit = bytes_.size() > at ? (bytes_.size() - at) / dtype_size(specs_[i].dtype) : 0;
    return std::min(fit, specs_[i].max_count);
  }

  // Tensor i's elements, count(i) of them, as T (T must be the tensor's dtype).
  template <class T>
  [[nodiscard]] std::span<std::conditional_t<writable, T, const T>> tensor(std::size_t i) const {
    return typed<T>(i, count(i));
  }

  // Sets tensor i's actual count (at most its maximum) and returns its elements.
  template <class T>
  std::span<T> resize(std::size_t i, std::size_t n) const
    requires writable
  {
    set_count(i, n);
    return typed<T>(i, n);
  }
  void set_count(std::size_t i, std::size_t n) const
    requires writable
  {
    if (n > specs_[checked(i)].max_count) {
      detail::fail({"payload", detail::concat("tensor ", i, " is given ", n, " elements, above its declared maximum ",
                                      specs_[i].max_count),
            detail::concat("tensor ", i), "Raise the TensorSpec's max_count, or split the micro-batch"});
    }
    if (n > room(i)) {
      detail::fail({"payload",
                    detail::concat("tensor ", i, " is given ", n, " elements, but this micro-batch's payload of ",
                                   bytes_.size() / sizeof(float), " floats has room for ", room(i),
                                   " (its size in Batch::sizes)"),
                    detail::concat("tensor ", i),
                    "Give the micro-batch's size in Batch::sizes as payload_floats(specs, counts) of what it carries"});
    }
    const auto v = static_cast<std::uint64_t>(n);
    std::memcpy(bytes_.data() + i * sizeof(std::uint64_t), &v, sizeof v);
  }

 private:
  std::span<Byte> bytes_;
  std::span<const TensorSpec> specs_;

  [[nodiscard]] std::size_t checked(std::size_t i) const {
    if (i >= specs_.size()) {
      detail::fail({"payload", detail::concat("has no tensor ", i, "; it has ", specs_.size()), "",
            "Use an index below the length of the stage's tensor list"});
    }
    return i;
  }

  template <class T>
  [[nodiscard]] std::span<std::conditional_t<writable, T, const T>> typed(std::size_t i, std::size_t n) const {
    using E = std::conditional_t<writable, T, const T>;
    if (dtype_of<std::remove_const_t<T>> != specs_[checked(i)].dtype) {
      detail::fail({"payload", detail::concat("tensor ", i, " is ", to_string(specs_[i].dtype), ", read as ",
                                      to_string(dtype_of<std::remove_const_t<T>>)),
            detail::concat("tensor ", i), "Read each tensor as the C++ type of its dtype"});
    }
    // The payload is float storage at a 16-byte aligned offset; the region holds T's (n of
    // them fit: count and set_count checked; an empty tensor past a short span's end is empty).
    if (n == 0) return {};
    return {reinterpret_cast<E*>(bytes_.data() + payload_offset(specs_, i)), n};
  }

  template <class F>
  static std::span<Byte> byte_view(std::span<F> raw) {
    if constexpr (writable) {
      return std::as_writable_bytes(raw);
    } else {
      return std::as_bytes(raw);
    }
  }
};

// A payload a callable writes (forward's output, a backward's grad_input, the loss's
// grad_output) and one it reads.
using Payload = BasicPayload<true>;
using ConstPayload = BasicPayload<false>;

// One side input of a batch: `count` elements of `dtype` per micro-batch, the micro-batches
// one after the other in `data` (the caller keeps it alive during the step).
struct SideInput {
  DType dtype = DType::bytes;
  std::size_t count = 0;
  std::span<const std::byte> data{};

  template <class T>
  [[nodiscard]] static SideInput of(std::span<const T> values, std::size_t per_microbatch) {
    return {dtype_of<T>, per_microbatch, std::as_bytes(values)};
  }
};

// How a stage reads one side input it lists (StageFunctions::side_input_specs): the dtype and
// the elements per micro-batch the batch's SideInput must have.
struct SideInputSpec {
  DType dtype = DType::bytes;
  std::size_t count = 0;

  friend bool operator==(const SideInputSpec&, const SideInputSpec&) = default;
};

}  // namespace ppsched
