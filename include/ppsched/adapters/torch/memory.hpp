// Counting what libtorch allocates on the CPU, per rank: TorchMemoryCounter and
// count_torch_memory. Part of <ppsched/adapters/torch.hpp>.
#pragma once

#include "ppsched/config.hpp"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>

#include "ppsched/error.hpp"
#include "ppsched/runtime/stage.hpp"

namespace ppsched::inline PPSCHED_MODE {
namespace libtorch {

// ------------------------------------------------------------ counting what libtorch allocates, per rank
//
// Peak memory per rank is measured, not computed: TorchMemoryCounter::install() replaces
// libtorch's CPU allocator by a counting one over the same c10::alloc_cpu (c10::SetCPUAllocator,
// once per process, for the process's lifetime: libtorch keeps the pointer). Each allocation is charged
// to the tag of the thread that makes it (TorchMemoryCounter::Tag: a pipeline rank, set by
// count_torch_memory around every call of a stage on its rank thread) and credited back to that
// same tag when it is freed, whichever thread frees it. Per tag the counter keeps the bytes
// held now, their high-water mark (transients inside a call included) and the settled peak: the
// most held at the end of a call, which is what the simulator's memory over time models
// (activations kept between actions, not an operator's workspace). With one intra-op thread
// (torch::set_num_threads(1)) every CPU kernel and autograd's CPU backward run on the calling
// thread, so a rank thread's tag sees all its stage allocates; what other threads allocate goes
// to TorchMemoryCounter::untagged. Allocations made before install() are not counted (their
// frees neither). Tensors over memory libtorch did not allocate (from_blob: the views of the
// executor's buffers) cost nothing here: the executor's own buffers are counted apart
// (docs/accuracy.md, "Peak memory per rank").

class TorchMemoryCounter {
 public:
  static constexpr int tags = 66;       // ranks 0..63, then the two below
  static constexpr int profiling = 64;  // profile_sequential's measurements
  static constexpr int untagged = 65;   // threads without a Tag

  // The process's counter, installing the counting allocator on the first call. Throws when
  // another allocator set with a higher priority keeps it out.
  [[nodiscard]] static TorchMemoryCounter& install();

  // Charges what the calling thread allocates to `tag` while alive (nested: the outer tag
  // returns after).
  class Tag {
   public:
    explicit Tag(int tag);
    ~Tag();
    Tag(const Tag&) = delete;
    Tag& operator=(const Tag&) = delete;

   private:
    int previous_;
  };

  // Bytes of `tag` allocated and not yet freed; their high-water mark; the most held at the end
  // of a call (settle). Each since the last reset_peaks(tag).
  [[nodiscard]] std::int64_t current(int tag) const { return slot(tag).current.load(std::memory_order_relaxed); }
  [[nodiscard]] std::int64_t peak(int tag) const { return slot(tag).peak.load(std::memory_order_relaxed); }
  [[nodiscard]] std::int64_t settled_peak(int tag) const { return slot(tag).settled.load(std::memory_order_relaxed); }
  // Both peaks back to what `tag` holds now (call between steps, with no call running).
  void reset_peaks(int tag) {
    Slot& s = slot(tag);
    const std::int64_t now = s.current.load(std::memory_order_relaxed);
    s.peak.store(now, std::memory_order_relaxed);
    s.settled.store(now, std::memory_order_relaxed);
  }
  // Records what `tag` holds now as a settled value (the end of a call).
  void settle(int tag) {
    Slot& s = slot(tag);
    raise(s.settled, s.current.load(std::memory_order_relaxed));
  }

  void add(int tag, std::int64_t bytes) {
    Slot& s = slot(tag);
    raise(s.peak, s.current.fetch_add(bytes, std::memory_order_relaxed) + bytes);
  }
  void remove(int tag, std::int64_t bytes) { slot(tag).current.fetch_sub(bytes, std::memory_order_relaxed); }

  // The tag of the calling thread (untagged outside any Tag).
  [[nodiscard]] static int& thread_tag() noexcept {
    static thread_local int tag = untagged;
    return tag;
  }

 private:
  struct Slot {
    std::atomic<std::int64_t> current{0}, peak{0}, settled{0};
  };
  std::array<Slot, tags> slots_;

