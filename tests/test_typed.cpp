// Typed, variable-size stage boundaries: every dtype crosses every schedule family with a
// different actual count per micro-batch, exactly (int64 above 2^24 included); side inputs
// reach the stages that read them; bad boundaries, sizes and batches fail with the place
// and the fix; a step allocates nothing for any length up to the declared maximum.
#include <algorithm>
#include <chrono>
#include <atomic>
#include <cmath>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <functional>
#include <ppsched/backend/cpu.hpp>
#include <ppsched/runtime/payload.hpp>
#include <ppsched/runtime/synthetic.hpp>
#include <ppsched/runtime/world.hpp>
#include <ppsched/schedule/generators.hpp>
#include <ppsched/sim/boundaries.hpp>
#include <ppsched/sim/simulate.hpp>
#include <span>
#include <string>
#include <vector>

#include "counting_new.hpp"
#include "training_families.hpp"

using ppsched::ConstPayload;
using ppsched::CpuBackend;
using ppsched::CpuCluster;
using ppsched::DType;
using ppsched::Payload;
using ppsched::StageContext;
using ppsched::StageFunctions;
using ppsched::TensorSpec;
using ppsched::World;

namespace {

using ppsched_test::backends;
using ppsched_test::Family;
using ppsched_test::make;
const std::vector<Family> families = ppsched_test::training_families();

constexpr std::size_t max_len = 8;
// One tensor of every dtype, each up to max_len elements.
const std::vector<TensorSpec> boundary{{DType::f32, max_len},  {DType::f64, max_len}, {DType::bf16, max_len},
                                       {DType::f16, max_len},  {DType::i32, max_len}, {DType::i64, max_len},
                                       {DType::bytes, max_len}};
// The gradient carries the f32 tensor only (count 0 for the rest).
std::size_t length(int mb) { return 1 + static_cast<std::size_t>(mb * 3) % max_len; }
constexpr std::int64_t big = std::int64_t{1} << 40;  // not exact as a float

// Element k of micro-batch mb after `stages` forwards, per tensor kind.
double value(int mb, std::size_t k, int stages) { return static_cast<double>(10 * mb + static_cast<int>(k) + stages); }

// Adds one to every element of every tensor (big to the int64 one); checks counts.
void step_forward(ConstPayload in, Payload out, std::size_t len, int& bad) {
  for (std::size_t t = 0; t < in.tensors(); ++t) bad += in.count(t) != len;
  auto f32 = out.resize<float>(0, len);
  auto f64 = out.resize<double>(1, len);
  auto b16 = out.resize<ppsched::bf16>(2, len);
  auto h16 = out.resize<ppsched::f16>(3, len);
  auto i32 = out.resize<std::int32_t>(4, len);
  auto i64 = out.resize<std::int64_t>(5, len);
  auto raw = out.resize<std::byte>(6, len);
  for (std::size_t k = 0; k < len; ++k) {
    f32[k] = in.tensor<float>(0)[k] + 1.0f;
    f64[k] = in.tensor<double>(1)[k] + 1.0;
    b16[k].bits = static_cast<std::uint16_t>(in.tensor<ppsched::bf16>(2)[k].bits + 1);
    h16[k].bits = static_cast<std::uint16_t>(in.tensor<ppsched::f16>(3)[k].bits + 1);
    i32[k] = in.tensor<std::int32_t>(4)[k] + 1;
    i64[k] = in.tensor<std::int64_t>(5)[k] + big;
    raw[k] = static_cast<std::byte>(std::to_integer<int>(in.tensor<std::byte>(6)[k]) + 1);
  }
}

void write_input(Payload p, int mb) {
  const std::size_t len = length(mb);
  auto f32 = p.resize<float>(0, len);
  auto f64 = p.resize<double>(1, len);
  auto b16 = p.resize<ppsched::bf16>(2, len);
  auto h16 = p.resize<ppsched::f16>(3, len);
  auto i32 = p.resize<std::int32_t>(4, len);
  auto i64 = p.resize<std::int64_t>(5, len);
  auto raw = p.resize<std::byte>(6, len);
  for (std::size_t k = 0; k < len; ++k) {
    const double v = value(mb, k, 0);
    f32[k] = static_cast<float>(v);
    f64[k] = v;
    b16[k].bits = static_cast<std::uint16_t>(v);
    h16[k].bits = static_cast<std::uint16_t>(v);
    i32[k] = static_cast<std::int32_t>(v);
    i64[k] = static_cast<std::int64_t>(v);
    raw[k] = static_cast<std::byte>(static_cast<int>(v));
  }
}

struct TypedModel {
  std::atomic<int> bad{0};
  std::atomic<int> checked{0};
  int stages = 0;

