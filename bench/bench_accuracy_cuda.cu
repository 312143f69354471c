// Accuracy of the planner's predictions on a GPU: bench_accuracy's method (profile the model
// with the library, plan and predict with the library's cost model, run World steps, compare)
// with real CUDA stages on CudaBackend, ranks sharing one GPU. Two model shapes:
//
//   mlp-<W>   the MLP of examples/cuda (mlp_stage_cuda.cuh's kernels: one thread per output,
//             Linear then tanh), 8 layers of width W, at two widths: latency-bound kernels
//   gemm-<H>  8 layers of H x H through cuBLAS (cublasSgemm, FP32) then tanh: GEMM-bound
//
// Each stage keeps, per micro-batch, its layers' tanh outputs from F to its backward and the
// pre-activation gradients from BI to BW, allocated from a stream-ordered memory pool of its rank
// (cudaMallocFromPoolAsync / cudaFreeAsync), and accumulates its weight gradients itself (the
// executor then sums none). Per configuration:
//
//   predicted  1. profile_stages on CudaBackend (inside CudaBackend::launch, every call followed
//                 by a synchronisation of its stream in around_call), one stage function per
//                 layer, at the three micro-batch sizes the configurations use; the cost of that
//                 timing itself (an empty call's launch and synchronisation, profiled the same
//                 way) is taken off every point, since a pipelined step pays no synchronisation
//                 per layer;
//              2. measure_backend_overheads<CudaBackend> (fixed costs per step, action and
//                 transfer; the two-rank run shares the GPU, as every configuration does);
//              3. measure_concurrent_slowdown: how much slower one micro-batch of the whole model
//                 runs while k = 1..4 ranks run theirs on the same GPU, at each size;
//              4. the link: a device-to-device copy's bandwidth on the GPU;
//              then graph_model + cost_model_of + simulate, as plan_devices prices a plan: the
//              step time (makespan) and each rank's peak of stored activations (timed_peak,
//              with what BI keeps for BW: 2 x what F keeps, the pre-activation gradients).
//   measured   World<CudaBackend>::run_step, wall time on the host (the median of every
//              repetition of every pass, passes interleaved over the configurations so that a
//              change of clock or load hits all alike); per rank, the pool's high-water mark of
//              memory in use (cudaMemPoolAttrUsedMemHigh) over the measured steps, and beside
//              it the bytes the stages held at once in the order the rank issued them.
//
// Then: mean and largest |error| of step time and of peak memory, Kendall's tau between the
// predicted and measured orderings of the step times, and per (model, ranks) whether the
// configuration the prediction picks (family and micro-batch count for the same global batch)
// is within 5% of the fastest measured. A table on stdout; with --json FILE the same as JSON
// (tools/gpu-check's accuracy stage reads it; docs/gpu.md). Without a usable GPU it prints why
// and exits 77. Not a Google Benchmark program and not a test: a report.
//
//   bench_accuracy_cuda [--json FILE] [--repetitions N] [--passes N] [--max-seconds S] [--quick]
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <ppsched/backend/cuda.hpp>
#include <ppsched/plan/costs.hpp>
#include <ppsched/plan/model.hpp>
#include <ppsched/runtime/profile.hpp>
#include <ppsched/runtime/world.hpp>
#include <ppsched/schedule/generators.hpp>
#include <ppsched/sim/simulate.hpp>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../examples/cuda/mlp_stage_cuda.cuh"
#include "accuracy_stats.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// The goals (docs/gpu.md, "Expectations"); tools/gpu-check holds the same numbers.
constexpr double goal_mean_error = 0.05;
constexpr double goal_max_error = 0.10;
constexpr double goal_tau = 0.90;
constexpr double goal_pick = 0.05;

void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  std::ostringstream o;
  o << call << " failed at " << file << ':' << line << ": " << cublasGetStatusName(status) << " ("
    << cublasGetStatusString(status) << ")";
  throw std::runtime_error(o.str());
}
#define ACCURACY_CUBLAS_CHECK(call) check_cublas((call), #call, __FILE__, __LINE__)

// ---------------------------------------------------------------- kernels beside mlp_cuda's

// Weights uniform in [-scale, scale) from a hash of the index: no host copy of 64 MiB layers.
__global__ void fill_uniform(float* p, std::size_t n, float scale, unsigned seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    unsigned x = static_cast<unsigned>(i) * 2654435761u ^ seed;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    p[i] = scale * (static_cast<float>(x & 0xFFFFFFu) / 8388608.0f - 1.0f);
  }
}

// mlp_cuda::linear_backward_weight, accumulating: grad += [dz^T x, column sums of dz], as a
// framework's .grad is summed over micro-batches.
__global__ void linear_backward_weight_add(const float* x, const float* dz, float* grad, int rows, int in, int out) {
  const int k = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (k >= out * in + out) return;
  float acc = 0.0f;
  if (k < out * in) {
    const int o = k / in;
    const int i = k % in;
    for (int r = 0; r < rows; ++r) acc = __fadd_rn(acc, __fmul_rn(dz[r * out + o], x[r * in + i]));
  } else {
    const int o = k - out * in;
    for (int r = 0; r < rows; ++r) acc = __fadd_rn(acc, dz[r * out + o]);
  }
  grad[k] = __fadd_rn(grad[k], acc);
}

// dy = scale (y - t), one thread per element: the loss value is not read back (no host wait).
__global__ void loss_gradient(const float* y, const float* t, float scale, float* dy, int n) {
  const int k = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (k < n) dy[k] = scale * (y[k] - t[k]);
}

__global__ void empty_kernel() {}

void fill(float* p, std::size_t n, float scale, unsigned seed) {
  fill_uniform<<<1024, 256>>>(p, n, scale, seed);
  PPSCHED_CUDA_CHECK(cudaGetLastError());
}

// ---------------------------------------------------------------- models

enum class Kind { mlp, gemm };

struct ModelSpec {
  std::string name;
  Kind kind = Kind::mlp;
  int width = 0;
  int layers = 8;
  int batch = 0;               // rows per step; a configuration splits it into m micro-batches
  std::vector<int> rows;       // the micro-batch sizes the configurations use, increasing
  [[nodiscard]] std::size_t params_per_layer() const {
    const auto w = static_cast<std::size_t>(width);
    return w * w + (kind == Kind::mlp ? w : 0);  // mlp::Linear's layout: W, then b
  }
};

