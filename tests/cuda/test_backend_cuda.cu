// Tests of the CUDA backend. Tests tagged [host] need no GPU (checked calls, unique-id
// sharing, bounded waits, placement) and always run; tests tagged [gpu] need a device. Without
// one, the [host] tests run, and the program then prints "SKIPPED: <reason>" and exits 77,
// Meson's skip code, so a machine without a GPU never reports the GPU tests as passed.
// The [nccl] cases need two GPUs: with fewer they skip (tests/skip.hpp), so they run apart from
// the others (Meson: backend_cuda runs '~[nccl]', backend_cuda_nccl '[nccl]'); a run where one
// skips beside cases that ran exits 1 rather than pass.
// Catch2 runs with our own main (at the end), which decides between running and skipping.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#define PPSCHED_SKIP_MAIN
#include "../skip.hpp"
// clang-format off
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <ppsched/backend/cuda.hpp>
#include <ppsched/runtime/world.hpp>
#include <ppsched/schedule/generators.hpp>
#include <ppsched/lower/lower.hpp>
#include <ppsched/sim/simulate.hpp>
#include <ppsched/trace/compare.hpp>
#include <ppsched/trace/stats.hpp>

// The GPU MLP of the example, and through it the CPU MLP and its unpipelined training.
#include "../../examples/cuda/mlp_stage_cuda.cuh"
#include "../../examples/mlp/mlp_stage.hpp"
// clang-format on

using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

cudaError_t fake_cuda_call(int& calls, cudaError_t result) {
  ++calls;
  return result;
}
ncclResult_t fake_nccl_call(int& calls, ncclResult_t result) {
  ++calls;
  return result;
}

// A fresh, empty directory for one test's files.
std::filesystem::path scratch_dir(const std::string& name) {
  const auto dir =
      std::filesystem::temp_directory_path() /
      ("ppsched-cuda-test-" + name + "-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

ncclUniqueId patterned_id() {
  ncclUniqueId id{};
  for (std::size_t i = 0; i < sizeof(id.internal); ++i) id.internal[i] = static_cast<char>(i * 7 + 3);
  return id;
}

bool same_id(const ncclUniqueId& a, const ncclUniqueId& b) {
  return std::equal(std::begin(a.internal), std::end(a.internal), std::begin(b.internal));
}

int gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

__global__ void fill_kernel(float* data, std::size_t n, float value) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) data[i] = value;
}

void fill(ppsched::cuda::CudaStreamRef stream, float* data, std::size_t n, float value) {
  if (n == 0) return;
  fill_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream.handle()>>>(data, n, value);
  PPSCHED_CUDA_CHECK_LAUNCH();
}

// Worker threads must not use Catch2's assertions (they are not thread-safe); they throw,
// and on_every_rank hands the first exception to the test's thread.
void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("expectation failed: " + what);
}

std::vector<float> read_back(ppsched::CudaBackend& b, const ppsched::cuda::CudaRankBuffer& buffer,
                             ppsched::cuda::CudaRankStream& stream) {
  std::vector<float> host(buffer.size());
  if (!host.empty()) {
    PPSCHED_CUDA_CHECK(
        cudaMemcpyAsync(host.data(), buffer.data(), buffer.bytes(), cudaMemcpyDeviceToHost, stream.ref().handle()));
  }
  expect(b.synchronize(stream, ppsched::HostWait::within(30s)) == ppsched::WaitResult::done, "stream synchronised");
  return host;
}

bool all_equal(const std::vector<float>& values, float expected) {
  return std::all_of(values.begin(), values.end(), [&](float v) { return v == expected; });
}