  std::vector<StageFunctions> functions(int n) {
    stages = n;
    std::vector<StageFunctions> out;
    for (int s = 0; s < n; ++s) {
      StageFunctions f;
      f.input_tensors = boundary;
      f.output_tensors = boundary;
      if (s + 1 == n) f.side_inputs = {0};
      if (s == 0) f.side_inputs.push_back(1);
      f.forward = [this, s](const StageContext& c, std::span<const float> in, std::span<float> o) {
        int b = 0;
        const std::size_t len = length(c.microbatch);
        step_forward(ConstPayload(in, boundary), Payload(o, boundary), len, b);
        if (s == 0) {  // the mask side input: len ones, then zeros
          const auto mask = c.side_input<std::uint8_t>(1);
          b += static_cast<int>(std::count(mask.begin(), mask.end(), std::uint8_t{1})) != static_cast<int>(len);
        }
        bad += b;
        ++checked;
      };
      f.backward_input = [this, s](const StageContext& c, std::span<const float>, std::span<const float> g,
                                   std::span<float> gi) {
        const std::size_t len = length(c.microbatch);
        const ConstPayload grad(g, boundary);
        int b = grad.count(0) != len;
        for (std::size_t t = 1; t < grad.tensors(); ++t) b += grad.count(t) != 0;
        // The gradient arriving at stage s is (stages - 1 - s) + the loss's 1.
        for (float x : grad.tensor<float>(0)) b += x != static_cast<float>(stages - s);
        if (s > 0) {
          const Payload grad_in(gi, boundary);
          for (std::size_t t = 1; t < grad_in.tensors(); ++t) grad_in.set_count(t, 0);
          auto gf = grad_in.resize<float>(0, len);
          for (float& x : gf) x = static_cast<float>(stages - s + 1);
        }
        bad += b;
        ++checked;
      };
      f.backward_weight = [](const StageContext&, std::span<const float>, std::span<const float>, std::span<float>) {};
      if (s + 1 == n) {
        f.loss = [this](const StageContext& c, std::span<const float> o, std::span<const float>, std::span<float> g) {
          const int mb = c.microbatch;
          const std::size_t len = length(mb);
          const ConstPayload y(o, boundary);
          int b = 0;
          for (std::size_t t = 0; t < y.tensors(); ++t) b += y.count(t) != len;
          const auto labels = c.side_input<std::int64_t>(0);
          b += labels.size() != 1 || labels[0] != 1000 + mb;
          for (std::size_t k = 0; k < len; ++k) {
            const double v = value(mb, k, stages);
            b += y.tensor<float>(0)[k] != static_cast<float>(v);
            b += y.tensor<double>(1)[k] != v;
            b += y.tensor<ppsched::bf16>(2)[k].bits != static_cast<std::uint16_t>(v);
            b += y.tensor<ppsched::f16>(3)[k].bits != static_cast<std::uint16_t>(v);
            b += y.tensor<std::int32_t>(4)[k] != static_cast<std::int32_t>(v);
            b += y.tensor<std::int64_t>(5)[k] != static_cast<std::int64_t>(value(mb, k, 0)) + stages * big;
            b += std::to_integer<int>(y.tensor<std::byte>(6)[k]) != static_cast<int>(v);
          }
          const Payload grad(g, boundary);
          for (std::size_t t = 1; t < grad.tensors(); ++t) grad.set_count(t, 0);
          for (float& x : grad.resize<float>(0, len)) x = 1.0f;
          bad += b;
          ++checked;
          return static_cast<float>(len);
        };
      }
      out.push_back(std::move(f));
    }
    return out;
  }
};

struct TypedBatch {
  std::vector<float> inputs;
  std::vector<std::int64_t> labels;
  std::vector<std::uint8_t> mask;
  std::vector<ppsched::SideInput> side;
  explicit TypedBatch(int m) : inputs(static_cast<std::size_t>(m) * ppsched::payload_floats(boundary)) {
    const std::size_t n = ppsched::payload_floats(boundary);
    for (int mb = 0; mb < m; ++mb) {
      write_input(Payload(std::span<float>(inputs).subspan(static_cast<std::size_t>(mb) * n, n), boundary), mb);
      labels.push_back(1000 + mb);
      for (std::size_t k = 0; k < max_len; ++k) mask.push_back(k < length(mb) ? 1 : 0);
    }
    side.push_back(ppsched::SideInput::of<std::int64_t>(labels, 1));
    side.push_back({DType::bytes, max_len, std::as_bytes(std::span<const std::uint8_t>(mask))});
  }
  [[nodiscard]] ppsched::Batch view() const { return {inputs, {}, side}; }
};

}  // namespace

TEST_CASE("every dtype crosses every family with a variable count per micro-batch", "[typed]") {
  const auto mode = GENERATE(ppsched::CpuMode::threaded, ppsched::CpuMode::deterministic);
  for (const Family& fam : families) {
    for (int p : {2, 4}) {
      const ppsched::Schedule s = make(fam, p, 2 * p);
      ppsched::CpuOptions co;
      co.mode = mode;
      CpuCluster cluster(p, co);
      TypedModel model;
      World<CpuBackend> world(backends(cluster), s, model.functions(s.stages()));
      const TypedBatch batch(s.microbatches);
      const auto& r = world.run_step(batch.view());
      INFO(fam.name << " p=" << p);
      CHECK(model.bad == 0);
      // forward per (stage, mb), backward_input per (stage, mb), loss per mb.
      CHECK(model.checked == s.microbatches * (2 * s.stages() + 1));
      for (int mb = 0; mb < s.microbatches; ++mb) CHECK(r.losses[static_cast<std::size_t>(mb)] == length(mb));
    }
  }
}

TEST_CASE("the payload layout aligns every tensor and keeps int64 exact", "[typed]") {
  CHECK(ppsched::payload_bytes(boundary) % ppsched::payload_alignment == 0);
  for (std::size_t i = 0; i < boundary.size(); ++i) CHECK(ppsched::payload_offset(boundary, i) % 16 == 0);
  // Header (7 counts -> 64 bytes), then 32 + 64 + 16 + 16 + 32 + 64 + 8 -> 16-aligned each.
  CHECK(ppsched::payload_bytes(boundary) == 64 + 32 + 64 + 16 + 16 + 32 + 64 + 16);
  std::vector<float> raw(ppsched::payload_floats(boundary));
  const Payload p(raw, boundary);
  p.resize<std::int64_t>(5, 1)[0] = big + 1;
  CHECK(ConstPayload(raw, boundary).tensor<std::int64_t>(5)[0] == big + 1);
  CHECK_THROWS_WITH(p.set_count(0, max_len + 1), Catch::Contains("above its declared maximum"));
  CHECK_THROWS_WITH(p.tensor<double>(0), Catch::Contains("tensor 0 is f32, read as f64"));
  CHECK_THROWS_WITH(Payload(std::span<float>(raw).first(3), boundary), Catch::Contains("has 3 floats"));
}