// The model's parameters and weight-gradient accumulators, one pair per layer, made once and
// shared by every configuration (a layer belongs to one stage in each).
struct ModelWeights {
  std::vector<mlp_cuda::DeviceFloats> params, grads;
  ModelWeights(const ModelSpec& m, int device) {
    const ppsched::cuda::ScopedDevice on(device);
    for (int l = 0; l < m.layers; ++l) {
      params.emplace_back(device, m.params_per_layer());
      grads.emplace_back(device, m.params_per_layer());
      fill(params.back().data(), params.back().size(), 1.0f / std::sqrt(static_cast<float>(m.width)),
           0x9e3779b9u * static_cast<unsigned>(l + 1));
      PPSCHED_CUDA_CHECK(cudaMemset(grads.back().data(), 0, grads.back().size() * sizeof(float)));
    }
    PPSCHED_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

// One rank's stream-ordered pool (its high-water mark is the rank's measured peak) and the
// bytes its stages hold, counted as they are allocated and freed, in the rank's issue order.
class RankPool {
 public:
  explicit RankPool(int device) : device_(device) {
    const ppsched::cuda::ScopedDevice on(device);
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    PPSCHED_CUDA_CHECK(cudaMemPoolCreate(&pool_, &props));
    std::uint64_t keep = std::numeric_limits<std::uint64_t>::max();  // never hand memory back mid-run
    PPSCHED_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep));
  }
  ~RankPool() {
    const ppsched::cuda::ScopedDevice on(device_);
    PPSCHED_CUDA_LOG(cudaDeviceSynchronize());
    PPSCHED_CUDA_LOG(cudaMemPoolDestroy(pool_));
  }
  RankPool(const RankPool&) = delete;
  RankPool& operator=(const RankPool&) = delete;

  float* allocate(std::size_t floats, cudaStream_t stream) {
    void* p = nullptr;
    PPSCHED_CUDA_CHECK(cudaMallocFromPoolAsync(&p, floats * sizeof(float), pool_, stream));
    live_ += floats * sizeof(float);
    counted_peak_ = std::max(counted_peak_, live_);
    return static_cast<float*>(p);
  }
  void release(float* p, std::size_t floats, cudaStream_t stream) {
    PPSCHED_CUDA_CHECK(cudaFreeAsync(p, stream));
    live_ -= floats * sizeof(float);
  }
  void reset_peaks() {
    std::uint64_t zero = 0;
    PPSCHED_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &zero));
    counted_peak_ = live_;
  }
  [[nodiscard]] double used_high() const {
    std::uint64_t v = 0;
    PPSCHED_CUDA_CHECK(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &v));
    return static_cast<double>(v);
  }
  [[nodiscard]] double counted_peak() const noexcept { return static_cast<double>(counted_peak_); }
  [[nodiscard]] std::size_t live() const noexcept { return live_; }

 private:
  int device_ = 0;
  cudaMemPool_t pool_{};
  std::size_t live_ = 0;
  std::size_t counted_peak_ = 0;
};

// What each rank's host thread uses: its pool and its cuBLAS handle.
struct RankTools {
  RankPool pool;
  cublasHandle_t blas = nullptr;
  explicit RankTools(int device) : pool(device) {
    const ppsched::cuda::ScopedDevice on(device);
    ACCURACY_CUBLAS_CHECK(cublasCreate(&blas));
  }
  ~RankTools() {
    if (blas != nullptr) (void)cublasDestroy(blas);
  }
  RankTools(const RankTools&) = delete;
  RankTools& operator=(const RankTools&) = delete;
};

// Layers [first, last) of a model as one stage, for micro-batches of `rows` rows. Its callables
// take device spans and enqueue on the stream they are given (launch_stream() under the
// executor); forward() etc. are also called directly, with device pointers, by the profiling.
class GpuStage {
 public:
  GpuStage(const ModelSpec& spec, ModelWeights& weights, std::size_t first, std::size_t last, int rows,
           std::int32_t microbatches, RankTools& tools, int device)
      : spec_(spec), weights_(weights), first_(first), last_(last), rows_(rows), tools_(tools),
        saved_(static_cast<std::size_t>(microbatches), nullptr), kept_(static_cast<std::size_t>(microbatches), nullptr),
        z_(device, per_layer()), dz_(device, per_layer()), dx_(device, per_layer()) {}

  [[nodiscard]] std::size_t per_layer() const { return static_cast<std::size_t>(rows_) * static_cast<std::size_t>(spec_.width); }
  [[nodiscard]] std::size_t per_microbatch() const { return (last_ - first_) * per_layer(); }

  [[nodiscard]] ppsched::StageFunctions functions(bool last_stage, float loss_scale) {
    ppsched::StageFunctions f;
    f.input_size = f.output_size = per_layer();
    f.target_size = last_stage ? f.output_size : 0;
    f.weight_grad_size = 0;  // accumulated here
    f.forward = [this](std::int32_t mb, std::span<const float> in, std::span<float> out) {
      forward(mb, in.data(), out.data(), stream());
    };
    f.backward = [this](std::int32_t mb, std::span<const float> in, std::span<const float> grad_out, std::span<float> grad_in,
                        std::span<float>) { backward(mb, in.data(), grad_out.data(), grad_in.empty() ? nullptr : grad_in.data(), stream()); };
    f.backward_input = [this](std::int32_t mb, std::span<const float>, std::span<const float> grad_out, std::span<float> grad_in) {
      backward_input(mb, grad_out.data(), grad_in.empty() ? nullptr : grad_in.data(), stream());
    };
    f.backward_weight = [this](std::int32_t mb, std::span<const float> in, std::span<const float>, std::span<float>) {
      backward_weight(mb, in.data(), stream());
    };
    if (last_stage) {
      f.loss = [loss_scale](std::int32_t, std::span<const float> out, std::span<const float> target, std::span<float> grad_out) {
        const int n = static_cast<int>(out.size());
        loss_gradient<<<mlp_cuda::blocks_for(out.size()), 128, 0, stream()>>>(out.data(), target.data(), loss_scale,
                                                                              grad_out.data(), n);
        return 0.0f;
      };
    }
    return f;
  }

  void forward(std::int32_t mb, const float* in, float* out, cudaStream_t s) {
    float* a = tools_.pool.allocate(per_microbatch(), s);
    saved_.at(static_cast<std::size_t>(mb)) = a;
    const float* x = in;
    for (std::size_t l = 0; l < last_ - first_; ++l) {
      linear(l, x, z_.data(), s);
      mlp_cuda::tanh_forward<<<mlp_cuda::blocks_for(per_layer()), 128, 0, s>>>(z_.data(), a + l * per_layer(),
                                                                                static_cast<int>(per_layer()));
      x = a + l * per_layer();
    }
    PPSCHED_CUDA_CHECK(cudaMemcpyAsync(out, x, per_layer() * sizeof(float), cudaMemcpyDeviceToDevice, s));
  }