  [[nodiscard]] const Slot& slot(int tag) const { return slots_.at(checked(tag)); }
  [[nodiscard]] Slot& slot(int tag) { return slots_.at(checked(tag)); }
  [[nodiscard]] static std::size_t checked(int tag) {
    if (tag < 0 || tag >= tags) {
      detail::fail({"torch memory counter", detail::concat("tag ", tag, " is outside [0, ", tags, ")"), "TorchMemoryCounter",
            "Tag ranks 0..63 (more ranks than that in one process are not counted)"});
    }
    return static_cast<std::size_t>(tag);
  }
  static void raise(std::atomic<std::int64_t>& peak, std::int64_t value) {
    std::int64_t seen = peak.load(std::memory_order_relaxed);
    while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
    }
  }
};

}  // namespace libtorch
namespace detail::torch_adapter {

// libtorch's own CPU allocation (c10::alloc_cpu, aligned as its default allocator aligns) with
// a header before each block: its size and owner, so that its free is credited to the tag that
// allocated it. The block's address is its context and the deleter is fixed, as raw_allocate
// (which some kernels use: gelu's) requires.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(libtorch::TorchMemoryCounter* counter) { counter_() = counter; }

  c10::DataPtr allocate(std::size_t n) const override {
    auto* base = static_cast<std::byte*>(c10::alloc_cpu(header + n));
    const int owner = libtorch::TorchMemoryCounter::thread_tag();
    new (base) Header{static_cast<std::int64_t>(n), owner};
    counter_()->add(owner, static_cast<std::int64_t>(n));
    void* data = base + header;
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  [[nodiscard]] c10::DeleterFnPtr raw_deleter() const override { return &release; }

 private:
  struct Header {
    std::int64_t bytes;
    int owner;
  };
  // A multiple of the alignment, so that the data after it is aligned as the block is.
  static constexpr std::size_t header = (sizeof(Header) + c10::gAlignment - 1) / c10::gAlignment * c10::gAlignment;
  static libtorch::TorchMemoryCounter*& counter_() {
    static libtorch::TorchMemoryCounter* counter = nullptr;
    return counter;
  }
  static void release(void* data) {
    if (data == nullptr) return;
    std::byte* base = static_cast<std::byte*>(data) - header;
    const Header h = *reinterpret_cast<const Header*>(base);
    counter_()->remove(h.owner, h.bytes);
    c10::free_cpu(base);
  }
};

}  // namespace detail::torch_adapter
namespace libtorch {

inline TorchMemoryCounter& TorchMemoryCounter::install() {
  // Never freed: libtorch keeps the allocator for the process's life, and blocks freed at exit
  // still credit the counter.
  static TorchMemoryCounter* const counter = [] {
    auto* c = new TorchMemoryCounter;
    auto* a = new detail::torch_adapter::CountingCpuAllocator(c);
    // Above the default allocator's priority (0), so that it takes; the highest, so that a
    // later SetCPUAllocator of lower priority cannot drop the counting unnoticed.
    c10::SetCPUAllocator(a, std::numeric_limits<std::uint8_t>::max());
    if (c10::GetCPUAllocator() != a) {
      detail::fail({"torch memory counter", "libtorch kept its CPU allocator (another was set with the highest priority)",
            "TorchMemoryCounter::install", "Do not set a CPU allocator of priority 255 when counting memory"});
    }
    return c;
  }();
  return *counter;
}

inline TorchMemoryCounter::Tag::Tag(int tag) : previous_(thread_tag()) {
  (void)checked(tag);
  thread_tag() = tag;
}
inline TorchMemoryCounter::Tag::~Tag() { thread_tag() = previous_; }

// `f` with every call charged to its rank (StageContext::rank) and settled at its end: set on
// each stage of a World whose memory is measured (the bench, the tests). Keeps an around_call
// already set, inside the tag.
[[nodiscard]] inline StageFunctions count_torch_memory(StageFunctions f) {
  TorchMemoryCounter& counter = TorchMemoryCounter::install();
  f.around_call = [&counter, inner = std::move(f.around_call)](const StageContext& c, StageCallRef call) {
    const TorchMemoryCounter::Tag tag(c.rank);
    if (inner) {
      inner(c, call);
    } else {
      call();
    }
    counter.settle(c.rank);
  };
  return f;
}

}  // namespace libtorch

}  // namespace ppsched