namespace {

void require_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const ppsched::error& e) {
    const std::string what = e.what();
    INFO(what);
    for (const auto& part : parts) CHECK(what.find(part) != std::string::npos);
    return;
  }
  FAIL("expected a ppsched::error");
}

}  // namespace

TEST_CASE("bad boundaries, sizes and side inputs fail with the place and the fix", "[typed]") {
  const ppsched::Schedule s = make({"1f1b", 1}, 2, 2);
  CpuCluster cluster(2);
  TypedModel model;
  const TypedBatch batch(2);
  {
    auto fns = model.functions(2);
    fns[1].input_tensors[1].dtype = DType::f32;
    require_error([&] { World<CpuBackend> w(backends(cluster), s, fns); },
                  {"tensor 1: stage 0 gives f64 x 8 but stage 1 takes f32 x 8", "stages 0 and 1", "same dtype"});
  }
  {
    auto fns = model.functions(2);
    fns[1].input_tensors[0].max_count = 9;
    require_error([&] { World<CpuBackend> w(backends(cluster), s, fns); }, {"f32 x 8", "f32 x 9", "max_count"});
  }
  {
    auto fns = model.functions(2);
    fns[1].input_tensors.clear();
    fns[1].input_size = ppsched::payload_floats(boundary);
    require_error([&] { World<CpuBackend> w(backends(cluster), s, fns); }, {"typed tensors", "takes floats"});
  }
  {
    auto fns = model.functions(2);
    fns[0].forward = [](const StageContext&, std::span<const float>, std::span<float> o) {
      Payload(o, boundary).set_count(0, max_len + 1);
    };
    World<CpuBackend> w(backends(cluster), s, fns);
    require_error([&] { (void)w.run_step(batch.view()); },
                  {"stage 0", "micro-batch 0", "9 elements, above its declared maximum 8", "max_count"});
  }
  {
    World<CpuBackend> w(backends(cluster), s, model.functions(2));
    const ppsched::Batch only_labels{batch.inputs, {}, std::span<const ppsched::SideInput>(batch.side).first(1)};
    require_error([&] { (void)w.run_step(only_labels); }, {"has 1 side inputs, but stage 0 reads side input 1"});
    const ppsched::SideInput short_labels{DType::i64, 1, std::as_bytes(std::span<const std::int64_t>(batch.labels)).first(8)};
    const ppsched::SideInput sides[] = {short_labels, batch.side[1]};
    require_error([&] { (void)w.run_step({batch.inputs, {}, sides}); }, {"side input 0 holds 8 bytes", "need 16"});
  }
  {
    // A side input read without being listed still fails by name, inside the step.
    auto fns = model.functions(2);
    fns[1].side_inputs.clear();
    fns[0].side_inputs.clear();
    World<CpuBackend> w(backends(cluster), s, fns);
    require_error([&] { (void)w.run_step({batch.inputs, {}, {}}); }, {"reads side input", "Batch::side_inputs"});
  }
}

TEST_CASE("a typed step allocates nothing for any length up to the maximum", "[typed]") {
  const ppsched::Schedule s = make({"zb-h1", 1}, 4, 8);
  CpuCluster cluster(4);
  TypedModel model;
  World<CpuBackend> world(backends(cluster), s, model.functions(4));
  const TypedBatch batch(8);
  (void)world.run_step(batch.view());
  allocations = 0;
  counting = true;
  for (int step = 0; step < 3; ++step) (void)world.run_step(batch.view());
  counting = false;
  CHECK(allocations.load() == 0);
  CHECK(model.bad == 0);
}


// Issue 42: each micro-batch's exact size on the wire. Batch::sizes gives every stage's size of
// every micro-batch; the plan keeps the declared maximum as each buffer's and transfer's
// capacity (PlannedTransfer::count), and each send and receive moves the micro-batch's size.
// The proof: the CPU backend's transfer accounting counts exactly the sizes, each callable sees
// spans of exactly its micro-batch's size, and a run without sizes still moves the maximum.
namespace {

// A hidden state of `hidden` floats per token, up to `cap` tokens, crosses every boundary as
// one f32 tensor: y = tanh(x * w) per element, w a weight of `hidden` floats per stage; the
// last stage's loss is sum(y^2) / 2. Everything reads only the tokens its payload counts, so
// padding (a run without Batch::sizes) is inert: both runs compute the same numbers.
constexpr std::size_t hidden = 3;
constexpr std::size_t cap_tokens = 20;
const std::vector<TensorSpec> states{{DType::f32, cap_tokens * hidden}};
std::size_t tokens_of(int mb, int step) { return 1 + static_cast<std::size_t>(7 * mb + 5 * step) % cap_tokens; }
std::size_t state_floats(std::size_t tokens) {
  const std::size_t counts[] = {tokens * hidden};
  return ppsched::payload_floats(states, counts);
}

struct TokenModel {
  int stages = 0;
  std::vector<std::vector<float>> weights;         // per stage
  std::vector<std::vector<float>> totals;          // per stage: the last optimizer_step's total
  std::atomic<int> wrong_span{0};                  // a span not of the micro-batch's size
  std::atomic<int> calls{0};
  const std::vector<std::size_t>* expected = nullptr;  // per micro-batch: its payload floats; null: the maximum
  int step = 0;