  // The full backward: gradients through a scratch, what F kept freed at the end.
  void backward(std::int32_t mb, const float* in, const float* grad_out, float* grad_in, cudaStream_t s) {
    float* a = saved_.at(static_cast<std::size_t>(mb));
    const float* g = grad_out;
    for (std::size_t l = last_ - first_; l-- > 0;) {
      mlp_cuda::tanh_backward<<<mlp_cuda::blocks_for(per_layer()), 128, 0, s>>>(a + l * per_layer(), g, dz_.data(),
                                                                                 static_cast<int>(per_layer()));
      weight_gradient(l, l == 0 ? in : a + (l - 1) * per_layer(), dz_.data(), s);
      if (l == 0 && grad_in == nullptr) break;
      float* dx = l > 0 ? dx_.data() : grad_in;
      input_gradient(l, dz_.data(), dx, s);
      g = dx;
    }
    tools_.pool.release(a, per_microbatch(), s);
    saved_.at(static_cast<std::size_t>(mb)) = nullptr;
  }

  // BI: the pre-activation gradients, kept for BW, and the input gradient.
  void backward_input(std::int32_t mb, const float* grad_out, float* grad_in, cudaStream_t s) {
    float* a = saved_.at(static_cast<std::size_t>(mb));
    float* k = tools_.pool.allocate(per_microbatch(), s);
    kept_.at(static_cast<std::size_t>(mb)) = k;
    const float* g = grad_out;
    for (std::size_t l = last_ - first_; l-- > 0;) {
      mlp_cuda::tanh_backward<<<mlp_cuda::blocks_for(per_layer()), 128, 0, s>>>(a + l * per_layer(), g, k + l * per_layer(),
                                                                                 static_cast<int>(per_layer()));
      if (l == 0 && grad_in == nullptr) break;
      float* dx = l > 0 ? dx_.data() : grad_in;
      input_gradient(l, k + l * per_layer(), dx, s);
      g = dx;
    }
  }

  // BW: the weight gradients from what F and BI kept, then both freed.
  void backward_weight(std::int32_t mb, const float* in, cudaStream_t s) {
    float* a = saved_.at(static_cast<std::size_t>(mb));
    float* k = kept_.at(static_cast<std::size_t>(mb));
    for (std::size_t l = 0; l < last_ - first_; ++l) {
      weight_gradient(l, l == 0 ? in : a + (l - 1) * per_layer(), k + l * per_layer(), s);
    }
    tools_.pool.release(k, per_microbatch(), s);
    tools_.pool.release(a, per_microbatch(), s);
    saved_.at(static_cast<std::size_t>(mb)) = kept_.at(static_cast<std::size_t>(mb)) = nullptr;
  }

 private:
  static cudaStream_t stream() { return ppsched::cuda::launch_stream().handle(); }

  [[nodiscard]] const float* params(std::size_t l) const { return weights_.params[first_ + l].data(); }
  [[nodiscard]] float* grads(std::size_t l) const { return weights_.grads[first_ + l].data(); }

  // z = x W^T (+ b)
  void linear(std::size_t l, const float* x, float* z, cudaStream_t s) {
    const int w = spec_.width;
    if (spec_.kind == Kind::mlp) {
      mlp_cuda::linear_forward<<<mlp_cuda::blocks_for(per_layer()), 128, 0, s>>>(x, params(l), z, rows_, w, w);
      return;
    }
    // Row-major x (rows x w) and W (w x w) are column-major x^T and W^T: z^T = W x^T.
    const float one = 1.0f, zero = 0.0f;
    ACCURACY_CUBLAS_CHECK(cublasSetStream(tools_.blas, s));
    ACCURACY_CUBLAS_CHECK(cublasSgemm(tools_.blas, CUBLAS_OP_T, CUBLAS_OP_N, w, rows_, w, &one, params(l), w, x, w, &zero, z, w));
  }
  // dx = dz W
  void input_gradient(std::size_t l, const float* dz, float* dx, cudaStream_t s) {
    const int w = spec_.width;
    if (spec_.kind == Kind::mlp) {
      mlp_cuda::linear_backward_input<<<mlp_cuda::blocks_for(per_layer()), 128, 0, s>>>(dz, params(l), dx, rows_, w, w);
      return;
    }
    const float one = 1.0f, zero = 0.0f;
    ACCURACY_CUBLAS_CHECK(cublasSetStream(tools_.blas, s));
    ACCURACY_CUBLAS_CHECK(cublasSgemm(tools_.blas, CUBLAS_OP_N, CUBLAS_OP_N, w, rows_, w, &one, params(l), w, dz, w, &zero, dx, w));
  }
  // grad += dz^T x (and the bias's column sums)
  void weight_gradient(std::size_t l, const float* x, const float* dz, cudaStream_t s) {
    const int w = spec_.width;
    if (spec_.kind == Kind::mlp) {
      linear_backward_weight_add<<<mlp_cuda::blocks_for(spec_.params_per_layer()), 128, 0, s>>>(x, dz, grads(l), rows_, w, w);
      return;
    }
    const float one = 1.0f;
    ACCURACY_CUBLAS_CHECK(cublasSetStream(tools_.blas, s));
    ACCURACY_CUBLAS_CHECK(cublasSgemm(tools_.blas, CUBLAS_OP_N, CUBLAS_OP_T, w, w, rows_, &one, x, w, dz, w, &one, grads(l), w));
  }

  const ModelSpec& spec_;
  ModelWeights& weights_;
  std::size_t first_, last_;
  int rows_;
  RankTools& tools_;
  std::vector<float*> saved_;  // per micro-batch: the tanh outputs, [layer][rows x width]
  std::vector<float*> kept_;   // per micro-batch: the pre-activation gradients, BI to BW
  mlp_cuda::DeviceFloats z_, dz_, dx_;
};

// ---------------------------------------------------------------- on a rank's host thread

// Runs `f` as a task of `backend` on `stream`: launch_stream() is that stream inside.
template <class F>
void on_rank(ppsched::CudaBackend& backend, ppsched::CudaBackend::stream& stream, F&& f) {
  auto body = [&] { f(); };
  backend.launch(stream, ppsched::host_task(body, "bench_accuracy_cuda"), {});
}