// Runs body(rank) on one thread per backend and rethrows the first exception (lowest rank).
void on_every_rank(std::vector<ppsched::CudaBackend>& backends, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(backends.size());
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < backends.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        body(static_cast<int>(r));
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// Every rank sends a buffer holding (rank + 1) to the next rank and receives from the
// previous one, in one group; with `both_ways` it also sends backwards in the same group, as
// the 1F1B steady state does. Throws when something else arrived.
void ring_exchange(std::vector<ppsched::CudaBackend>& backends, bool both_ways, std::size_t count) {
  const int p = static_cast<int>(backends.size());
  on_every_rank(backends, [&](int r) {
    ppsched::CudaBackend& b = backends[static_cast<std::size_t>(r)];
    auto s = b.create_stream();
    auto out = b.allocate(count);
    auto in_prev = b.allocate(count);
    auto in_next = b.allocate(count);
    fill(s.ref(), out.data(), count, static_cast<float>(r + 1));
    const int next = (r + 1) % p;
    const int prev = (r + p - 1) % p;
    b.group_start();
    b.send(out, count, next, s, {1, "forward"});
    if (both_ways) b.send(out, count, prev, s, {2, "backward"});
    b.recv(in_prev, count, prev, s, {1, "forward"});
    if (both_ways) b.recv(in_next, count, next, s, {2, "backward"});
    b.group_end();
    expect(all_equal(read_back(b, in_prev, s), static_cast<float>(prev + 1)),
           "rank " + std::to_string(r) + " got rank " + std::to_string(prev) + "'s data");
    if (both_ways) {
      expect(all_equal(read_back(b, in_next, s), static_cast<float>(next + 1)),
             "rank " + std::to_string(r) + " got rank " + std::to_string(next) + "'s data");
    }
  });
}

struct Family {
  const char* name;
  int chunks;  // virtual stages per rank
};
// Every family that trains (forward-only has no backward).
constexpr Family training_families[] = {
    {"gpipe", 1}, {"1f1b", 1}, {"interleaved-1f1b", 2}, {"looped-bfs", 2}, {"zb-h1", 1}, {"zb-h2", 1}, {"zb-v", 2}};

ppsched::Schedule make_lowered(const Family& f, int p, int m) {
  ppsched::ScheduleRequest request;
  request.ranks = p;
  request.microbatches = m;
  request.chunks = f.chunks;
  return ppsched::lower(ppsched::make_schedule(f.name, request));
}

std::vector<ppsched::CudaBackend*> in_rank_order(std::vector<ppsched::CudaBackend>& backends) {
  std::vector<ppsched::CudaBackend*> out;
  for (auto& b : backends) out.push_back(&b);
  return out;
}

// max |a - b| over the largest |b|.
double relative_difference(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return INFINITY;
  double diff = 0.0;
  double scale = 1e-30;
  for (std::size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

// The example's MLP split into a schedule's stages on the GPUs of their ranks, beside the
// same model on the CPU.
struct GpuMlpRun {
  static constexpr std::size_t rows = 4;
  static constexpr float learning_rate = 0.2f;
  std::vector<std::size_t> widths{8, 16, 16, 16, 16, 16, 16, 16, 4};
  mlp::Mlp reference{widths, 1};
  mlp::Mlp teacher{widths, 99};
  mlp::Random random{5};
  std::vector<std::unique_ptr<mlp_cuda::CudaMlpStage>> stages;
  std::vector<ppsched::StageFunctions> functions;
  mlp_cuda::DeviceFloats inputs;
  mlp_cuda::DeviceFloats targets;
  int microbatches = 0;
  float loss_scale = 0.0f;

  GpuMlpRun(const ppsched::Schedule& schedule, const std::vector<int>& device_of_rank) {
    const mlp::Mlp model(widths, 1);
    microbatches = schedule.microbatches;
    loss_scale = 1.0f / static_cast<float>(rows * static_cast<std::size_t>(microbatches));
    const int n = schedule.stages();
    const std::size_t layers = model.layers.size();
    for (int s = 0; s < n; ++s) {
      const std::size_t first = layers * static_cast<std::size_t>(s) / static_cast<std::size_t>(n);
      const std::size_t last = layers * static_cast<std::size_t>(s + 1) / static_cast<std::size_t>(n);
      const int device = device_of_rank[static_cast<std::size_t>(schedule.rank_of(s))];
      stages.push_back(std::make_unique<mlp_cuda::CudaMlpStage>(model, first, last, rows, microbatches, device));
      functions.push_back(stages.back()->functions(s + 1 == n, loss_scale, learning_rate));
    }
    const auto m = static_cast<std::size_t>(microbatches);
    inputs = mlp_cuda::DeviceFloats(device_of_rank[static_cast<std::size_t>(schedule.rank_of(0))],
                                    m * rows * widths.front());
    targets = mlp_cuda::DeviceFloats(device_of_rank[static_cast<std::size_t>(schedule.rank_of(n - 1))],
                                     m * rows * widths.back());
  }

  // Runs one step on the GPUs and on the CPU; returns the larger relative difference of the
  // losses and of the applied gradient.
  double step(ppsched::World<ppsched::CudaBackend>& world) {
    const std::size_t total_rows = rows * static_cast<std::size_t>(microbatches);
    std::vector<float> x(total_rows * widths.front());
    for (float& v : x) v = random.next();
    std::vector<float> t = x;
    for (const mlp::Linear& layer : teacher.layers) {
      std::vector<float> z(total_rows * layer.out());
      layer.forward(t, z);
      t.assign(z.size(), 0.0f);
      mlp::Tanh::forward(z, t);
    }
    inputs.upload(x);
    targets.upload(t);
    const ppsched::StepResult& result = world.run_step({inputs.span(), targets.span()});
    std::vector<float> expected_gradient;
    const std::vector<float> expected =
        mlp::train_step_unpipelined(reference, x, t, rows, microbatches, loss_scale, learning_rate, &expected_gradient);
    std::vector<float> gradient;
    for (const auto& stage : stages) {
      const std::vector<float> part = stage->last_gradient();
      gradient.insert(gradient.end(), part.begin(), part.end());
    }
    return std::max(relative_difference(result.losses, expected), relative_difference(gradient, expected_gradient));
  }
};

}  // namespace

// ---------------------------------------------------------------- [host]: no GPU needed

TEST_CASE("PPSCHED_CUDA_CHECK evaluates the call once and names call, place and error", "[host]") {
  int calls = 0;
  CHECK_NOTHROW(PPSCHED_CUDA_CHECK(fake_cuda_call(calls, cudaSuccess)));
  CHECK(calls == 1);
  try {
    PPSCHED_CUDA_CHECK(fake_cuda_call(calls, cudaErrorInvalidValue));
    FAIL("no exception");
  } catch (const ppsched::cuda::cuda_error& e) {
    CHECK(calls == 2);
    CHECK(e.code() == cudaErrorInvalidValue);
    const std::string message = e.what();
    CHECK_THAT(message, Contains("fake_cuda_call(calls, cudaErrorInvalidValue)"));
    CHECK_THAT(message, Contains("test_backend_cuda.cu:"));
    CHECK_THAT(message, Contains("cudaErrorInvalidValue"));
    CHECK_THAT(message, Contains(cudaGetErrorString(cudaErrorInvalidValue)));
  }
  // A cuda_error is a ppsched::error, so callers need one catch clause for the library.
  CHECK_THROWS_AS(PPSCHED_CUDA_CHECK(fake_cuda_call(calls, cudaErrorMemoryAllocation)), ppsched::error);
  CHECK(calls == 3);
  CHECK_FALSE(PPSCHED_CUDA_LOG(fake_cuda_call(calls, cudaErrorInvalidValue)));
  CHECK(PPSCHED_CUDA_LOG(fake_cuda_call(calls, cudaSuccess)));
  CHECK(calls == 5);
}

TEST_CASE("CUDA errors carry advice, and faults that poison the context are named as such", "[host]") {
  int calls = 0;
  CHECK_THROWS_WITH(PPSCHED_CUDA_CHECK(fake_cuda_call(calls, cudaErrorMemoryAllocation)), Contains("micro-batches"));
  CHECK_THROWS_WITH(PPSCHED_CUDA_CHECK(fake_cuda_call(calls, cudaErrorNoDevice)), Contains("CUDA_VISIBLE_DEVICES"));
  CHECK_THROWS_WITH(PPSCHED_CUDA_CHECK(fake_cuda_call(calls, cudaErrorIllegalAddress)),
                    Contains("restart the process"));
  CHECK(ppsched::cuda::is_sticky_cuda_error(cudaErrorIllegalAddress));
  CHECK_FALSE(ppsched::cuda::is_sticky_cuda_error(cudaErrorMemoryAllocation));
  CHECK(calls == 3);
}

TEST_CASE("PPSCHED_NCCL_CHECK evaluates the call once and names call, place and error", "[host]") {
  int calls = 0;
  CHECK_NOTHROW(PPSCHED_NCCL_CHECK(fake_nccl_call(calls, ncclSuccess)));
  try {
    PPSCHED_NCCL_CHECK(fake_nccl_call(calls, ncclInvalidUsage));
    FAIL("no exception");
  } catch (const ppsched::cuda::nccl_error& e) {
    CHECK(calls == 2);
    CHECK(e.code() == ncclInvalidUsage);
    const std::string message = e.what();
    CHECK_THAT(message, Contains("fake_nccl_call(calls, ncclInvalidUsage)"));
    CHECK_THAT(message, Contains("test_backend_cuda.cu:"));
    CHECK_THAT(message, Contains(ncclGetErrorString(ncclInvalidUsage)));
    CHECK_THAT(message, Contains("its own GPU"));
  }
  CHECK_FALSE(PPSCHED_NCCL_LOG(fake_nccl_call(calls, ncclSystemError)));
  CHECK(calls == 3);
}

TEST_CASE("An NCCL unique id survives hex text, and bad text is rejected with its place", "[host]") {
  const ncclUniqueId id = patterned_id();
  const std::string text = ppsched::cuda::to_hex(id);
  CHECK(text.size() == 2 * sizeof(id.internal));
  CHECK(text.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(same_id(ppsched::cuda::unique_id_from_hex(text, "test"), id));
  CHECK(same_id(ppsched::cuda::unique_id_from_hex(text + "\n", "test"), id));  // as a file holds it

  std::string upper = text;
  std::transform(upper.begin(), upper.end(), upper.begin(), [](char c) { return static_cast<char>(std::toupper(c)); });
  CHECK(same_id(ppsched::cuda::unique_id_from_hex(upper, "test"), id));

  CHECK_THROWS_WITH(ppsched::cuda::unique_id_from_hex(text.substr(1), "id file 'x'"),
                    Contains("id file 'x'") && Contains("255 characters"));
  std::string bad = text;
  bad[10] = 'g';
  CHECK_THROWS_WITH(ppsched::cuda::unique_id_from_hex(bad, "id file 'x'"), Contains("'g'") && Contains("character 11"));
}

TEST_CASE("A unique id shared through a file: written whole, read by waiting ranks", "[host]") {
  const auto dir = scratch_dir("id-file");
  const auto path = dir / "nccl.id";
  const ncclUniqueId id = patterned_id();

  std::atomic<bool> read_ok{false};
  std::thread reader([&] {
    const ncclUniqueId got = ppsched::cuda::await_unique_id(path, ppsched::HostWait::within(30s));
    read_ok = same_id(got, id);
  });
  ppsched::cuda::publish_unique_id(id, path);
  reader.join();
  CHECK(read_ok);
  CHECK_FALSE(std::filesystem::exists(dir / "nccl.id.partial"));  // renamed into place, not left behind

  // A rank whose peer never publishes gives up at its deadline, or when asked to stop.
  CHECK_THROWS_WITH(ppsched::cuda::await_unique_id(dir / "never", ppsched::HostWait::within(20ms)),
                    Contains("never") && Contains("timed out"));
  std::stop_source stop;
  stop.request_stop();
  CHECK_THROWS_WITH(ppsched::cuda::await_unique_id(dir / "never", ppsched::HostWait::within(1h, stop.get_token())),
                    Contains("stopped"));
  // A file that is not an id is named in the error.
  { std::ofstream(dir / "garbage") << "hello\n"; }
  CHECK_THROWS_WITH(ppsched::cuda::await_unique_id(dir / "garbage", ppsched::HostWait::within(1s)), Contains("garbage"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("A unique id from an environment variable", "[host]") {
  const ncclUniqueId id = patterned_id();
  REQUIRE(::setenv("PPSCHED_TEST_NCCL_ID", ppsched::cuda::to_hex(id).c_str(), 1) == 0);
  CHECK(same_id(ppsched::cuda::unique_id_from_env("PPSCHED_TEST_NCCL_ID"), id));
  REQUIRE(::unsetenv("PPSCHED_TEST_NCCL_ID") == 0);
  CHECK_THROWS_WITH(ppsched::cuda::unique_id_from_env("PPSCHED_TEST_NCCL_ID"),
                    Contains("PPSCHED_TEST_NCCL_ID") && Contains("not set"));
}

TEST_CASE("poll_until ends done, timed out or stopped", "[host]") {
  int polls = 0;
  CHECK(ppsched::cuda::poll_until([&] { return ++polls == 3; }, ppsched::HostWait::within(1h)) == ppsched::WaitResult::done);
  CHECK(polls == 3);
  CHECK(ppsched::cuda::poll_until([] { return false; }, ppsched::HostWait::within(0ms)) == ppsched::WaitResult::timed_out);
  std::stop_source stop;
  stop.request_stop();
  CHECK(ppsched::cuda::poll_until([] { return false; }, ppsched::HostWait::within(1h, stop.get_token())) ==
        ppsched::WaitResult::stopped);
  // Done wins over an expired limit: work that finished is never reported as timed out.
  CHECK(ppsched::cuda::poll_until([] { return true; }, ppsched::HostWait::within(0ms, stop.get_token())) ==
        ppsched::WaitResult::done);
}

TEST_CASE("Ranks spread over devices round-robin; nonsense is rejected", "[host]") {
  CHECK(ppsched::cuda::spread_ranks_over_devices(5, 2) == std::vector<int>{0, 1, 0, 1, 0});
  CHECK(ppsched::cuda::spread_ranks_over_devices(4, 1) == std::vector<int>{0, 0, 0, 0});
  CHECK(ppsched::cuda::spread_ranks_over_devices(2, 8) == std::vector<int>{0, 1});
  CHECK_THROWS_AS(ppsched::cuda::spread_ranks_over_devices(0, 1), ppsched::error);
  CHECK_THROWS_AS(ppsched::cuda::spread_ranks_over_devices(3, 0), ppsched::error);
}

TEST_CASE("The device-copy exchange rejects bad ranks before touching the GPU", "[host]") {
  CHECK_THROWS_WITH(ppsched::cuda::LocalExchange(0), Contains("0 ranks"));
  ppsched::cuda::LocalExchange exchange(2);
  const ppsched::HostWait wait = ppsched::HostWait::within(1s);
  const ppsched::cuda::LocalExchange::Recv to_self{0, nullptr, 0, 0, ppsched::cuda::CudaStreamRef(cudaStreamPerThread), {}};
  CHECK_THROWS_WITH(exchange.post_group(0, 0, {}, std::span(&to_self, 1), wait), Contains("with itself"));
  const ppsched::cuda::LocalExchange::Recv from_nowhere{5, nullptr, 0, 0, ppsched::cuda::CudaStreamRef(cudaStreamPerThread), {}};
  CHECK_THROWS_WITH(exchange.post_group(0, 0, {}, std::span(&from_nowhere, 1), wait), Contains("peer 5"));
  CHECK_THROWS_WITH(exchange.post_group(3, 0, {}, {}, wait), Contains("rank 3"));
}

TEST_CASE("The spin kernel refuses durations it cannot honour", "[host]") {
  const ppsched::cuda::SpinCalibration calibrated{1000.0};
  CHECK(calibrated.cycles_for(2.5) == 2500);
  const ppsched::cuda::CudaStreamRef stream(cudaStreamPerThread);
  CHECK_THROWS_WITH(ppsched::cuda::launch_spin(stream, -1.0, calibrated), Contains("non-negative"));
  CHECK_THROWS_WITH(ppsched::cuda::launch_spin(stream, 5.0, ppsched::cuda::SpinCalibration{}), Contains("not calibrated"));
  CHECK_NOTHROW(ppsched::cuda::launch_spin(stream, 0.0, calibrated));  // empty stage: nothing enqueued
}

// ---------------------------------------------------------------- [gpu]

TEST_CASE("A failed CUDA call leaves no error behind for the next check", "[gpu]") {
  const int count = ppsched::cuda::device_count();
  CHECK_THROWS_WITH(PPSCHED_CUDA_CHECK(cudaSetDevice(count + 3)),
                    Contains("cudaSetDevice(count + 3)") && Contains("cudaErrorInvalidDevice"));
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK_THROWS_WITH(ppsched::cuda::require_device(count, "placement"), Contains("placement") && Contains("does not exist"));
}

TEST_CASE("Stream and event owners are move-only and their refs order work", "[gpu]") {
  ppsched::cuda::CudaStream a(0);
  ppsched::cuda::CudaStream b(0, ppsched::cuda::StreamPriority::high);
  ppsched::cuda::CudaEvent done(0);
  CHECK(a.ref().device() == 0);

  // b waits for a: the value a writes is what b copies.
  float* data = nullptr;
  PPSCHED_CUDA_CHECK(cudaMalloc(&data, 2 * sizeof(float)));
  fill(a.ref(), data, 1, 42.0f);
  done.ref().record(a.ref());
  b.ref().wait(done.ref());
  PPSCHED_CUDA_CHECK(cudaMemcpyAsync(data + 1, data, sizeof(float), cudaMemcpyDeviceToDevice, b.handle()));
  float host[2] = {0.0f, 0.0f};
  PPSCHED_CUDA_CHECK(cudaMemcpyAsync(host, data, sizeof(host), cudaMemcpyDeviceToHost, b.handle()));
  b.ref().synchronize();
  CHECK(host[1] == 42.0f);
  CHECK(b.ref().ready());
  CHECK(done.ref().ready());
  PPSCHED_CUDA_CHECK(cudaFree(data));

  ppsched::cuda::CudaStream moved = std::move(a);
  CHECK(moved.owns());
  CHECK_FALSE(a.owns());  // the moved-from state is the point
  CHECK_THROWS_WITH(a.ref(), Contains("moved from"));
  ppsched::cuda::CudaEvent moved_event = std::move(done);
  CHECK_THROWS_WITH(done.ref(), Contains("moved from"));
  CHECK(moved_event.owns());

  // Timing events measure; the default kind does not, and says so through CUDA's error.
  ppsched::cuda::CudaEvent t0(0, ppsched::cuda::EventTiming::enabled);
  ppsched::cuda::CudaEvent t1(0, ppsched::cuda::EventTiming::enabled);
  t0.ref().record(moved.ref());
  fill(moved.ref(), nullptr, 0, 0.0f);
  t1.ref().record(moved.ref());
  t1.ref().synchronize();
  CHECK(ppsched::cuda::elapsed_ms(t0.ref(), t1.ref()) >= 0.0f);
  moved_event.ref().record(moved.ref());
  moved_event.ref().synchronize();
  CHECK_THROWS_AS(ppsched::cuda::elapsed_ms(t0.ref(), moved_event.ref()), ppsched::cuda::cuda_error);
}

TEST_CASE("Device buffers round-trip data, and the pool keeps the reserved peak", "[gpu]") {
  ppsched::cuda::CudaStream stream(0);
  std::vector<float> values(1000);
  std::iota(values.begin(), values.end(), 0.5f);
  ppsched::cuda::DeviceBuffer buffer(values.size() * sizeof(float), stream.ref());
  CHECK(buffer.as<float>().size() == values.size());
  const ppsched::cuda::DeviceBuffer odd(6, stream.ref());
  CHECK_THROWS_WITH(odd.as<float>().size(), Contains("whole number"));
  ppsched::cuda::copy_to_device(buffer, std::span<const float>(values), stream.ref());
  std::vector<float> back(values.size());
  ppsched::cuda::copy_to_host(std::span<float>(back), buffer, stream.ref());
  stream.ref().synchronize();
  CHECK(back == values);
  std::vector<float> too_big(values.size() + 1);
  CHECK_THROWS_WITH(ppsched::cuda::copy_to_device(buffer, std::span<const float>(too_big), stream.ref()),
                    Contains("do not fit"));

  constexpr std::size_t peak = std::size_t{64} << 20;
  ppsched::cuda::reserve_pool(0, peak);
  CHECK(ppsched::cuda::pool_reserved_bytes(0) >= peak);
  const ppsched::cuda::DeviceBuffer empty(0, stream.ref());
  CHECK(empty.data() == nullptr);
}

TEST_CASE("The spin kernel is calibrated against timing events", "[gpu]") {
  const ppsched::cuda::SpinCalibration calibration = ppsched::cuda::calibrate_spin(0, 2'000'000);
  // Any real GPU counts between 100 MHz and 10 GHz.
  CHECK(calibration.cycles_per_microsecond > 100.0);
  CHECK(calibration.cycles_per_microsecond < 10'000.0);
  ppsched::cuda::CudaStream stream(0);
  ppsched::cuda::launch_spin(stream.ref(), 50.0, calibration);
  stream.ref().synchronize();
}

TEST_CASE("CudaBackend: buffers, zero, accumulate and a task's kernels on launch_stream()", "[gpu]") {
  auto backends = ppsched::cuda::make_cuda_backends(std::vector<int>{0});
  ppsched::CudaBackend& b = backends[0];
  CHECK(b.rank() == 0);
  CHECK(b.ranks() == 1);
  auto s = b.create_stream();
  auto x = b.allocate(1000);
  auto y = b.allocate(1000);
  CHECK(b.span(x).size() == 1000);
  CHECK_THROWS_WITH(ppsched::cuda::launch_stream(), Contains("outside a task"));

  auto fill_y = [&] { fill(ppsched::cuda::launch_stream(), y.data(), y.size(), 2.0f); };
  b.zero(s, x);
  b.launch(s, ppsched::host_task(fill_y, "fill y"), {});
  b.accumulate(s, x, y);
  b.accumulate(s, x, y);
  CHECK(all_equal(read_back(b, x, s), 4.0f));

  auto small = b.allocate(10);
  CHECK_THROWS_WITH(b.accumulate(s, x, small), Contains("10 floats into 1000"));
  b.recover();  // the size mismatch made the rank's failure sticky; recovery clears it

  // keep_outputs of a micro-batch smaller than its buffer (Batch::sizes) copies a prefix;
  // more floats than the buffer holds are refused.
  std::vector<float> prefix(600, -1.0f);
  b.copy_to_host(s, x, prefix);
  CHECK(all_equal(prefix, 4.0f));
  std::vector<float> too_many(1001);
  CHECK_THROWS_WITH(b.copy_to_host(s, x, too_many), Contains("copies 1001 floats out of a buffer of 1000"));
  b.recover();

  // Events order two streams of the rank; elapsed_ms works on the backend's events.
  auto s2 = b.create_stream();
  auto e0 = b.create_event();
  auto e1 = b.create_event();
  b.record(e0, s);
  b.zero(s, x);
  b.record(e1, s);
  b.wait(s2, e1);
  b.accumulate(s2, x, y);
  CHECK(b.synchronize(s2, ppsched::HostWait::within(30s)) == ppsched::WaitResult::done);
  CHECK(b.query(e1));
  CHECK(b.elapsed_ms(e0, e1) >= 0.0);
  CHECK(all_equal(read_back(b, x, s2), 2.0f));
}

TEST_CASE("CudaBackend: a task that throws makes the rank's failure sticky until recover()", "[gpu]") {
  auto backends = ppsched::cuda::make_cuda_backends(std::vector<int>{0});
  ppsched::CudaBackend& b = backends[0];
  auto s = b.create_stream();
  auto thrower = [] { throw std::runtime_error("stage 3 exploded"); };
  CHECK_THROWS_WITH(b.launch(s, ppsched::host_task(thrower, "F3@s1"), {}), Contains("stage 3 exploded"));
  CHECK(b.failed());
  CHECK_THROWS_WITH(b.create_event(), Contains("stage 3 exploded") && Contains("rank 0"));
  b.recover();
  CHECK_FALSE(b.failed());
  auto e = b.create_event();
  b.record(e, s);
  CHECK(b.synchronize(e, ppsched::HostWait::within(30s)) == ppsched::WaitResult::done);
}

TEST_CASE("Ranks sharing one GPU exchange through device copies, in both directions per group", "[gpu]") {
  const int ranks = GENERATE(2, 3, 4);
  const std::size_t count = GENERATE(std::size_t{1}, std::size_t{4097});
  const std::vector<int> devices(static_cast<std::size_t>(ranks), 0);
  auto backends = ppsched::cuda::make_cuda_backends(devices, {}, ppsched::cuda::CudaTransport::device_copy);
  REQUIRE_FALSE(backends[0].uses_nccl());
  ring_exchange(backends, false, count);
  ring_exchange(backends, true, count);
}

TEST_CASE("Device-copy exchange: a missing partner times out, a mismatch is named, abort stops peers", "[gpu]") {
  ppsched::CudaBackendOptions options;
  options.timeout = 200ms;
  auto backends = ppsched::cuda::make_cuda_backends(std::vector<int>{0, 0}, options, ppsched::cuda::CudaTransport::device_copy);

  SECTION("a receive whose sender never posts") {
    ppsched::CudaBackend& b = backends[0];
    auto s = b.create_stream();
    auto buffer = b.allocate(16);
    b.group_start();
    b.recv(buffer, 16, 1, s, {7, "RECV_F3@s1"});
    CHECK_THROWS_WITH(b.group_end(), Contains("timed out") && Contains("RECV_F3@s1") && Contains("rank 1"));
    CHECK(b.failed());
  }
  SECTION("sizes that differ on the two sides") {
    CHECK_THROWS_WITH(on_every_rank(backends,
                                    [&](int r) {
                                      ppsched::CudaBackend& b = backends[static_cast<std::size_t>(r)];
                                      auto s = b.create_stream();
                                      auto buffer = b.allocate(32);
                                      if (r == 0) b.send(buffer, 32, 1, s, {1, "SEND_F0@s0"});
                                      if (r == 1) b.recv(buffer, 16, 0, s, {1, "RECV_F0@s1"});
                                    }),
                      Contains("128 bytes") && Contains("64 bytes"));
  }
  SECTION("abort on one rank ends the other's wait, and both recover") {
    std::atomic<bool> waiting{false};
    CHECK_THROWS(on_every_rank(backends, [&](int r) {
      ppsched::CudaBackend& b = backends[static_cast<std::size_t>(r)];
      if (r == 0) {
        while (!waiting) std::this_thread::yield();
        b.abort("rank 0 gave up");
        return;
      }
      auto s = b.create_stream();
      auto buffer = b.allocate(4);
      waiting = true;
      b.recv(buffer, 4, 0, s, {});  // never matched: ends through the abort (or the timeout)
    }));
    CHECK(backends[1].failed());
    on_every_rank(backends, [&](int r) { backends[static_cast<std::size_t>(r)].recover(); });
    ring_exchange(backends, true, 8);
  }
}

TEST_CASE("Ranks on their own GPUs exchange through NCCL", "[gpu][nccl][may_skip]") {
  const int gpus = gpu_count();
  if (gpus < 2) PPSCHED_SKIP("only " << gpus << " GPU: the NCCL exchange needs two (device copies cover one GPU)");
  const int ranks = std::min(gpus, 4);
  ppsched::CudaBackendOptions options;
  options.timeout = 10s;  // the waits inside operations, e.g. a group with a silent peer
  auto backends = ppsched::cuda::make_cuda_backends(ppsched::cuda::spread_ranks_over_devices(ranks, gpus), options);
  REQUIRE(backends[0].uses_nccl());
  ring_exchange(backends, false, 1000);
  ring_exchange(backends, true, 1000);

  // A receive nobody answers ends in bounded time — at the bounded synchronize, or already at
  // group_end if NCCL still had to connect the pair — the rank aborts its communicator
  // (ending the NCCL kernel), every rank recovers with a new one, and the exchange works again.
  {
    ppsched::CudaBackend& b = backends[0];
    auto s = b.create_stream();
    auto buffer = b.allocate(4);
    bool ended = false;
    try {
      b.group_start();
      b.recv(buffer, 4, 1, s, {});
      b.group_end();
      ended = b.synchronize(s, ppsched::HostWait::within(300ms)) == ppsched::WaitResult::timed_out;
    } catch (const ppsched::error& e) {
      INFO(e.what());
      ended = std::string(e.what()).find("timed out") != std::string::npos;
    }
    CHECK(ended);
    b.abort("test: receive never matched");
  }
  on_every_rank(backends, [&](int r) { backends[static_cast<std::size_t>(r)].recover(); });
  ring_exchange(backends, true, 1000);
}

TEST_CASE("One process per GPU: ranks join through a unique id file", "[gpu][nccl][may_skip]") {
  const int gpus = gpu_count();
  if (gpus < 2) PPSCHED_SKIP("only " << gpus << " GPU: joining through a file needs two");
  const auto dir = scratch_dir("join");
  std::vector<ppsched::CudaBackend> backends;
  std::vector<std::optional<ppsched::CudaBackend>> joined(2);
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(2);
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        joined[static_cast<std::size_t>(r)].emplace(
            ppsched::CudaBackend::join_through_file(2, r, r, dir / "nccl.id", {}));
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  for (auto& b : joined) backends.push_back(std::move(*b));
  ring_exchange(backends, true, 256);
  std::filesystem::remove_all(dir);
}

TEST_CASE("Every training schedule runs the GPU MLP as the CPU trains it, on 2 and 4 ranks", "[gpu][world]") {
  const int gpus = gpu_count();
  for (const Family& family : training_families) {
    for (const int p : {2, 4}) {
      const ppsched::Schedule schedule = make_lowered(family, p, 2 * p);
      const std::vector<int> devices = ppsched::cuda::spread_ranks_over_devices(p, gpus);
      auto backends = ppsched::cuda::make_cuda_backends(devices);
      GpuMlpRun run(schedule, devices);
      ppsched::World<ppsched::CudaBackend> world(in_rank_order(backends), schedule, run.functions);
      for (int step = 0; step < 3; ++step) {
        const double difference = run.step(world);
        INFO(family.name << " p=" << p << " step " << step << " on " << gpus << " GPU(s), "
                         << (backends[0].uses_nccl() ? "NCCL" : "device copies"));
        CHECK(difference == 0.0);  // the same bits: mlp_stage_cuda.cuh rounds as the CPU loops do
      }
    }
  }
}

// R(s, m) before every backward, or OFFLOAD(s, m) after every forward and RELOAD(s, m) before
// every backward (tests/training_families.hpp writes the same on the CPU side); overlapped
// pairs stay adjacent.
ppsched::Schedule with_memory_actions(ppsched::Schedule s, bool offload) {
  using ppsched::Op;
  for (auto& prog : s.programs) {
    std::vector<ppsched::Action> out;
    for (std::size_t i = 0; i < prog.size(); ++i) {
      const ppsched::Action& a = prog[i];
      const bool second = a.group != 0 && i > 0 && prog[i - 1].group == a.group;
      const bool first = a.group != 0 && i + 1 < prog.size() && prog[i + 1].group == a.group;
      if (a.op == Op::B || a.op == Op::BI) {
        const ppsched::Action before{offload ? Op::RELOAD : Op::R, a.stage, a.microbatch, 0};
        if (second) {
          out.insert(out.end() - 1, before);
        } else {
          out.push_back(before);
        }
      }
      out.push_back(a);
      if (offload && a.op == Op::F && !first) out.push_back({Op::OFFLOAD, a.stage, a.microbatch, 0});
      if (offload && second && prog[i - 1].op == Op::F) {
        out.push_back({Op::OFFLOAD, prog[i - 1].stage, prog[i - 1].microbatch, 0});
      }
    }
    prog = std::move(out);
  }
  return s;
}

TEST_CASE("Recompute and offload on the GPU give the CPU's bits (copy stream, pinned host pool)", "[gpu][world]") {
  const int gpus = gpu_count();
  for (const Family& family : training_families) {
    for (const bool offload : {false, true}) {
      const int p = 2;
      ppsched::ScheduleRequest request;
      request.ranks = p;
      request.microbatches = 2 * p;
      request.chunks = family.chunks;
      const ppsched::LoweredSchedule schedule =
          ppsched::lower(with_memory_actions(ppsched::make_schedule(family.name, request), offload));
      const std::vector<int> devices = ppsched::cuda::spread_ranks_over_devices(p, gpus);
      auto backends = ppsched::cuda::make_cuda_backends(devices);
      GpuMlpRun run(schedule.schedule(), devices);
      if (offload) {
        for (std::size_t s = 0; s < run.stages.size(); ++s) run.stages[s]->add_memory_actions(run.functions[s]);
      }
      ppsched::World<ppsched::CudaBackend> world(in_rank_order(backends), schedule, run.functions);
      for (int step = 0; step < 2; ++step) {
        INFO(family.name << (offload ? " offload" : " recompute") << " step " << step);
        CHECK(run.step(world) == 0.0);
      }
    }
  }
}

TEST_CASE("A stage that throws on a GPU rank ends the step with its name; the next step runs", "[gpu][world]") {
  const int gpus = gpu_count();
  const ppsched::Schedule schedule = make_lowered({"1f1b", 1}, 2, 4);
  const std::vector<int> devices = ppsched::cuda::spread_ranks_over_devices(2, gpus);
  auto backends = ppsched::cuda::make_cuda_backends(devices);
  GpuMlpRun run(schedule, devices);
  std::atomic<bool> armed{true};
  auto forward = run.functions[1].forward;
  run.functions[1].forward = [&armed, forward](std::int32_t mb, std::span<const float> in, std::span<float> out) {
    if (mb == 2 && armed.exchange(false)) throw std::runtime_error("injected fault");
    forward(mb, in, out);
  };
  ppsched::ExecutorOptions options;
  options.watchdog = std::chrono::milliseconds(5000);
  ppsched::World<ppsched::CudaBackend> world(in_rank_order(backends), schedule, run.functions, options);
  try {
    (void)run.step(world);
    FAIL("the injected fault did not end the step");
  } catch (const ppsched::error& e) {
    const std::string message = e.what();
    CHECK_THAT(message,
               Contains("rank 1") && Contains("stage 1") && Contains("micro-batch 2") && Contains("injected fault"));
  }
  // Every backend recovered and the World runs the next step. (What the failed step left in
  // the model differs between transports — with NCCL a rank may already have enqueued its
  // optimizer step — so correctness is checked on a fresh model over the same backends.)
  CHECK_NOTHROW(run.step(world));
  GpuMlpRun fresh(schedule, devices);
  ppsched::World<ppsched::CudaBackend> again(in_rank_order(backends), schedule, fresh.functions, options);
  CHECK(fresh.step(again) == 0.0);
}

TEST_CASE("Synthetic GPU stages give one measured span per action, set beside the simulator", "[gpu][world]") {
  const int gpus = gpu_count();
  const ppsched::cuda::SpinCalibration calibration = ppsched::cuda::calibrate_spin(0, 2'000'000);
  const ppsched::CostModel cost = ppsched::uniform_costs(1.0, 1.0, 1.0, "ms");
  for (const Family family : {Family{"1f1b", 1}, Family{"zb-h1", 1}, Family{"interleaved-1f1b", 2}}) {
    const int p = 2;
    const int m = 4;
    const ppsched::Schedule schedule = make_lowered(family, p, m);
    auto backends = ppsched::cuda::make_cuda_backends(ppsched::cuda::spread_ranks_over_devices(p, gpus));
    const auto stages =
        ppsched::cuda::synthetic_gpu_stages(cost, schedule.stages(), m, std::chrono::microseconds(200), calibration);
    ppsched::World<ppsched::CudaBackend> world(in_rank_order(backends), schedule, stages);
    std::vector<float> host(static_cast<std::size_t>(m), 1.0f);
    mlp_cuda::DeviceFloats inputs(backends[0].device(), host.size());
    mlp_cuda::DeviceFloats targets(backends[static_cast<std::size_t>(schedule.rank_of(schedule.stages() - 1))].device(),
                                   host.size());
    inputs.upload(host);
    targets.upload(host);
    const ppsched::StepResult& result = world.run_step({inputs.span(), targets.span()});
    std::size_t actions = 0;
    for (const auto& program : schedule.programs) actions += program.size();
    INFO(family.name);
    REQUIRE(result.timeline.spans.size() == actions);
    for (const ppsched::Span& span : result.timeline.spans) {
      CHECK(span.start >= 0.0);
      CHECK(span.end >= span.start);
    }
    const ppsched::SimResult predicted = ppsched::simulate(schedule, ppsched::uniform_costs(0.2, 0.2, 0.2, "ms"));
    const ppsched::TimelineComparison comparison = ppsched::compare(result.timeline, predicted.timeline);
    CHECK(comparison.per_rank.size() == static_cast<std::size_t>(p));
    CHECK(comparison.only_in_measured.empty());
    CHECK(comparison.only_in_predicted.empty());
  }
}

// ---------------------------------------------------------------- CUDA Graphs

// The GPU MLP declared capturable (its callables only enqueue kernels and copies on
// launch_stream()), its loss written on the device by mlp_stage_cuda.cuh's kernel instead of
// read back on the host.
void make_capturable(GpuMlpRun& run) {
  for (ppsched::StageFunctions& f : run.functions) {
    f.capturable = true;
    if (!f.loss) continue;
    f.loss = nullptr;
    f.device_loss = [scale = run.loss_scale](const ppsched::StageContext&, std::span<const float> out,
                                             std::span<const float> target, std::span<float> grad_out,
                                             std::span<float> loss) {
      mlp_cuda::mean_squared_error<<<1, 1, 0, ppsched::cuda::launch_stream().handle()>>>(
          out.data(), target.data(), scale, grad_out.data(), loss.data(), static_cast<int>(out.size()));
    };
  }
}

ppsched::ExecutorOptions graph_options() {
  ppsched::ExecutorOptions options;
  options.record_timeline = false;
  options.graphs.enabled = true;
  return options;
}

TEST_CASE("CUDA Graphs: replayed steps train the GPU MLP as the CPU does, bit for bit, for 10 steps", "[gpu][world]") {
  const int gpus = gpu_count();
  // One GPU per rank (NCCL, its sends and receives captured); on one GPU, one rank holding
  // every stage of the schedule (ranks sharing a GPU cannot capture: the next case).
  const int p = gpus >= 2 ? 2 : 1;
  for (const Family& family : {Family{"1f1b", 1}, Family{"zb-h1", 1}, Family{"interleaved-1f1b", 2}, Family{"zb-v", 2}}) {
    const ppsched::Schedule schedule = make_lowered(family, p, 4);
    const std::vector<int> devices = ppsched::cuda::spread_ranks_over_devices(p, gpus);
    auto backends = ppsched::cuda::make_cuda_backends(devices);
    GpuMlpRun run(schedule, devices);
    make_capturable(run);
    ppsched::World<ppsched::CudaBackend> world(in_rank_order(backends), schedule, run.functions, graph_options());
    for (int step = 0; step < 10; ++step) {
      INFO(family.name << " p=" << p << " step " << step << (step == 0 ? " (eager)" : step == 1 ? " (captured)" : " (replayed)"));
      CHECK(run.step(world) == 0.0);  // losses and applied gradients: the CPU's bits
    }
    for (int r = 0; r < p; ++r) CHECK(world.executor(r).graph_captured());
  }
}

TEST_CASE("CUDA Graphs: ranks sharing a GPU are refused before the first step, saying why", "[gpu]") {
  const ppsched::Schedule schedule = make_lowered({"1f1b", 1}, 2, 4);
  const std::vector<int> devices{0, 0};
  auto backends = ppsched::cuda::make_cuda_backends(devices, {}, ppsched::cuda::CudaTransport::device_copy);
  GpuMlpRun run(schedule, devices);
  make_capturable(run);
  REQUIRE_THROWS_WITH(ppsched::World<ppsched::CudaBackend>(in_rank_order(backends), schedule, run.functions,
                                                           graph_options()),
                      Contains("cannot capture a step") && Contains("share a GPU"));
}

TEST_CASE("CUDA Graphs: the CUDA MLP's host-reading loss is refused before the first step", "[gpu]") {
  const ppsched::Schedule schedule = make_lowered({"1f1b", 1}, 1, 4);
  const std::vector<int> devices{0};
  auto backends = ppsched::cuda::make_cuda_backends(devices);
  GpuMlpRun run(schedule, devices);
  for (ppsched::StageFunctions& f : run.functions) f.capturable = true;  // but the loss still returns a float
  REQUIRE_THROWS_WITH(ppsched::World<ppsched::CudaBackend>(in_rank_order(backends), schedule, run.functions,
                                                           graph_options()),
                      Contains("stage 0's loss returns its value to the host"));
}

// ---------------------------------------------------------------- main

// With a GPU: the cases selected on the command line, with tests/skip.hpp's exit status (77
// when every case that ran skipped, 1 when one skipped beside others). Without one: the
// selected [host] cases run, or every [host] case where the selection also has GPU cases (as
// with no selection), and the GPU cases are reported skipped (77); a selection of GPU cases
// only (as '[nccl]') runs nothing and exits 77.
int main(int argc, char** argv) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  const ppsched::cuda::DeviceProbe probe = ppsched::cuda::probe_devices();
  if (probe.usable()) return ppsched::test_support::exit_status(session.run());
  std::size_t selected = 0;
  std::size_t selected_host = 0;
  {
    const Catch::Config& config = session.config();
    for (const Catch::TestCase& t : Catch::filterTests(Catch::getAllTestCasesSorted(config), config.testSpec(), config)) {
      ++selected;
      if (std::find(t.lcaseTags.begin(), t.lcaseTags.end(), "host") != t.lcaseTags.end()) ++selected_host;
    }
  }
  const auto skip_gpu = [&] {
    std::printf("SKIPPED: the [gpu] tests need a usable CUDA device: %s\n", probe.reason.c_str());
    return 77;
  };
  if (selected > 0 && selected_host == 0) return skip_gpu();
  if (selected_host == selected) return ppsched::test_support::exit_status(session.run());
  // No GPU: run what needs none, then report the GPU tests as skipped with the reason.
  session.configData().testsOrTags = {"[host]"};
  session.useConfigData(session.configData());  // drops the Config made above for the old selection
  if (session.run() != 0) return 1;
  return skip_gpu();
}