  [[nodiscard]] std::size_t want(int mb) const {
    return expected == nullptr ? ppsched::payload_floats(states) : (*expected)[static_cast<std::size_t>(mb)];
  }
  void check(std::span<const float> s, int mb) { wrong_span += s.size() != want(mb); }

  std::vector<StageFunctions> functions(int n) {
    stages = n;
    weights.assign(static_cast<std::size_t>(n), {});
    totals.assign(static_cast<std::size_t>(n), {});
    for (int s = 0; s < n; ++s) {
      for (std::size_t h = 0; h < hidden; ++h) weights[static_cast<std::size_t>(s)].push_back(0.5f + 0.1f * static_cast<float>(s + h));
    }
    std::vector<StageFunctions> out(static_cast<std::size_t>(n));
    for (int s = 0; s < n; ++s) {
      StageFunctions& f = out[static_cast<std::size_t>(s)];
      const auto& w = weights[static_cast<std::size_t>(s)];
      f.input_tensors = states;
      f.output_tensors = states;
      f.weight_grad_size = hidden;
      f.forward = [this, &w](const StageContext& c, std::span<const float> in, std::span<float> o) {
        ++calls;
        check(in, c.microbatch);
        check(o, c.microbatch);
        const auto x = ConstPayload(in, states).tensor<float>(0);
        const auto y = Payload(o, states).resize<float>(0, x.size());
        for (std::size_t i = 0; i < x.size(); ++i) y[i] = std::tanh(x[i] * w[i % hidden]);
      };
      f.backward_input = [this, &w, s](const StageContext& c, std::span<const float> in, std::span<const float> g,
                                       std::span<float> gi) {
        check(in, c.microbatch);
        check(g, c.microbatch);
        if (s == 0) return;  // stage 0's input takes no gradient
        check(gi, c.microbatch);
        const auto x = ConstPayload(in, states).tensor<float>(0);
        const auto go = ConstPayload(g, states).tensor<float>(0);
        const auto into = Payload(gi, states).resize<float>(0, x.size());
        for (std::size_t i = 0; i < x.size(); ++i) {
          const float y = std::tanh(x[i] * w[i % hidden]);
          into[i] = go[i] * (1.0f - y * y) * w[i % hidden];
        }
      };
      f.backward_weight = [this, &w](const StageContext& c, std::span<const float> in, std::span<const float> g,
                                     std::span<float> wg) {
        check(in, c.microbatch);
        check(g, c.microbatch);
        const auto x = ConstPayload(in, states).tensor<float>(0);
        const auto go = ConstPayload(g, states).tensor<float>(0);
        for (std::size_t i = 0; i < x.size(); ++i) {
          const float y = std::tanh(x[i] * w[i % hidden]);
          wg[i % hidden] += go[i] * (1.0f - y * y) * x[i];
        }
      };
      f.optimizer_step = [this, s](std::span<const float> total) {
        totals[static_cast<std::size_t>(s)].assign(total.begin(), total.end());
      };
    }
    out.back().loss = [this](const StageContext& c, std::span<const float> o, std::span<const float>, std::span<float> g) {
      check(o, c.microbatch);
      check(g, c.microbatch);
      const auto y = ConstPayload(o, states).tensor<float>(0);
      const auto dy = Payload(g, states).resize<float>(0, y.size());
      float loss = 0.0f;
      for (std::size_t i = 0; i < y.size(); ++i) {
        loss += 0.5f * y[i] * y[i];
        dy[i] = y[i];
      }
      return loss;
    };
    return out;
  }
};

// Stage 0's payloads, at the declared maximum each (Batch::inputs), and Batch::sizes.
struct TokenBatch {
  std::vector<float> inputs;
  std::vector<std::size_t> floats;  // per micro-batch
  std::vector<ppsched::MicrobatchSize> sizes;

  TokenBatch(int stages, int m, int step) {
    const std::size_t per = ppsched::payload_floats(states);
    inputs.assign(static_cast<std::size_t>(m) * per, 0.0f);
    for (int mb = 0; mb < m; ++mb) {
      const std::size_t n = tokens_of(mb, step) * hidden;
      const auto x = Payload(std::span<float>(inputs).subspan(static_cast<std::size_t>(mb) * per, per), states)
                         .resize<float>(0, n);
      for (std::size_t i = 0; i < n; ++i) x[i] = 0.01f * static_cast<float>((mb * 31 + static_cast<int>(i) * 7) % 97) - 0.4f;
      floats.push_back(state_floats(tokens_of(mb, step)));
    }
    for (int s = 0; s < stages; ++s) {
      for (int mb = 0; mb < m; ++mb) sizes.push_back({floats[static_cast<std::size_t>(mb)], floats[static_cast<std::size_t>(mb)]});
    }
  }
  [[nodiscard]] ppsched::Batch exact() const { return {inputs, {}, {}, sizes}; }
  [[nodiscard]] ppsched::Batch padded() const { return {inputs, {}, {}}; }
};

std::size_t sent(CpuCluster& c, int ranks) {
  std::size_t n = 0;
  for (int r = 0; r < ranks; ++r) n += c.rank(r).floats_sent();
  return n;
}
std::size_t received(CpuCluster& c, int ranks) {
  std::size_t n = 0;
  for (int r = 0; r < ranks; ++r) n += c.rank(r).floats_received();
  return n;
}

}  // namespace