// ---------------------------------------------------------------- profiling

// One layer as profile_stages sees it: the callables ignore the host spans profile_stages gives
// and run on device buffers of their own; around_call waits for the stream, so the host clock
// around each call covers the GPU's work.
struct ProfiledLayer {
  std::unique_ptr<GpuStage> stage;
  mlp_cuda::DeviceFloats in, out, grad_out, grad_in;
};

void synchronize_after(const ppsched::StageContext&, ppsched::StageCallRef call) {
  call();
  PPSCHED_CUDA_CHECK(cudaStreamSynchronize(ppsched::cuda::launch_stream().handle()));
}

ppsched::profiling::StageFactory layer_factory(const ModelSpec& spec, ModelWeights& weights, RankTools& tools, int device,
                                               std::vector<std::unique_ptr<ProfiledLayer>>& keep) {
  return [&spec, &weights, &tools, device, &keep](std::int32_t rows) {
    std::vector<ppsched::StageFunctions> out;
    for (int l = 0; l < spec.layers; ++l) {
      auto p = std::make_unique<ProfiledLayer>();
      const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(spec.width);
      p->stage = std::make_unique<GpuStage>(spec, weights, static_cast<std::size_t>(l), static_cast<std::size_t>(l) + 1, rows, 1,
                                            tools, device);
      p->in = mlp_cuda::DeviceFloats(device, n);
      p->out = mlp_cuda::DeviceFloats(device, n);
      p->grad_out = mlp_cuda::DeviceFloats(device, n);
      p->grad_in = mlp_cuda::DeviceFloats(device, n);
      fill(p->in.data(), n, 0.5f, 11u);
      fill(p->grad_out.data(), n, 0.01f, 13u);
      ProfiledLayer* q = p.get();
      ppsched::StageFunctions f;
      f.input_size = f.output_size = n;
      f.forward = [q](std::int32_t mb, std::span<const float>, std::span<float>) {
        q->stage->forward(mb, q->in.data(), q->out.data(), ppsched::cuda::launch_stream().handle());
      };
      // Layer 0 gets no input-gradient span (profile_stages' stage 0), as the pipeline's first stage.
      f.backward = [q](std::int32_t mb, std::span<const float>, std::span<const float>, std::span<float> gin, std::span<float>) {
        q->stage->backward(mb, q->in.data(), q->grad_out.data(), gin.empty() ? nullptr : q->grad_in.data(),
                           ppsched::cuda::launch_stream().handle());
      };
      f.backward_input = [q](std::int32_t mb, std::span<const float>, std::span<const float>, std::span<float> gin) {
        q->stage->backward_input(mb, q->grad_out.data(), gin.empty() ? nullptr : q->grad_in.data(),
                                 ppsched::cuda::launch_stream().handle());
      };
      f.backward_weight = [q](std::int32_t mb, std::span<const float>, std::span<const float>, std::span<float>) {
        q->stage->backward_weight(mb, q->in.data(), ppsched::cuda::launch_stream().handle());
      };
      f.around_call = synchronize_after;
      out.push_back(std::move(f));
      keep.push_back(std::move(p));
    }
    PPSCHED_CUDA_CHECK(cudaDeviceSynchronize());
    return out;
  };
}

// What timing one call costs by itself: a call that launches one empty kernel, profiled the
// same way (launch, the GPU's start, the synchronisation); per kind of call, in ms.
struct TimingCost {
  double forward = 0.0, backward_input = 0.0, backward_weight = 0.0, backward = 0.0;
};

TimingCost measure_timing_cost() {
  const ppsched::profiling::StageFactory empty = [](std::int32_t) {
    std::vector<ppsched::StageFunctions> out;
    for (int l = 0; l < 4; ++l) {
      ppsched::StageFunctions f;
      f.input_size = f.output_size = 1;
      const auto launch = [] { empty_kernel<<<1, 1, 0, ppsched::cuda::launch_stream().handle()>>>(); };
      f.forward = [launch](std::int32_t, std::span<const float>, std::span<float>) { launch(); };
      f.backward = [launch](std::int32_t, std::span<const float>, std::span<const float>, std::span<float>, std::span<float>) { launch(); };
      f.backward_input = [launch](std::int32_t, std::span<const float>, std::span<const float>, std::span<float>) { launch(); };
      f.backward_weight = [launch](std::int32_t, std::span<const float>, std::span<const float>, std::span<float>) { launch(); };
      f.around_call = synchronize_after;
      out.push_back(std::move(f));
    }
    return out;
  };
  ppsched::profiling::ProfileOptions po;
  po.rows = {1};
  po.repetitions = 50;
  po.warmup = 5;
  const std::vector<ppsched::profiling::StageProfile> p = ppsched::profiling::profile_stages(empty, po);
  std::vector<double> f, bi, bw, b;
  for (const auto& s : p) {
    f.push_back(s.sizes.front().forward.median);
    bi.push_back(s.sizes.front().backward_input.median);
    bw.push_back(s.sizes.front().backward_weight.median);
    b.push_back(s.sizes.front().backward ? s.sizes.front().backward->median : 0.0);
  }
  return {accuracy::median(f), accuracy::median(bi), accuracy::median(bw), accuracy::median(b)};
}

void take_off(ppsched::profiling::TimeSpread& t, double cost) {
  for (double* v : {&t.median, &t.q1, &t.q3, &t.min, &t.max}) *v = std::max(0.0, *v - cost);
}

// A device-to-device copy's bandwidth, bytes per ms, for `bytes` at a time.
double copy_bandwidth(std::size_t bytes, int device) {
  const ppsched::cuda::ScopedDevice on(device);
  mlp_cuda::DeviceFloats a(device, bytes / sizeof(float)), b(device, bytes / sizeof(float));
  cudaEvent_t start{}, end{};
  PPSCHED_CUDA_CHECK(cudaEventCreate(&start));
  PPSCHED_CUDA_CHECK(cudaEventCreate(&end));
  for (int i = 0; i < 3; ++i) PPSCHED_CUDA_CHECK(cudaMemcpy(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice));
  constexpr int copies = 20;
  PPSCHED_CUDA_CHECK(cudaEventRecord(start));
  for (int i = 0; i < copies; ++i) PPSCHED_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice));
  PPSCHED_CUDA_CHECK(cudaEventRecord(end));
  PPSCHED_CUDA_CHECK(cudaEventSynchronize(end));
  float ms = 0.0f;
  PPSCHED_CUDA_CHECK(cudaEventElapsedTime(&ms, start, end));
  PPSCHED_CUDA_CHECK(cudaEventDestroy(start));
  PPSCHED_CUDA_CHECK(cudaEventDestroy(end));
  return ms > 0.0f ? static_cast<double>(bytes) * copies / static_cast<double>(ms) : std::numeric_limits<double>::infinity();
}

