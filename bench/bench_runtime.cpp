// The runtime on the CPU backend.
//
// BM_ExecutorOverhead: one training step of empty stages (every F / B / BI / BW returns at
// once), so the time is the executor's and the backend's own: issuing, events, stream
// workers, rendezvous. Reported per action: `us_per_action` divides the step's wall time by
// every action of every rank (the machine's 2 cores share all ranks), `us_per_rank_action`
// by the actions of the busiest rank. Target: <= 5 us per action. Variants: ranks, checking
// mode, timeline recording, deterministic mode.
//
// BM_MeasuredVsPredictedBubble: synthetic stages whose F, BI and BW take `op_ms` (1 or 2 ms,
// the ends of the target's range; B twice that), as timed waits, run 1F1B, ZB-H1 and
// interleaved 1F1B (two chunks per rank) at
// p = 4, m = 16; each step's measured Timeline is compared with the simulator's prediction
// by ppsched::compare. Counters: the overall bubble measured and predicted (%), and the
// largest per-rank difference in percentage points, averaged over the steps. Target: within
// 2 percentage points. `unpipelined_ms` is the gold baseline: the same work on one rank.
// The prediction is made twice: with free communication (the analytic setting), and with
// the CPU backend's own transfer latency as the cost model's link latency — the median, over
// a calibration step, of the gap between a producer's end and its waiting consumer's start
// on the next rank (`hop_latency_us`: a thread wakeup). The `*_lat` counters compare with
// that latency-aware prediction.
//
// BM_TypedPayload: the float form against typed boundaries (graph/tensor.hpp) of the same
// data, full and variable-length, on 4 ranks (see the function).
//
// BM_DeterministicLongStep: 1F1B on 4 ranks in the CPU backend's deterministic mode, empty
// 1-float stages, m = 256..2048: a step issues more operations than a stream's queue holds
// (CpuOptions::queue_capacity, 4096) from about m = 512 on. `us_per_action` must not jump
// there: before issue 17 a full queue cost one host/engine handover per operation.
//
// BM_WorldConstruction: building a World of p ranks (threaded CPU cluster, 1F1B already
// lowered, 1-float tensors) at m micro-batches: the construction's time, and the bytes it
// leaves allocated (every operator new of the process is counted, live bytes after minus
// before), in all and per rank. Per-rank memory must not grow with p: before issue 17 every
// executor copied the whole lowered schedule (O(p^2 m) in all). Builds against an older tree
// too (the lowering header moved), for a before/after in one session.
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <map>
#include <ppsched/backend/cpu.hpp>
#include <ppsched/runtime/synthetic.hpp>
#include <ppsched/runtime/world.hpp>
#include <ppsched/schedule/generators.hpp>
#if __has_include(<ppsched/lower/lower.hpp>)
#include <ppsched/lower/lower.hpp>
#else
#include <ppsched/schedule/lower.hpp>
#endif
#include <ppsched/costs/cost_model.hpp>
#include <ppsched/sim/simulate.hpp>
#include <ppsched/trace/compare.hpp>
#include <string>
#include <tuple>
#include <vector>