TEST_CASE("a variable-length transfer moves the micro-batch's size, and callables see spans of it", "[typed][issue42]") {
  const auto mode = GENERATE(ppsched::CpuMode::threaded, ppsched::CpuMode::deterministic);
  for (const Family& fam : {Family{"1f1b", 1}, Family{"zb-h1", 1}, Family{"interleaved-1f1b", 2}}) {
    const ppsched::Schedule s = make(fam, 2, 6);
    const int stages = s.stages();
    ppsched::CpuOptions co;
    co.mode = mode;
    CpuCluster cluster(2, co);
    TokenModel model;
    World<CpuBackend> world(backends(cluster), s, model.functions(stages));
    const TokenBatch batch(stages, 6, 0);
    // The plan keeps the capacity: every transfer's count is the declared payload.
    for (int r = 0; r < 2; ++r) {
      for (const auto& st : world.executor(r).plan().steps) {
        for (const auto& t : st.transfers) CHECK(t.count == ppsched::payload_floats(states));
      }
    }
    // Every boundary crossing two ranks moves each micro-batch's size twice (its activation
    // forward and its gradient back), and nothing more.
    std::size_t crossings = 0;
    for (int st = 0; st + 1 < stages; ++st) crossings += s.rank_of(st) != s.rank_of(st + 1) ? 1 : 0;
    std::size_t exact = 0;
    for (std::size_t f : batch.floats) exact += 2 * crossings * f;
    const std::size_t before = sent(cluster, 2);
    model.expected = &batch.floats;
    (void)world.run_step(batch.exact());
    INFO(fam.name << " " << ppsched::to_string(mode));
    CHECK(sent(cluster, 2) - before == exact);
    CHECK(received(cluster, 2) - before == exact);
    CHECK(model.wrong_span == 0);
    CHECK(model.calls > 0);
    // Without sizes, the declared maximum, as before.
    model.expected = nullptr;
    const std::size_t padded_before = sent(cluster, 2);
    (void)world.run_step(batch.padded());
    CHECK(sent(cluster, 2) - padded_before == 2 * crossings * 6 * ppsched::payload_floats(states));
    CHECK(model.wrong_span == 0);
  }
}

TEST_CASE("exact-size boundaries give the padded run's losses and gradients bit for bit", "[typed][issue42]") {
  for (const Family& fam : {Family{"1f1b", 1}, Family{"zb-h1", 1}, Family{"gpipe", 1}}) {
    const ppsched::Schedule s = make(fam, 3, 6);
    CpuCluster exact_cluster(3);
    CpuCluster padded_cluster(3);
    TokenModel exact_model;
    TokenModel padded_model;
    World<CpuBackend> exact_world(backends(exact_cluster), s, exact_model.functions(3));
    World<CpuBackend> padded_world(backends(padded_cluster), s, padded_model.functions(3));
    for (int step = 0; step < 2; ++step) {
      const TokenBatch batch(3, 6, step);
      exact_model.expected = &batch.floats;
      const std::vector<float> exact_losses = exact_world.run_step(batch.exact()).losses;
      const std::vector<float> padded_losses = padded_world.run_step(batch.padded()).losses;
      INFO(fam.name << " step " << step);
      CHECK(exact_losses == padded_losses);
      CHECK(exact_model.totals == padded_model.totals);
      CHECK(exact_model.wrong_span == 0);
    }
    CHECK(exact_model.totals.front().size() == hidden);
  }
}

TEST_CASE("Batch::sizes that do not fit fail before the step, naming the stage, micro-batch and sizes",
          "[typed][issue42]") {
  const ppsched::Schedule s = make({"1f1b", 1}, 2, 4);
  CpuCluster cluster(2);
  TokenModel model;
  World<CpuBackend> world(backends(cluster), s, model.functions(2));
  const TokenBatch good(2, 4, 0);
  const std::size_t cap = ppsched::payload_floats(states);
  auto with = [&](auto change) {
    std::vector<ppsched::MicrobatchSize> sizes = good.sizes;
    change(sizes);
    return sizes;
  };
  const auto above = with([&](auto& v) { v[4 + 2].input = v[2].output = cap + 4; });  // stage 1, micro-batch 2
  require_error([&] { (void)world.run_step({good.inputs, {}, {}, above}); },
                {"stage 0, micro-batch 2", std::to_string(cap + 4) + " floats, above the " + std::to_string(cap),
                 "payload_floats(output_tensors)"});
  const std::vector<ppsched::MicrobatchSize> missing(good.sizes.begin(), good.sizes.begin() + 5);
  require_error([&] { (void)world.run_step({good.inputs, {}, {}, missing}); },
                {"Batch::sizes has 5 entries; 2 stages x 4 micro-batches need 8", "stage 1, micro-batch 1 has none"});
  const auto disagree = with([&](auto& v) { v[1].output = state_floats(2); v[4 + 1].input = state_floats(3); });
  require_error([&] { (void)world.run_step({good.inputs, {}, {}, disagree}); },
                {"stage 0 sends micro-batch 1 as " + std::to_string(state_floats(2)) + " floats but stage 1 receives " +
                     std::to_string(state_floats(3)),
                 "stages 0 and 1, micro-batch 1"});
  const auto headless = with([&](auto& v) { v[3].input = 2; });
  require_error([&] { (void)world.run_step({good.inputs, {}, {}, headless}); },
                {"stage 0, micro-batch 3", "2 floats, below the 4 of its payload's header"});
  CHECK(model.calls == 0);  // none of them started the step
  // A size the data does not fit: stage 0's payload of micro-batch 0 counts more tokens than
  // its size holds. Found when the stage reads it, naming the stage and the micro-batch.
  const auto short_input = with([&](auto& v) { v[0].input = state_floats(0); });  // the header alone
  require_error([&] { (void)world.run_step({good.inputs, {}, {}, short_input}); },
                {"stage 0, micro-batch 0", "has room for 0"});
  model.expected = &good.floats;
  model.wrong_span = 0;
  (void)world.run_step(good.exact());  // the World runs on
  CHECK(model.wrong_span == 0);
}