// ---------------------------------------------------------------- configurations

struct Config {
  const ModelSpec* model = nullptr;
  std::size_t model_index = 0;
  std::string family;
  std::int32_t ranks = 1;
  std::int32_t microbatches = 1;
  std::int32_t rows = 1;
  double predicted = 0.0;
  std::vector<double> predicted_bytes;               // per rank
  std::vector<double> measured_bytes, counted_bytes;  // per rank, the most over the measured steps
  std::vector<std::vector<double>> passes;           // ms per step, per pass
};

struct JsonOut {
  static std::string quote(const std::string& s) {
    std::string q = "\"";
    for (const char c : s) {
      if (c == '"' || c == '\\') q += '\\';
      if (c == '\n') {
        q += "\\n";
        continue;
      }
      q += c;
    }
    return q + "\"";
  }
  static std::string number(double v) {
    if (!std::isfinite(v)) return "null";
    std::ostringstream s;
    s << std::setprecision(6) << v;
    return s.str();
  }
  static std::string numbers(const std::vector<double>& v) {
    std::string s = "[";
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + number(v[i]);
    return s + "]";
  }
};

int usage(const char* why) {
  std::cerr << "bench_accuracy_cuda: " << why
            << "\nusage: bench_accuracy_cuda [--json FILE] [--repetitions N] [--passes N] [--max-seconds S] [--quick]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string json_path;
  int repetitions = 7;
  int passes = 2;
  double max_seconds = 100.0;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--json") {
      json_path = value();
    } else if (a == "--repetitions") {
      repetitions = std::atoi(value().c_str());
    } else if (a == "--passes") {
      passes = std::atoi(value().c_str());
    } else if (a == "--max-seconds") {
      max_seconds = std::atof(value().c_str());
    } else if (a == "--quick") {
      quick = true;
    } else {
      return usage(("unknown argument " + a).c_str());
    }
  }
  if (repetitions < 1 || passes < 1 || !(max_seconds > 0.0)) return usage("give at least 1 repetition, 1 pass and a time > 0");
  const ppsched::cuda::DeviceProbe probe = ppsched::cuda::probe_devices();
  if (!probe.usable()) {
    std::printf("SKIPPED: bench_accuracy_cuda needs a usable CUDA device: %s\n", probe.reason.c_str());
    return 77;
  }
  const auto start = Clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  constexpr int device = 0;  // every rank on one GPU, as the lease has it
  cudaDeviceProp props{};
  PPSCHED_CUDA_CHECK(cudaGetDeviceProperties(&props, device));
  PPSCHED_CUDA_CHECK(cudaSetDevice(device));

  // 1. The models. The MLP at two widths (global batch 128), the GEMM model (1024 rows).
  std::vector<ModelSpec> models{{"mlp-1024", Kind::mlp, 1024, 8, 128, {8, 16, 32}},
                                {"mlp-2048", Kind::mlp, 2048, 8, 64, {4, 8, 16}},
                                {"gemm-4096", Kind::gemm, 4096, 8, 1024, {64, 128, 256}}};
  if (quick) models.resize(2);

  // The ranks: 1 (the overheads' one-rank run), 2 and 4 sharing the GPU through device copies.
  const std::vector<int> one_device{device}, two_devices(2, device), four_devices(4, device);
  std::vector<ppsched::CudaBackend> single =
      ppsched::cuda::make_cuda_backends(one_device, {}, ppsched::cuda::CudaTransport::device_copy);
  std::vector<ppsched::CudaBackend> pair =
      ppsched::cuda::make_cuda_backends(two_devices, {}, ppsched::cuda::CudaTransport::device_copy);
  std::vector<ppsched::CudaBackend> four =
      ppsched::cuda::make_cuda_backends(four_devices, {}, ppsched::cuda::CudaTransport::device_copy);
  std::vector<std::unique_ptr<RankTools>> tools;
  for (int r = 0; r < 4; ++r) tools.push_back(std::make_unique<RankTools>(device));
  std::vector<ppsched::CudaBackend::stream> streams;
  for (int r = 0; r < 4; ++r) streams.push_back(four[static_cast<std::size_t>(r)].create_stream());
  std::vector<std::unique_ptr<ModelWeights>> weights;
  for (const ModelSpec& m : models) weights.push_back(std::make_unique<ModelWeights>(m, device));

  // 2. The backend's fixed costs, the cost of timing a call, the link.
  const ppsched::profiling::BackendOverheads overheads =
      ppsched::profiling::measure_backend_overheads<ppsched::CudaBackend>({&single[0]}, {&pair[0], &pair[1]});
  TimingCost timing;
  on_rank(four[0], streams[0], [&] { timing = measure_timing_cost(); });
  std::printf("GPU %s; fixed cost per step %.4f ms, per action %.4f ms, per transfer %.4f ms; timing a call costs "
              "F %.4f, BI %.4f, BW %.4f, B %.4f ms (taken off the profile)\n",
              props.name, overheads.fixed_costs.step, overheads.fixed_costs.action, overheads.fixed_costs.transfer, timing.forward,
              timing.backward_input, timing.backward_weight, timing.backward);

  // 3. Per model: the measured profile (every size), the link, the concurrent slowdown per size.
  std::vector<ppsched::Profile> profiles;
  std::vector<std::map<int, std::vector<double>>> slowdowns(models.size());
  for (std::size_t k = 0; k < models.size(); ++k) {
    const ModelSpec& m = models[k];
    std::vector<std::unique_ptr<ProfiledLayer>> keep;
    ppsched::profiling::ProfileOptions po;
    po.rows = m.rows;
    po.repetitions = 15;
    po.warmup = 3;
    std::vector<ppsched::profiling::StageProfile> stages;
    on_rank(four[0], streams[0],
            [&] { stages = ppsched::profiling::profile_stages(layer_factory(m, *weights[k], *tools[0], device, keep), po); });
    for (auto& s : stages) {
      for (auto& t : s.sizes) {
        take_off(t.forward, timing.forward);
        take_off(t.backward_input, timing.backward_input);
        take_off(t.backward_weight, timing.backward_weight);
        if (t.backward) take_off(*t.backward, timing.backward);
      }
    }
    keep.clear();
    ppsched::Profile profile = ppsched::profiling::measured_profile(stages, "ms", m.rows.back(), overheads);
    // What the profiler cannot see: each layer's F keeps its tanh output (rows x width floats),
    // which is its input's size here (every width equal), the bytes measured_profile set.
    profile.link = ppsched::Interconnect{0.0, copy_bandwidth(static_cast<std::size_t>(m.rows.back()) * m.width * sizeof(float), device)};
    profiles.push_back(std::move(profile));
    // The slowdown: one micro-batch of the whole model (F, BI, BW) per thread, each thread a
    // rank of its own (stream, pool, cuBLAS handle), at each size.
    for (const int rows : m.rows) {
      std::vector<std::unique_ptr<GpuStage>> whole;
      std::vector<mlp_cuda::DeviceFloats> buffers;  // per thread: input, output, grad_out
      const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(m.width);
      for (int t = 0; t < 4; ++t) {
        whole.push_back(std::make_unique<GpuStage>(m, *weights[k], 0, static_cast<std::size_t>(m.layers), rows, 1,
                                                   *tools[static_cast<std::size_t>(t)], device));
        for (int b = 0; b < 3; ++b) {
          buffers.emplace_back(device, n);
          fill(buffers.back().data(), n, 0.5f, 17u + static_cast<unsigned>(b));
        }
      }
      PPSCHED_CUDA_CHECK(cudaDeviceSynchronize());
      ppsched::profiling::SlowdownOptions so;
      so.ranks = 4;
      so.rounds = 3;
      const std::vector<double> s = ppsched::profiling::measure_concurrent_slowdown(
          [&](std::int32_t thread) {
            const auto t = static_cast<std::size_t>(thread);
            on_rank(four[t], streams[t], [&] {
              const cudaStream_t st = ppsched::cuda::launch_stream().handle();
              GpuStage& g = *whole[t];
              g.forward(0, buffers[3 * t].data(), buffers[3 * t + 1].data(), st);
              g.backward_input(0, buffers[3 * t + 2].data(), nullptr, st);
              g.backward_weight(0, buffers[3 * t].data(), st);
              PPSCHED_CUDA_CHECK(cudaStreamSynchronize(st));
            });
          },
          so);
      slowdowns[k][rows] = s;
      std::printf("%s at %d rows: ranks computing at once on the GPU run 1 / %.2f / %.2f / %.2fx slower (2 / 3 / 4 ranks)\n",
                  m.name.c_str(), rows, s[1], s[2], s[3]);
    }
  }
  std::printf("profiled in %.1f s\n", elapsed());

  // 4. The configurations: per model, for 2 and 4 ranks, families and micro-batch counts
  //    over the same global batch (the pick chooses among them).
  struct Shape {
    const char* family;
    std::int32_t ranks, microbatches;
  };
  const std::vector<Shape> shapes{{"gpipe", 2, 8},  {"1f1b", 2, 4},  {"1f1b", 2, 16}, {"zb-h1", 2, 8},
                                  {"zb-v", 2, 8},   {"gpipe", 4, 8}, {"1f1b", 4, 8},  {"1f1b", 4, 16},
                                  {"interleaved-1f1b", 4, 8},        {"zb-h1", 4, 16}};
  std::vector<Config> configs;
  for (std::size_t k = 0; k < models.size(); ++k) {
    for (const Shape& s : shapes) {
      Config c;
      c.model = &models[k];
      c.model_index = k;
      c.family = s.family;
      c.ranks = s.ranks;
      c.microbatches = s.microbatches;
      c.rows = models[k].batch / s.microbatches;
      configs.push_back(c);
    }
  }
  const auto schedule_of = [](const Config& c) {
    ppsched::ScheduleRequest request;
    request.ranks = c.ranks;
    request.microbatches = c.microbatches;
    request.chunks = ppsched::family_info(c.family).chunks_for(2);
    return ppsched::make_schedule(c.family, request);
  };
  const auto cost_of = [&](const Config& c, const ppsched::Schedule& schedule, ppsched::Partition& cut) {
    ppsched::Profile p = ppsched::profile_at_rows(profiles[c.model_index], c.rows);
    p.fixed_costs.concurrent_slowdown = slowdowns[c.model_index].at(c.rows);
    ppsched::plan::GraphModelOptions g;
    g.ranks = c.ranks;
    g.microbatches = c.microbatches;
    const ppsched::plan::PlanModel plan_model = ppsched::plan::graph_model(p, c.model->name, g);
    cut = plan_model.partition(schedule.placement);
    // What BI keeps for BW: the pre-activation gradients beside F's tanh outputs, 2 x M_B.
    return ppsched::plan::cost_model_of(cut, ppsched::plan::plan_cost_options(plan_model, 2.0));
  };
  for (Config& c : configs) {
    const ppsched::Schedule schedule = schedule_of(c);
    ppsched::Partition cut;
    const ppsched::CostModel cost = cost_of(c, schedule, cut);
    const ppsched::SimResult sim = ppsched::simulate(schedule, cost);
    c.predicted = sim.makespan;
    for (std::int32_t r = 0; r < c.ranks; ++r) {
      c.predicted_bytes.push_back(static_cast<std::size_t>(r) < sim.timed_peak.size() ? sim.timed_peak[static_cast<std::size_t>(r)].bytes : 0.0);
    }
    c.measured_bytes.assign(static_cast<std::size_t>(c.ranks), 0.0);
    c.counted_bytes.assign(static_cast<std::size_t>(c.ranks), 0.0);
  }

  // 5. The measured steps, passes interleaved over the configurations.
  int passes_run = 0;
  double pass_seconds = 0.0;
  for (int pass = 0; pass < passes; ++pass) {
    if (pass > 0 && elapsed() + pass_seconds > max_seconds) {
      std::printf("stopping after %d pass(es): another would pass %.0f s\n", pass, max_seconds);
      break;
    }
    const double pass_start = elapsed();
    for (Config& c : configs) {
      const ppsched::Schedule schedule = schedule_of(c);
      ppsched::Partition cut;
      const ppsched::CostModel cost = cost_of(c, schedule, cut);
      std::vector<std::unique_ptr<GpuStage>> stages;
      std::vector<ppsched::StageFunctions> functions;
      const float loss_scale = 1.0f / static_cast<float>(c.model->batch);
      for (std::size_t s = 0; s < cut.stages.size(); ++s) {
        const auto rank = static_cast<std::size_t>(schedule.rank_of(static_cast<std::int32_t>(s)));
        stages.push_back(std::make_unique<GpuStage>(*c.model, *weights[c.model_index], cut.stages[s].begin, cut.stages[s].end, c.rows,
                                                    c.microbatches, *tools[rank], device));
        functions.push_back(stages.back()->functions(s + 1 == cut.stages.size(), loss_scale));
      }
      std::vector<ppsched::CudaBackend*> ranks;
      for (std::int32_t r = 0; r < c.ranks; ++r) {
        ranks.push_back(c.ranks == 2 ? &pair[static_cast<std::size_t>(r)] : &four[static_cast<std::size_t>(r)]);
      }
      ppsched::World<ppsched::CudaBackend> world(ranks, schedule, cost, functions);
      const std::size_t floats = static_cast<std::size_t>(c.model->batch) * static_cast<std::size_t>(c.model->width);
      mlp_cuda::DeviceFloats inputs(device, floats), targets(device, floats);
      fill(inputs.data(), floats, 0.5f, 23u);
      fill(targets.data(), floats, 0.5f, 29u);
      PPSCHED_CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<double> steps;
      for (int r = -2; r < repetitions; ++r) {
        for (std::int32_t q = 0; q < c.ranks; ++q) tools[static_cast<std::size_t>(q)]->pool.reset_peaks();
        const auto t0 = Clock::now();
        (void)world.run_step({inputs.span(), targets.span()});
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (r < 0) continue;
        steps.push_back(ms);
        for (std::int32_t q = 0; q < c.ranks; ++q) {
          const auto i = static_cast<std::size_t>(q);
          c.measured_bytes[i] = std::max(c.measured_bytes[i], tools[i]->pool.used_high());
          c.counted_bytes[i] = std::max(c.counted_bytes[i], tools[i]->pool.counted_peak());
        }
      }
      c.passes.push_back(std::move(steps));
      for (std::int32_t q = 0; q < c.ranks; ++q) {
        if (tools[static_cast<std::size_t>(q)]->pool.live() != 0) {
          throw std::runtime_error("a step left stage memory allocated on rank " + std::to_string(q) + " (" + c.family + ")");
        }
      }
    }
    ++passes_run;
    pass_seconds = elapsed() - pass_start;
  }

  // 6. The report.
  std::printf("\n%-10s %-17s %2s %3s %4s  %9s %9s %7s %7s %6s %7s  %10s %10s %7s\n", "model", "family", "p", "m", "rows",
              "predicted", "measured", "min", "max", "noise", "error", "peak pred.", "peak meas.", "error");
  accuracy::Errors time_errors, memory_errors, counted_errors;
  std::vector<double> predicted, measured;
  double noise_sum = 0.0;
  std::vector<accuracy::Spread> spreads;
  for (const Config& c : configs) {
    const accuracy::Spread m = accuracy::spread_of(c.passes);
    spreads.push_back(m);
    noise_sum += m.noise;
    const double e = time_errors.add(c.predicted, m.median);
    predicted.push_back(c.predicted);
    measured.push_back(m.median);
    double worst_memory = 0.0, pred_max = 0.0, meas_max = 0.0;
    for (std::size_t r = 0; r < c.predicted_bytes.size(); ++r) {
      const double em = memory_errors.add(c.predicted_bytes[r], c.measured_bytes[r]);
      (void)counted_errors.add(c.predicted_bytes[r], c.counted_bytes[r]);
      if (std::abs(em) >= std::abs(worst_memory)) worst_memory = em;
      pred_max = std::max(pred_max, c.predicted_bytes[r]);
      meas_max = std::max(meas_max, c.measured_bytes[r]);
    }
    std::printf("%-10s %-17s %2d %3d %4d  %9.3f %9.3f %7.3f %7.3f %5.1f%% %+6.1f%%  %8.1fMi %8.1fMi %+6.1f%%\n",
                c.model->name.c_str(), c.family.c_str(), c.ranks, c.microbatches, c.rows, c.predicted, m.median, m.min, m.max,
                100.0 * m.noise, 100.0 * e, pred_max / 1048576.0, meas_max / 1048576.0, 100.0 * worst_memory);
  }
  const double tau = accuracy::kendall_tau(predicted, measured);
  // Within one model too: the ordering among configurations of similar step time.
  std::vector<double> model_tau;
  for (std::size_t k = 0; k < models.size(); ++k) {
    std::vector<double> x, y;
    for (std::size_t i = 0; i < configs.size(); ++i) {
      if (configs[i].model_index != k) continue;
      x.push_back(predicted[i]);
      y.push_back(measured[i]);
    }
    model_tau.push_back(accuracy::kendall_tau(x, y));
  }
  // The pick per (model, ranks): the configuration predicted fastest, against the fastest measured.
  struct Pick {
    std::string model;
    std::int32_t ranks = 0;
    std::size_t picked = 0, fastest = 0;
    double slower = 0.0;  // picked's measured over the fastest's, - 1
  };
  std::vector<Pick> picks;
  for (std::size_t k = 0; k < models.size(); ++k) {
    for (const std::int32_t p : {2, 4}) {
      Pick pick{models[k].name, p, configs.size(), configs.size(), 0.0};
      for (std::size_t i = 0; i < configs.size(); ++i) {
        if (configs[i].model_index != k || configs[i].ranks != p) continue;
        if (pick.picked == configs.size() || predicted[i] < predicted[pick.picked]) pick.picked = i;
        if (pick.fastest == configs.size() || measured[i] < measured[pick.fastest]) pick.fastest = i;
      }
      if (pick.picked == configs.size()) continue;
      pick.slower = measured[pick.picked] / measured[pick.fastest] - 1.0;
      picks.push_back(pick);
    }
  }
  bool picks_hold = true;
  const auto label = [&](std::size_t i) {
    std::ostringstream o;
    o << configs[i].family << " m=" << configs[i].microbatches;
    return o.str();
  };
  for (const Pick& p : picks) {
    const bool holds = p.slower <= goal_pick;
    picks_hold = picks_hold && holds;
    std::printf("pick %-10s p=%d: predicted fastest %s (measured %.3f ms), measured fastest %s (%.3f ms): %+.1f%% %s\n",
                p.model.c_str(), p.ranks, label(p.picked).c_str(), measured[p.picked], label(p.fastest).c_str(),
                measured[p.fastest], 100.0 * p.slower, holds ? "holds" : "MISSES");
  }
  const double n = static_cast<double>(configs.size());
  std::string per_model_tau;
  for (std::size_t k = 0; k < models.size(); ++k) {
    std::ostringstream t;
    t << ' ' << models[k].name << ' ' << std::fixed << std::setprecision(3) << model_tau[k];
    per_model_tau += t.str();
  }
  const bool time_ok = time_errors.mean() <= goal_mean_error && time_errors.max <= goal_max_error;
  const bool memory_ok = memory_errors.mean() <= goal_mean_error && memory_errors.max <= goal_max_error;
  const bool tau_ok = tau >= goal_tau;
  std::printf("%zu configurations, %d pass(es) of %d steps: mean noise floor %.1f%%\n"
              "  step time:   mean |error| %.1f%%, max %.1f%%, Kendall's tau %.3f (per model:%s)\n"
              "  peak memory: mean |error| %.1f%%, max %.1f%% (pool high-water mark); %.1f%%, %.1f%% against the bytes "
              "held in issue order\n"
              "  goals: time %s, memory %s, tau %s, pick %s; %.1f s in all\n",
              configs.size(), passes_run, repetitions, 100.0 * noise_sum / n, 100.0 * time_errors.mean(),
              100.0 * time_errors.max, tau, per_model_tau.c_str(), 100.0 * memory_errors.mean(), 100.0 * memory_errors.max,
              100.0 * counted_errors.mean(), 100.0 * counted_errors.max, time_ok ? "met" : "MISSED",
              memory_ok ? "met" : "MISSED", tau_ok ? "met" : "MISSED", picks_hold ? "holds" : "MISSED", elapsed());

  if (!json_path.empty()) {
    using J = JsonOut;
    std::ostringstream o;
    o << "{\n  \"program\": \"bench_accuracy_cuda\",\n  \"gpu\": " << J::quote(props.name)
      << ",\n  \"repetitions\": " << repetitions << ",\n  \"passes\": " << passes_run
      << ",\n  \"seconds\": " << J::number(elapsed()) << ",\n  \"unit\": \"ms\",\n  \"overheads_ms\": {\"step\": "
      << J::number(overheads.fixed_costs.step) << ", \"action\": " << J::number(overheads.fixed_costs.action)
      << ", \"transfer\": " << J::number(overheads.fixed_costs.transfer) << "},\n  \"timing_cost_ms\": {\"forward\": "
      << J::number(timing.forward) << ", \"backward_input\": " << J::number(timing.backward_input)
      << ", \"backward_weight\": " << J::number(timing.backward_weight) << ", \"backward\": " << J::number(timing.backward)
      << "},\n  \"models\": [";
    for (std::size_t k = 0; k < models.size(); ++k) {
      const ModelSpec& m = models[k];
      o << (k ? "," : "") << "\n    {\"name\": " << J::quote(m.name) << ", \"kind\": " << J::quote(m.kind == Kind::mlp ? "mlp" : "gemm")
        << ", \"width\": " << m.width << ", \"layers\": " << m.layers << ", \"batch\": " << m.batch
        << ", \"link_bytes_per_ms\": " << J::number(profiles[k].link.bandwidth) << ", \"concurrent_slowdown\": {";
      bool first = true;
      for (const auto& [rows, s] : slowdowns[k]) {
        o << (first ? "" : ", ") << "\"" << rows << "\": " << J::numbers(s);
        first = false;
      }
      o << "}}";
    }
    o << "\n  ],\n  \"configurations\": [";
    for (std::size_t i = 0; i < configs.size(); ++i) {
      const Config& c = configs[i];
      const accuracy::Spread& m = spreads[i];
      o << (i ? "," : "") << "\n    {\"model\": " << J::quote(c.model->name) << ", \"family\": " << J::quote(c.family)
        << ", \"ranks\": " << c.ranks << ", \"microbatches\": " << c.microbatches << ", \"rows\": " << c.rows
        << ", \"predicted_ms\": " << J::number(c.predicted) << ", \"measured_ms\": " << J::number(m.median)
        << ", \"min_ms\": " << J::number(m.min) << ", \"max_ms\": " << J::number(m.max) << ", \"noise\": " << J::number(m.noise)
        << ", \"error\": " << J::number((c.predicted - m.median) / m.median)
        << ", \"predicted_peak_bytes\": " << J::numbers(c.predicted_bytes)
        << ", \"measured_peak_bytes\": " << J::numbers(c.measured_bytes)
        << ", \"counted_peak_bytes\": " << J::numbers(c.counted_bytes) << "}";
    }
    o << "\n  ],\n  \"picks\": [";
    for (std::size_t i = 0; i < picks.size(); ++i) {
      const Pick& p = picks[i];
      o << (i ? "," : "") << "\n    {\"model\": " << J::quote(p.model) << ", \"ranks\": " << p.ranks
        << ", \"picked\": " << J::quote(label(p.picked)) << ", \"picked_measured_ms\": " << J::number(measured[p.picked])
        << ", \"fastest\": " << J::quote(label(p.fastest)) << ", \"fastest_measured_ms\": " << J::number(measured[p.fastest])
        << ", \"slower\": " << J::number(p.slower) << ", \"holds\": " << (p.slower <= goal_pick ? "true" : "false") << "}";
    }
    o << "\n  ],\n  \"time\": {\"mean_abs_error\": " << J::number(time_errors.mean()) << ", \"max_abs_error\": "
      << J::number(time_errors.max) << ", \"kendall_tau\": " << J::number(tau) << ", \"kendall_tau_per_model\": "
      << J::numbers(model_tau) << ", \"mean_noise\": " << J::number(noise_sum / n)
      << "},\n  \"memory\": {\"mean_abs_error\": " << J::number(memory_errors.mean()) << ", \"max_abs_error\": "
      << J::number(memory_errors.max) << ", \"counted_mean_abs_error\": " << J::number(counted_errors.mean())
      << ", \"counted_max_abs_error\": " << J::number(counted_errors.max) << "},\n  \"pick_holds\": "
      << (picks_hold ? "true" : "false") << ",\n  \"goals\": {\"mean_abs_error\": " << goal_mean_error
      << ", \"max_abs_error\": " << goal_max_error << ", \"kendall_tau\": " << goal_tau << ", \"pick_within\": " << goal_pick
      << "}\n}\n";
    std::ofstream file(json_path);
    file << o.str();
    if (!file) throw std::runtime_error("could not write " + json_path);
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "bench_accuracy_cuda: " << e.what() << '\n';
  return 1;
}