namespace {

std::vector<ppsched::CpuBackend*> backends(ppsched::CpuCluster& c) {
  std::vector<ppsched::CpuBackend*> out;
  for (int r = 0; r < c.ranks(); ++r) out.push_back(&c.rank(r));
  return out;
}

// args: ranks, checking (0/1), timeline (0/1), deterministic (0/1)
void BM_ExecutorOverhead(benchmark::State& state) {
  const int p = static_cast<int>(state.range(0));
  const int m = 16;
  ppsched::ScheduleRequest req;
  req.ranks = p;
  req.microbatches = m;
  const ppsched::Schedule schedule = ppsched::lower(ppsched::make_schedule("1f1b", req));
  ppsched::CpuOptions co;
  co.checking = state.range(1) != 0;
  co.mode = state.range(3) != 0 ? ppsched::CpuMode::deterministic : ppsched::CpuMode::threaded;
  ppsched::CpuCluster cluster(p, co);
  ppsched::ExecutorOptions eo;
  eo.record_timeline = state.range(2) != 0;
  const auto stages = ppsched::synthetic_stages(ppsched::uniform_costs(0, 0, 0), p, m, std::chrono::milliseconds(1));
  ppsched::World<ppsched::CpuBackend> world(backends(cluster), schedule, stages, eo);
  const std::vector<float> inputs(static_cast<std::size_t>(m), 1.0f);
  const std::vector<float> targets(static_cast<std::size_t>(m), 0.0f);
  (void)world.run_step({inputs, targets});  // warm-up
  for (auto _ : state) {
    benchmark::DoNotOptimize(world.run_step({inputs, targets}).losses.data());
  }
  std::size_t actions = 0;
  std::size_t busiest = 0;
  for (const auto& prog : schedule.programs) {
    actions += prog.size();
    busiest = std::max(busiest, prog.size());
  }
  const double steps = static_cast<double>(state.iterations());
  state.counters["actions"] = static_cast<double>(actions);
  state.counters["us_per_action"] = benchmark::Counter(static_cast<double>(actions) * steps * 1e-6,
                                                       benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["us_per_rank_action"] = benchmark::Counter(static_cast<double>(busiest) * steps * 1e-6,
                                                            benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

BENCHMARK(BM_ExecutorOverhead)
    ->ArgNames({"ranks", "checking", "timeline", "deterministic"})
    ->Args({1, 0, 0, 0})
    ->Args({1, 1, 1, 0})
    ->Args({2, 0, 0, 0})
    ->Args({2, 1, 1, 0})
    ->Args({4, 0, 0, 0})
    ->Args({4, 0, 1, 0})
    ->Args({4, 1, 1, 0})
    ->Args({8, 0, 0, 0})
    ->Args({4, 1, 1, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Median gap between the end of an action and the start of the action on another rank that
// waited for it (its rank's previous compute had ended before): the latency of one transfer.
double median_hop_ms(const ppsched::Schedule& s, const ppsched::Timeline& t) {
  std::map<std::tuple<int, int, int>, const ppsched::Span*> by;  // (op, stage, mb)
  std::vector<std::vector<const ppsched::Span*>> compute(static_cast<std::size_t>(s.ranks));
  for (const auto& sp : t.spans) {
    if (!ppsched::is_compute(sp.action.op)) continue;
    by[{static_cast<int>(sp.action.op), sp.action.stage, sp.action.microbatch}] = &sp;
    compute[static_cast<std::size_t>(sp.rank)].push_back(&sp);
  }
  for (auto& v : compute) std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->start < b->start; });
  std::vector<double> gaps;
  for (const auto& v : compute) {
    for (std::size_t i = 1; i < v.size(); ++i) {
      const ppsched::Action& a = v[i]->action;
      const ppsched::Span* producer = nullptr;
      auto find = [&](ppsched::Op op, int stage) {
        const auto it = by.find({static_cast<int>(op), stage, a.microbatch});
        return it == by.end() ? nullptr : it->second;
      };
      if (a.op == ppsched::Op::F && a.stage > 0) producer = find(ppsched::Op::F, a.stage - 1);
      if ((a.op == ppsched::Op::B || a.op == ppsched::Op::BI) && a.stage + 1 < s.stages()) {
        producer = find(a.op, a.stage + 1);
        if (producer == nullptr)
          producer = find(a.op == ppsched::Op::B ? ppsched::Op::BI : ppsched::Op::B, a.stage + 1);
      }
      if (producer == nullptr || producer->rank == v[i]->rank) continue;
      if (v[i - 1]->end < producer->end) gaps.push_back(v[i]->start - producer->end);
    }
  }
  if (gaps.empty()) return 0.0;
  std::sort(gaps.begin(), gaps.end());
  return std::max(0.0, gaps[gaps.size() / 2]);
}

struct BubbleCase {
  const char* family;
  int chunks;
};
constexpr BubbleCase bubble_cases[] = {{"1f1b", 1}, {"zb-h1", 1}, {"interleaved-1f1b", 2}};

// args: index into bubble_cases, milliseconds per F / BI / BW
void BM_MeasuredVsPredictedBubble(benchmark::State& state) {
  const BubbleCase& bc = bubble_cases[state.range(0)];
  const auto op_ms = static_cast<double>(state.range(1));
  state.SetLabel(bc.family);
  const int p = 4;
  const int m = 16;
  ppsched::ScheduleRequest req;
  req.ranks = p;
  req.microbatches = m;
  req.chunks = bc.chunks;
  const auto cost = ppsched::uniform_costs(op_ms, op_ms, op_ms, "ms");
  const ppsched::Schedule compute_only = ppsched::make_schedule(bc.family, req);
  const ppsched::Schedule schedule =
      ppsched::lower(compute_only, ppsched::lower_options_for(cost, compute_only.stages(), m));
  const ppsched::Timeline predicted = ppsched::simulate(schedule, cost).timeline;
  ppsched::CpuOptions co;
  co.checking = false;
  ppsched::CpuCluster cluster(p, co);
  const auto stages = ppsched::synthetic_stages(cost, schedule.stages(), m, std::chrono::milliseconds(1));
  ppsched::World<ppsched::CpuBackend> world(backends(cluster), schedule, stages);
  const std::vector<float> inputs(static_cast<std::size_t>(m), 1.0f);
  const std::vector<float> targets(static_cast<std::size_t>(m), 0.0f);
  (void)world.run_step({inputs, targets});  // warm-up
  ppsched::CostModel with_latency = cost;
  with_latency.link.latency = median_hop_ms(schedule, world.run_step({inputs, targets}).timeline);
  const ppsched::Timeline predicted_lat = ppsched::simulate(schedule, with_latency).timeline;
  double expected_lat = 0.0;
  double worst_pp_lat = 0.0;
  double measured = 0.0;
  double expected = 0.0;
  double worst_pp = 0.0;
  double mean_pp = 0.0;
  double makespan_ratio = 0.0;
  for (auto _ : state) {
    const ppsched::Timeline& run = world.run_step({inputs, targets}).timeline;
    const ppsched::TimelineComparison cmp = ppsched::compare(run, predicted);
    const ppsched::TimelineComparison cmp_lat = ppsched::compare(run, predicted_lat);
    expected_lat += cmp_lat.predicted.bubble_fraction;
    double worst_lat = 0.0;
    for (const auto& r : cmp_lat.per_rank) worst_lat = std::max(worst_lat, std::abs(r.difference_pp));
    worst_pp_lat += worst_lat;
    measured += cmp.measured.bubble_fraction;
    expected += cmp.predicted.bubble_fraction;
    double worst = 0.0;
    double sum = 0.0;
    for (const auto& r : cmp.per_rank) {
      worst = std::max(worst, std::abs(r.difference_pp));
      sum += std::abs(r.difference_pp);
    }
    worst_pp += worst;
    mean_pp += sum / static_cast<double>(cmp.per_rank.size());
    makespan_ratio += cmp.makespan_ratio.value_or(0.0);
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["measured_bubble_pct"] = 100.0 * measured / n;
  state.counters["predicted_bubble_pct"] = 100.0 * expected / n;
  state.counters["max_rank_diff_pp"] = worst_pp / n;
  state.counters["mean_rank_diff_pp"] = mean_pp / n;
  state.counters["makespan_ratio"] = makespan_ratio / n;
  state.counters["hop_latency_us"] = 1000.0 * with_latency.link.latency;
  state.counters["predicted_bubble_pct_lat"] = 100.0 * expected_lat / n;
  state.counters["max_rank_diff_pp_lat"] = worst_pp_lat / n;
  double work = 0.0;
  for (const auto& prog : schedule.programs) {
    for (const auto& a : prog) work += ppsched::compute_time(cost, a, m);
  }
  state.counters["unpipelined_ms"] = work;
}

BENCHMARK(BM_MeasuredVsPredictedBubble)
    ->ArgNames({"case", "op_ms"})
    ->ArgsProduct({{0, 1, 2}, {1, 2}})
    ->Iterations(10)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

#if __has_include(<ppsched/runtime/payload.hpp>)
// args: case (0: the float form, `n` floats per boundary; 1: one typed f32 tensor of max
// `n`, every micro-batch full; 2: the same tensor, micro-batch k carrying n (k % 4 + 1) / 4
// elements; 3: three tensors, bf16 x n, i64 x n/8, bytes x n/4, full), n.
// 1F1B, p = 4, m = 16; each forward copies its input's data to its output, each backward
// its output gradient's to its input gradient. The step time of case 1 over case 0 is what
// the typed form costs; case 2 over case 1 what a shorter micro-batch saves (the transfer
// still moves the declared maximum: only the stage's own work shrinks).
void BM_TypedPayload(benchmark::State& state) {
  const int kind = static_cast<int>(state.range(0));
  const auto n = static_cast<std::size_t>(state.range(1));
  const int p = 4;
  const int m = 16;
  ppsched::ScheduleRequest req;
  req.ranks = p;
  req.microbatches = m;
  const ppsched::Schedule schedule = ppsched::lower(ppsched::make_schedule("1f1b", req));
  ppsched::CpuCluster cluster(p);
  std::vector<ppsched::TensorSpec> specs;
  if (kind == 1 || kind == 2) specs = {{ppsched::DType::f32, n}};
  if (kind == 3) specs = {{ppsched::DType::bf16, n}, {ppsched::DType::i64, n / 8}, {ppsched::DType::bytes, n / 4}};
  auto length = [&](std::int32_t mb, std::size_t max) {
    return kind == 2 ? max * static_cast<std::size_t>(mb % 4 + 1) / 4 : max;
  };
  auto copy = [&](std::int32_t mb, std::span<const float> in, std::span<float> out) {
    if (kind == 0) {
      std::copy(in.begin(), in.end(), out.begin());
      return;
    }
    const ppsched::ConstPayload from(in, specs);
    const ppsched::Payload to(out, specs);
    for (std::size_t t = 0; t < specs.size(); ++t) {
      const std::size_t count = length(mb, specs[t].max_count);
      to.set_count(t, count);
      const std::size_t bytes = count * ppsched::dtype_size(specs[t].dtype);
      const auto* src = reinterpret_cast<const std::byte*>(in.data()) + ppsched::payload_offset(specs, t);
      auto* dst = reinterpret_cast<std::byte*>(out.data()) + ppsched::payload_offset(specs, t);
      std::copy(src, src + bytes, dst);
      benchmark::DoNotOptimize(from.count(t));
    }
  };
  std::vector<ppsched::StageFunctions> stages(static_cast<std::size_t>(p));
  for (int s = 0; s < p; ++s) {
    auto& f = stages[static_cast<std::size_t>(s)];
    if (kind == 0) {
      f.input_size = f.output_size = n;
    } else {
      f.input_tensors = f.output_tensors = specs;
    }
    f.forward = copy;
    f.backward = [copy](std::int32_t mb, std::span<const float>, std::span<const float> g, std::span<float> gi,
                        std::span<float>) {
      if (!gi.empty()) copy(mb, g, gi);
    };
    if (s + 1 == p) {
      f.loss = [copy](std::int32_t mb, std::span<const float> o, std::span<const float>, std::span<float> g) {
        copy(mb, o, g);
        return 0.0f;
      };
    }
  }
  ppsched::World<ppsched::CpuBackend> world(backends(cluster), schedule, stages);
  const std::size_t floats = ppsched::input_floats(stages.front());
  std::vector<float> inputs(floats * static_cast<std::size_t>(m), 1.0f);
  for (int mb = 0; mb < m && kind != 0; ++mb) {
    const ppsched::Payload in(std::span<float>(inputs).subspan(static_cast<std::size_t>(mb) * floats, floats), specs);
    for (std::size_t t = 0; t < specs.size(); ++t) in.set_count(t, length(mb, specs[t].max_count));
  }
  (void)world.run_step({inputs, {}});  // warm-up
  for (auto _ : state) benchmark::DoNotOptimize(world.run_step({inputs, {}}).losses.data());
  state.counters["boundary_bytes"] = static_cast<double>(floats * sizeof(float));
}

BENCHMARK(BM_TypedPayload)
    ->ArgNames({"case", "n"})
    ->ArgsProduct({{0, 1, 2, 3}, {1024, 65536}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
#endif

}  // namespace

// ------------------------------------------------------------------ allocation counting
// Live bytes of the process, by malloc_usable_size (what the allocator really holds).
namespace {
std::atomic<long long> live_bytes{0};

void* counted_alloc(std::size_t n, std::size_t align) {
  void* p = align <= alignof(std::max_align_t) ? std::malloc(n == 0 ? 1 : n)
                                                : std::aligned_alloc(align, (n + align - 1) / align * align);
  if (p == nullptr) return nullptr;
  live_bytes.fetch_add(static_cast<long long>(malloc_usable_size(p)), std::memory_order_relaxed);
  return p;
}
// GCC inlines this into the replaced operator delete and then sees free() of memory from
// "new" (-Wmismatched-new-delete); the pair is consistent, as every form is replaced.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void counted_free(void* p) noexcept {
  if (p == nullptr) return;
  live_bytes.fetch_sub(static_cast<long long>(malloc_usable_size(p)), std::memory_order_relaxed);
  std::free(p);
}
#pragma GCC diagnostic pop
void* must(void* p) {
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(std::size_t n) { return must(counted_alloc(n, 0)); }
void* operator new[](std::size_t n) { return must(counted_alloc(n, 0)); }
void* operator new(std::size_t n, std::align_val_t a) { return must(counted_alloc(n, static_cast<std::size_t>(a))); }
void* operator new[](std::size_t n, std::align_val_t a) { return must(counted_alloc(n, static_cast<std::size_t>(a))); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n, 0); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return counted_alloc(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return counted_alloc(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_free(p); }
void operator delete(void* p, std::align_val_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { counted_free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { counted_free(p); }

namespace {

// args: ranks, micro-batches
void BM_WorldConstruction(benchmark::State& state) {
  const int p = static_cast<int>(state.range(0));
  const int m = static_cast<int>(state.range(1));
  ppsched::ScheduleRequest req;
  req.ranks = p;
  req.microbatches = m;
  const ppsched::Schedule schedule = ppsched::lower(ppsched::make_schedule("1f1b", req));
  const auto stages = ppsched::synthetic_stages(ppsched::uniform_costs(0, 0, 0), p, m, std::chrono::milliseconds(1));
  double bytes = 0.0;
  for (auto _ : state) {
    ppsched::CpuCluster cluster(p);
    const long long before = live_bytes.load();
    const auto start = std::chrono::steady_clock::now();
    {
      ppsched::World<ppsched::CpuBackend> world(backends(cluster), schedule, stages);
      state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      bytes = static_cast<double>(live_bytes.load() - before);
    }
  }
  std::size_t actions = 0;
  for (const auto& prog : schedule.programs) actions += prog.size();
  state.counters["MB"] = bytes / 1e6;
  state.counters["MB_per_rank"] = bytes / 1e6 / p;
  state.counters["bytes_per_action"] = bytes / static_cast<double>(actions);
}

// args: micro-batches
void BM_DeterministicLongStep(benchmark::State& state) {
  const int p = 4;
  const int m = static_cast<int>(state.range(0));
  ppsched::ScheduleRequest req;
  req.ranks = p;
  req.microbatches = m;
  const ppsched::Schedule schedule = ppsched::lower(ppsched::make_schedule("1f1b", req));
  ppsched::CpuOptions co;
  co.mode = ppsched::CpuMode::deterministic;
  ppsched::CpuCluster cluster(p, co);
  const auto stages = ppsched::synthetic_stages(ppsched::uniform_costs(0, 0, 0), p, m, std::chrono::milliseconds(1));
  ppsched::World<ppsched::CpuBackend> world(backends(cluster), schedule, stages);
  const std::vector<float> inputs(static_cast<std::size_t>(m), 1.0f);
  const std::vector<float> targets(static_cast<std::size_t>(m), 0.0f);
  (void)world.run_step({inputs, targets});  // warm-up
  for (auto _ : state) benchmark::DoNotOptimize(world.run_step({inputs, targets}).losses.data());
  std::size_t actions = 0;
  for (const auto& prog : schedule.programs) actions += prog.size();
  state.counters["us_per_action"] =
      benchmark::Counter(static_cast<double>(actions) * static_cast<double>(state.iterations()) * 1e-6,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

}  // namespace

BENCHMARK(BM_DeterministicLongStep)->ArgName("m")->Arg(256)->Arg(512)->Arg(1024)->Arg(2048)->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK(BM_WorldConstruction)
    ->ArgNames({"p", "m"})
    ->Args({8, 1024})
    ->Args({16, 1024})
    ->Args({32, 1024})
    ->Args({64, 1024})
    ->Args({64, 4096})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);

BENCHMARK_MAIN();