TEST_CASE("the simulator charges each micro-batch's size as the runtime moves it", "[typed][issue42]") {
  const ppsched::Schedule s = make({"1f1b", 1}, 3, 6);
  CpuCluster cluster(3);
  TokenModel model;
  World<CpuBackend> world(backends(cluster), s, model.functions(3));
  const TokenBatch batch(3, 6, 1);
  std::vector<std::size_t> outputs;
  for (const auto& size : batch.sizes) outputs.push_back(size.output);
  ppsched::CostModel c = ppsched::uniform_costs(1, 1, 1);
  c.link.latency = 0.0;
  c.link.bandwidth = 1000.0;
  const ppsched::CostModel costs = ppsched::with_boundary_floats(c, outputs, 6);
  const ppsched::Schedule lowered = ppsched::lower(s);
  double predicted = 0.0;
  for (const auto& prog : lowered.programs) {
    for (const auto& a : prog) {
      if (a.op != ppsched::Op::SEND_F && a.op != ppsched::Op::SEND_B) continue;
      const double bytes = ppsched::transfer_bytes(costs, a, 6);
      CHECK(bytes == 4.0 * static_cast<double>(batch.floats[static_cast<std::size_t>(a.microbatch)]));
      predicted += bytes;
    }
  }
  const std::size_t before = sent(cluster, 3);
  (void)world.run_step(batch.exact());
  CHECK(predicted == 4.0 * static_cast<double>(sent(cluster, 3) - before));
  // A longer micro-batch costs a longer transfer: the simulated step lengthens with the sizes.
  std::vector<std::size_t> full(outputs.size(), ppsched::payload_floats(states));
  CHECK(ppsched::simulate(s, ppsched::with_boundary_floats(c, full, 6)).makespan >
        ppsched::simulate(s, costs).makespan);
  CHECK_THROWS_WITH(ppsched::with_boundary_floats(c, std::vector<std::size_t>(7, 1), 6),
                    Catch::Contains("7 output sizes for 6 micro-batches"));
}

TEST_CASE("a new schedule every step runs on the same World, allocating nothing when its pools fit",
          "[typed][issue42]") {
  const auto mode = GENERATE(ppsched::CpuMode::threaded, ppsched::CpuMode::deterministic);
  ppsched::CpuOptions co;
  co.mode = mode;
  CpuCluster cluster(2, co);
  TokenModel model;
  // Built for GPipe over 8 micro-batches: every forward in flight at once.
  World<CpuBackend> world(backends(cluster), make({"gpipe", 1}, 2, 8), model.functions(2));
  const ppsched::ExecutorPools first = world.pools();
  CHECK(first.growths == 0);
  CHECK(first.buffers > 0);
  struct Next {
    Family family;
    int m;
  };
  const std::vector<Next> plans{{{"1f1b", 1}, 4}, {{"zb-h1", 1}, 6}, {{"gpipe", 1}, 3}, {{"zb-h2", 1}, 8}};
  auto run = [&](const Next& n, int step) {
    const ppsched::Schedule s = make(n.family, 2, n.m);
    const ppsched::PoolGrowth growth = world.set_schedule(s);
    const TokenBatch batch(2, n.m, step);
    model.expected = &batch.floats;
    allocations = 0;
    counting = true;
    const ppsched::StepResult& r = world.run_step(batch.exact());
    counting = false;
    CHECK(r.losses.size() == static_cast<std::size_t>(n.m));
    CHECK(world.schedule().microbatches == n.m);
    return std::pair{growth, allocations.load()};
  };
  const TokenBatch warm(2, 8, 0);
  model.expected = &warm.floats;
  (void)world.run_step(warm.exact());  // first use of the channels
  // Round 0 takes each schedule once (one may need a buffer GPipe did not); from then on,
  // every step switches schedule and nothing is allocated, in set_schedule or the step.
  std::size_t grown = 0;
  for (int round = 0; round < 3; ++round) {
    for (std::size_t i = 0; i < plans.size(); ++i) {
      const auto [growth, allocated] = run(plans[i], static_cast<int>(i) + round);
      INFO(plans[i].family.name << " m = " << plans[i].m << " round " << round << " " << ppsched::to_string(mode));
      if (round == 0) {
        grown += growth.grew() ? 1 : 0;  // 1F1B holds an output and a gradient on rank 0, GPipe one
        continue;
      }
      CHECK_FALSE(growth.grew());
      CHECK(allocated == 0);
    }
  }
  CHECK(world.pools().growths == grown);
  const ppsched::ExecutorPools held = world.pools();
  CHECK(model.wrong_span == 0);

  // Larger than ever: GPipe over 16 micro-batches holds 16 activations at once. The pools grow
  // in set_schedule, before the step, by what it needs beyond them; counted and reported.
  const auto [growth, allocated] = run({{"gpipe", 1}, 16}, 9);
  CHECK(growth.grew());
  CHECK(growth.buffers > 0);
  CHECK(growth.events > 0);  // a longer program: more steps to time
  CHECK(growth.floats == growth.buffers * ppsched::payload_floats(states));  // boundary buffers only
  CHECK(world.pools().growths == grown + 1);
  CHECK(world.pools().buffers == held.buffers + growth.buffers);
  CHECK(world.pools().events == held.events + growth.events);
  CHECK(allocated == 0);  // the step itself still allocates nothing
  // ... and the smaller plans fit again.
  CHECK_FALSE(run(plans[0], 11).first.grew());
  CHECK(world.pools().growths == grown + 1);

  // A schedule for another stage count is refused; the World keeps its schedule and runs.
  require_error([&] { (void)world.set_schedule(make({"interleaved-1f1b", 2}, 2, 4)); },
                {"4 stages", "the World runs 2 ranks and 2 stages"});
  CHECK(world.schedule().microbatches == 4);
  const TokenBatch again(2, 4, 3);
  model.expected = &again.floats;
  (void)world.run_step(again.exact());
  CHECK(model.wrong_span == 0);
}

// Issue 42 (c): a count above the declared maximum is refused, never reallocated for. The
// writer's case is in "bad boundaries..."; this is a batch whose header says more than the
// maximum, which stage 0 finds on reading it.
TEST_CASE("a batch payload counting past the declared maximum fails naming stage and micro-batch",
          "[typed][issue42]") {
  const ppsched::Schedule s = make({"1f1b", 1}, 2, 2);
  CpuCluster cluster(2);
  TypedModel model;
  World<CpuBackend> world(backends(cluster), s, model.functions(2));
  TypedBatch batch(2);
  const std::uint64_t too_many = max_len + 1;
  std::memcpy(batch.inputs.data() + ppsched::payload_floats(boundary), &too_many, sizeof too_many);  // mb 1, tensor 0
  require_error([&] { (void)world.run_step(batch.view()); },
                {"stage 0", "micro-batch 1", "tensor 0 says it holds 9 elements, above its maximum 8"});
}
TEST_CASE("the simulator charges a typed boundary its whole payload, whatever the length", "[typed]") {
  const std::vector<std::vector<TensorSpec>> outputs(4, boundary);
  ppsched::CostModel c = ppsched::uniform_costs(1, 1, 1);
  c.link.latency = 0.0;
  c.link.bandwidth = 1000.0;  // bytes per unit
  c.microbatch_scale = {0.25, 0.5, 0.75, 1.0, 0.25, 0.5, 0.75, 1.0};
  const ppsched::CostModel typed = ppsched::with_boundary_bytes(c, outputs, 8);
  const ppsched::Schedule s = ppsched::lower(make({"1f1b", 1}, 4, 8));
  for (const auto& prog : s.programs) {
    for (const auto& a : prog) {
      if (!ppsched::is_comm(a.op)) continue;
      CHECK(ppsched::transfer_bytes(typed, a, 8) == static_cast<double>(ppsched::payload_bytes(boundary)));
    }
  }
  // Times keep their per-micro-batch scale.
  CHECK(ppsched::compute_time(typed, ppsched::Action{ppsched::Op::F, 1, 0}, 8) == 0.25);
  // A transfer of the payload at 1000 bytes per unit lengthens 1F1B's step by what the
  // simulator charges the transfers on its critical path: more than with free links.
  ppsched::CostModel free_links = ppsched::uniform_costs(1, 1, 1);
  ppsched::CostModel slow_links = free_links;
  slow_links.link.latency = 0.0;
  slow_links.link.bandwidth = 1000.0;
  const ppsched::Schedule plain = make({"1f1b", 1}, 4, 4);
  CHECK(ppsched::simulate(plain, ppsched::with_boundary_bytes(slow_links, outputs, 4)).makespan >
        ppsched::simulate(plain, ppsched::with_boundary_bytes(free_links, outputs, 4)).makespan);
  ppsched::CostModel two;
  two.stages.resize(2);
  CHECK_THROWS_WITH(ppsched::with_boundary_bytes(two, outputs, 8), Catch::Contains("2 stages but 4 boundaries"));
}

TEST_CASE("tied weights, kept outputs and the new accumulation allocate nothing in steady state", "[typed]") {
  const auto mode = GENERATE(ppsched::CpuMode::threaded, ppsched::CpuMode::deterministic);
  for (const Family& fam : {Family{"1f1b", 1}, Family{"looped-bfs", 2}, Family{"zb-v", 2}}) {
    const ppsched::Schedule s = make(fam, 4, 8);
    ppsched::CpuOptions co;
    co.mode = mode;
    CpuCluster cluster(4, co);
    auto stages = ppsched::synthetic_stages(ppsched::uniform_costs(0, 0, 0), s.stages(), 8,
                                            std::chrono::milliseconds(1), 4);
    for (auto& st : stages) st.weight_grad_size = 3;
    ppsched::ExecutorOptions eo;
    eo.keep_outputs = true;
    eo.tied_weights.push_back({{0, s.stages() - 1}, {0, 1}, 2});
    World<CpuBackend> world(backends(cluster), s, stages, eo);
    const std::vector<float> inputs(8 * 4, 1.0f);
    const std::vector<float> targets(8 * 4, 0.0f);
    (void)world.run_step({inputs, targets});
    allocations = 0;
    counting = true;
    for (int step = 0; step < 3; ++step) (void)world.run_step({inputs, targets});
    counting = false;
    INFO(fam.name << " " << ppsched::to_string(mode));
    CHECK(allocations.load() == 0);
    CHECK(world.last_step().outputs.size() == inputs.size());
  }
}

TEST_CASE("side_input checks its slice against the data; the batch check cannot wrap", "[typed][issue24]") {
  // Issue 24, item 5. A side input no stage lists is never checked against the batch, and
  // side_input() sliced micro-batch k at k x count without looking at the data's size
  // (AddressSanitizer: heap-buffer-overflow); m x count x the dtype's size wrapped, so an
  // 8-byte side input declared as 2^61 + 1 floats per micro-batch passed for 2 micro-batches.
  const std::vector<std::int64_t> labels{1000, 1001};  // 2 micro-batches of 1
  const ppsched::SideInput sides[] = {ppsched::SideInput::of<std::int64_t>(labels, 1)};
  StageContext c;
  c.stage = 3;
  c.side_inputs = sides;
  c.microbatch = 1;
  CHECK(c.side_input<std::int64_t>(0)[0] == 1001);
  c.microbatch = 2;  // past the data: 3 micro-batches of 1 need 24 bytes
  CHECK_THROWS_WITH(c.side_input<std::int64_t>(0), Catch::Contains("side input 0 holds 16 bytes") &&
                                                        Catch::Contains("micro-batch 2") &&
                                                        Catch::Contains("StageFunctions::side_inputs"));
  const ppsched::SideInput wide[] = {{DType::i64, 3, std::as_bytes(std::span<const std::int64_t>(labels))}};
  c.side_inputs = wide;
  c.microbatch = 0;  // one slice of 3 in 2 elements
  CHECK_THROWS_WITH(c.side_input<std::int64_t>(0), Catch::Contains("holds 16 bytes"));
  const ppsched::SideInput huge[] = {{DType::i64, (std::size_t{1} << 61) + 1, std::as_bytes(std::span<const std::int64_t>(labels))}};
  c.side_inputs = huge;
  CHECK_THROWS_WITH(c.side_input<std::int64_t>(0), Catch::Contains("micro-batch 0"));

  // The batch check: 2 x (2^61 + 1) x 4 bytes is 2^64 + 8, which wrapped to the 8 bytes given.
  const float eight_bytes[2] = {1.0f, 2.0f};
  const ppsched::SideInput wrapping[] = {{DType::f32, (std::size_t{1} << 61) + 1,
                                          std::as_bytes(std::span<const float>(eight_bytes))}};
  StageFunctions f;
  f.side_inputs = {0};
  const ppsched::Batch batch{{}, {}, wrapping};
  CHECK_THROWS_WITH(ppsched::check_side_inputs(f, 1, batch, 2),
                    Catch::Contains("side input 0 declares") && Catch::Contains("do not fit"));
  const ppsched::SideInput right[] = {{DType::f32, 1, std::as_bytes(std::span<const float>(eight_bytes))}};
  CHECK_NOTHROW(ppsched::check_side_inputs(f, 1, {{}, {}, right}, 2));

  // In a step: stage 0 reads side input 1 (the mask) without listing it, from a batch whose
  // mask holds one micro-batch of 8: the step fails naming the input, the stage and the
  // micro-batch, instead of reading past the mask.
  const ppsched::Schedule s = make({"1f1b", 1}, 2, 4);
  CpuCluster cluster(2);
  TypedModel model;
  auto fns = model.functions(2);
  fns[0].side_inputs.clear();
  World<CpuBackend> w(backends(cluster), s, fns);
  const TypedBatch full(4);
  const ppsched::SideInput short_mask[] = {full.side[0],
                                           {DType::bytes, max_len, std::as_bytes(std::span<const std::uint8_t>(full.mask)).first(max_len)}};
  require_error([&] { (void)w.run_step({full.inputs, {}, short_mask}); },
                {"side input 1 holds 8 bytes", "stage 0, micro-batch 1", "StageFunctions::side_inputs"});
  (void)w.run_step(full.view());  // the World recovers
  CHECK(model.bad == 0);
}

TEST_CASE("side input specs: a label of the wrong dtype fails with the batch, before any forward",
          "[typed][issue24]") {
  // Issue 24, item 8: the dtype of labels was found only where the loss read them (micro-batch
  // 0's loss, after every forward of the step). A stage that says how it reads its side
  // inputs has them checked with the batch.
  const ppsched::Schedule s = make({"gpipe", 1}, 2, 4);
  CpuCluster cluster(2);
  TypedModel model;
  auto fns = model.functions(2);
  fns[1].side_input_specs = {{DType::i64, 1}};
  fns[0].side_input_specs = {{DType::bytes, max_len}};
  World<CpuBackend> w(backends(cluster), s, fns);
  const TypedBatch batch(4);
  const std::vector<std::int32_t> narrow(batch.labels.begin(), batch.labels.end());
  const ppsched::SideInput wrong[] = {ppsched::SideInput::of<std::int32_t>(narrow, 1), batch.side[1]};
  require_error([&] { (void)w.run_step({batch.inputs, {}, wrong}); },
                {"side input 0 is i32 x 1 per micro-batch, but stage 1 reads it as i64 x 1", "side_input_specs"});
  CHECK(model.checked == 0);  // no forward ran
  const std::vector<std::int64_t> two(2 * batch.labels.size(), 7);
  const ppsched::SideInput wide[] = {ppsched::SideInput::of<std::int64_t>(two, 2), batch.side[1]};
  require_error([&] { (void)w.run_step({batch.inputs, {}, wide}); }, {"i64 x 2", "reads it as i64 x 1"});
  CHECK(model.checked == 0);
  (void)w.run_step(batch.view());
  CHECK(model.checked > 0);
  CHECK(model.bad == 0);
  // One spec per listed side input, or none.
  fns[1].side_input_specs.push_back({DType::f32, 1});
  World<CpuBackend> mismatched(backends(cluster), s, fns);
  require_error([&] { (void)mismatched.run_step(batch.view()); }, {"lists 1 side inputs but 2 specs"});
}
