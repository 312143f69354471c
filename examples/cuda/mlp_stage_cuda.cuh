// The MLP of examples/mlp/mlp.hpp as pipeline stages on GPUs: the same layers (Linear then
// tanh), the same parameter layout (W, out x in, then b) and the same loss, computed by small
// CUDA kernels that follow the CPU loops' order of summation. `CudaMlpStage` is the GPU
// twin of mlp::MlpStage: layers [first, last) of a model as one ppsched stage, with its
// parameters, the activations each micro-batch's backward needs, and the pre-activation
// gradients kept between backward_input and backward_weight, all in device memory on the
// stage's GPU. ppsched hands the callables device spans and runs them with the rank's device
// current; each enqueues its kernels on ppsched::cuda::launch_stream().
//
// Results are the CPU model's bit for bit: every product and sum is written with __fmul_rn /
// __fadd_rn, which nvcc never contracts into a fused multiply-add (it would otherwise, and
// round once where the CPU rounds twice), and tanh is mlp::tanh_rational, built from
// correctly rounded operations on both sides, where CUDA's tanhf and the host's std::tanh
// differ in the last bits.
//
// Include it from one .cu file per program: its kernels are plain __global__ functions.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <ppsched/backend/cuda.hpp>
#include <ppsched/runtime/stage.hpp>
#include <span>
#include <utility>
#include <vector>

#include "../mlp/mlp.hpp"

namespace mlp_cuda {

// ---------------------------------------------------------------- kernels (one thread per output)

// z = x W^T + b, the sum starting from the bias as mlp::Linear::forward does.
__global__ void linear_forward(const float* x, const float* params, float* z, int rows, int in, int out) {
  const int k = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (k >= rows * out) return;
  const int r = k / out;
  const int o = k % out;
  float acc = params[out * in + o];
  for (int i = 0; i < in; ++i) acc = __fadd_rn(acc, __fmul_rn(x[r * in + i], params[o * in + i]));
  z[k] = acc;
}

__global__ void tanh_forward(const float* z, float* y, int n) {
  const int k = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (k < n) y[k] = mlp::tanh_rational(z[k]);
}

// dz = dy (1 - y^2)
__global__ void tanh_backward(const float* y, const float* dy, float* dz, int n) {
  const int k = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (k < n) dz[k] = __fmul_rn(dy[k], __fsub_rn(1.0f, __fmul_rn(y[k], y[k])));
}

// dx = dz W
__global__ void linear_backward_input(const float* dz, const float* params, float* dx, int rows, int in, int out) {
  const int k = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (k >= rows * in) return;
  const int r = k / in;
  const int i = k % in;
  float acc = 0.0f;
  for (int o = 0; o < out; ++o) acc = __fadd_rn(acc, __fmul_rn(dz[r * out + o], params[o * in + i]));
  dx[k] = acc;
}

// grad = [dz^T x, column sums of dz], overwritten.
__global__ void linear_backward_weight(const float* x, const float* dz, float* grad, int rows, int in, int out) {
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
  grad[k] = acc;
}

// scale * sum((y - t)^2) / 2 into *loss, and dy = scale (y - t): one thread, in order.
__global__ void mean_squared_error(const float* y, const float* t, float scale, float* dy, float* loss, int n) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float d = __fsub_rn(y[i], t[i]);
    sum = __fadd_rn(sum, __fmul_rn(d, d));
    dy[i] = __fmul_rn(scale, d);
  }
  *loss = __fmul_rn(__fmul_rn(0.5f, scale), sum);
}

__global__ void sgd(float* params, const float* grad, float learning_rate, int n) {
  const int k = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (k < n) params[k] = __fsub_rn(params[k], __fmul_rn(learning_rate, grad[k]));
}

[[nodiscard]] inline unsigned blocks_for(std::size_t n) { return static_cast<unsigned>((n + 127) / 128); }

// ---------------------------------------------------------------- device memory

// `count` floats on `device`, freed there. Synchronous allocation: stages are built once.
class DeviceFloats {
 public:
  DeviceFloats() = default;
  DeviceFloats(int device, std::size_t count) : device_(device), count_(count) {
    if (count_ == 0) return;
    const ppsched::cuda::ScopedDevice on(device_);
    PPSCHED_CUDA_CHECK(cudaMalloc(&data_, count_ * sizeof(float)));
  }
  ~DeviceFloats() {
    if (data_ == nullptr) return;
    const ppsched::cuda::ScopedDevice on(device_);
    PPSCHED_CUDA_LOG(cudaFree(data_));
  }
  DeviceFloats(DeviceFloats&& other) noexcept
      : device_(other.device_), count_(std::exchange(other.count_, 0)), data_(std::exchange(other.data_, nullptr)) {}
  DeviceFloats& operator=(DeviceFloats&& other) noexcept {
    std::swap(device_, other.device_);
    std::swap(count_, other.count_);
    std::swap(data_, other.data_);
    return *this;
  }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;

  [[nodiscard]] float* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  [[nodiscard]] std::span<float> span() const noexcept { return {data_, count_}; }

  void upload(std::span<const float> from) {
    const ppsched::cuda::ScopedDevice on(device_);
    PPSCHED_CUDA_CHECK(
        cudaMemcpy(data_, from.data(), std::min(from.size(), count_) * sizeof(float), cudaMemcpyHostToDevice));
  }
  [[nodiscard]] std::vector<float> download() const {
    std::vector<float> host(count_);
    const ppsched::cuda::ScopedDevice on(device_);
    if (count_ != 0) PPSCHED_CUDA_CHECK(cudaMemcpy(host.data(), data_, count_ * sizeof(float), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  int device_ = 0;
  std::size_t count_ = 0;
  float* data_ = nullptr;
};

// ---------------------------------------------------------------- the stage

class CudaMlpStage {
 public:
  // Layers [first, last) of `model`, copied to `device`, for `microbatches` micro-batches of
  // `rows` rows each.
  CudaMlpStage(const mlp::Mlp& model, std::size_t first, std::size_t last, std::size_t rows, std::int32_t microbatches,
               int device)
      : first_(first), last_(last), rows_(rows), device_(device) {
    std::size_t widest = 0;
    std::size_t activations = 0;
    std::vector<float> initial;
    for (std::size_t l = first; l < last; ++l) {
      const mlp::Linear& layer = model.layers[l];
      shapes_.push_back({static_cast<int>(layer.in()), static_cast<int>(layer.out())});
      parameter_offsets_.push_back(initial.size());
      initial.insert(initial.end(), layer.parameters().begin(), layer.parameters().end());
      activation_offsets_.push_back(activations);
      activations += rows * layer.out();
      widest = std::max({widest, layer.in(), layer.out()});
    }
    per_microbatch_ = activations;
    const auto m = static_cast<std::size_t>(microbatches);
    params_ = DeviceFloats(device, initial.size());
    params_.upload(initial);
    last_gradient_ = DeviceFloats(device, initial.size());
    outputs_ = DeviceFloats(device, m * activations);
    grads_ = DeviceFloats(device, m * activations);
    scratch_ = DeviceFloats(device, rows * widest);
    losses_ = DeviceFloats(device, m);
  }

  // The stage as ppsched sees it; the loss on the last stage, as mlp::MlpStage has it.
  [[nodiscard]] ppsched::StageFunctions functions(bool last_stage, float loss_scale, float learning_rate) {
    ppsched::StageFunctions f;
    f.input_size = rows_ * static_cast<std::size_t>(shapes_.front().in);
    f.output_size = rows_ * static_cast<std::size_t>(shapes_.back().out);
    f.target_size = last_stage ? f.output_size : 0;
    f.weight_grad_size = params_.size();
    f.forward = [this](std::int32_t mb, std::span<const float> in, std::span<float> out) { forward(mb, in, out); };
    f.backward_input = [this](std::int32_t mb, std::span<const float>, std::span<const float> grad_out,
                              std::span<float> grad_in) { backward_input(mb, grad_out, grad_in); };
    f.backward_weight = [this](std::int32_t mb, std::span<const float> in, std::span<const float>,
                               std::span<float> weight_grad) { backward_weight(mb, in, weight_grad); };
    if (last_stage) {
      f.loss = [this, loss_scale](std::int32_t mb, std::span<const float> out, std::span<const float> target,
                                  std::span<float> grad_out) { return loss(mb, out, target, loss_scale, grad_out); };
    }
    f.optimizer_step = [this, learning_rate](std::span<const float> total) { optimizer_step(total, learning_rate); };
    return f;
  }

  // Offload (docs/runtime.md, "Recomputation and offload"): a micro-batch's saved tanh
  // outputs go to the executor's pinned host buffer on the copy stream and come back before
  // its backward. After the copy out they are overwritten with NaN, so that a backward that
  // ran without its RELOAD would give NaN rather than pass unseen. Recomputation needs
  // nothing here: the executor's default recompute runs `forward` again.
  void add_memory_actions(ppsched::StageFunctions& f) {
    f.offload_size = per_microbatch_;
    f.offload = [this](std::int32_t mb, std::span<float> host) {
      const cudaStream_t stream = ppsched::cuda::launch_stream().handle();
      PPSCHED_CUDA_CHECK(cudaMemcpyAsync(host.data(), output(mb, 0), host.size_bytes(), cudaMemcpyDeviceToHost, stream));
      PPSCHED_CUDA_CHECK(cudaMemsetAsync(output(mb, 0), 0xFF, host.size_bytes(), stream));  // NaN
    };
    f.reload = [this](std::int32_t mb, std::span<const float> host) {
      const cudaStream_t stream = ppsched::cuda::launch_stream().handle();
      PPSCHED_CUDA_CHECK(cudaMemcpyAsync(output(mb, 0), host.data(), host.size_bytes(), cudaMemcpyHostToDevice, stream));
    };
  }

  // After a step (the World has synchronised): the parameters, and the gradient the step's
  // optimizer applied, both in mlp::Linear's layout, layer after layer.
  [[nodiscard]] std::vector<float> parameters() const { return params_.download(); }
  [[nodiscard]] std::vector<float> last_gradient() const { return last_gradient_.download(); }

 private:
  struct Shape {
    int in = 0;
    int out = 0;
  };

  std::size_t first_;
  std::size_t last_;
  std::size_t rows_;
  int device_;
  std::vector<Shape> shapes_;                    // per layer of the stage
  std::vector<std::size_t> parameter_offsets_;   // per layer, into params_
  std::vector<std::size_t> activation_offsets_;  // per layer, into one micro-batch's activations
  std::size_t per_microbatch_ = 0;
  DeviceFloats params_;
  DeviceFloats last_gradient_;
  DeviceFloats outputs_;  // [mb][layer]: tanh output
  DeviceFloats grads_;    // [mb][layer]: pre-activation gradient
  DeviceFloats scratch_;  // one layer's pre-activation or input gradient
  DeviceFloats losses_;   // [mb]

  [[nodiscard]] int rows() const noexcept { return static_cast<int>(rows_); }
  [[nodiscard]] float* output(std::int32_t mb, std::size_t l) const {
    return outputs_.data() + static_cast<std::size_t>(mb) * per_microbatch_ + activation_offsets_[l];
  }
  [[nodiscard]] float* grad(std::int32_t mb, std::size_t l) const {
    return grads_.data() + static_cast<std::size_t>(mb) * per_microbatch_ + activation_offsets_[l];
  }
  [[nodiscard]] const float* layer_params(std::size_t l) const { return params_.data() + parameter_offsets_[l]; }

  void forward(std::int32_t mb, std::span<const float> in, std::span<float> out) {
    const cudaStream_t stream = ppsched::cuda::launch_stream().handle();
    const float* x = in.data();
    for (std::size_t l = 0; l < shapes_.size(); ++l) {
      const Shape s = shapes_[l];
      const int n = rows() * s.out;
      linear_forward<<<blocks_for(static_cast<std::size_t>(n)), 128, 0, stream>>>(x, layer_params(l), scratch_.data(),
                                                                                  rows(), s.in, s.out);
      tanh_forward<<<blocks_for(static_cast<std::size_t>(n)), 128, 0, stream>>>(scratch_.data(), output(mb, l), n);
      x = output(mb, l);
    }
    PPSCHED_CUDA_CHECK(cudaMemcpyAsync(out.data(), x, out.size_bytes(), cudaMemcpyDeviceToDevice, stream));
  }

  void backward_input(std::int32_t mb, std::span<const float> grad_out, std::span<float> grad_in) {
    const cudaStream_t stream = ppsched::cuda::launch_stream().handle();
    const float* g = grad_out.data();
    for (std::size_t l = shapes_.size(); l-- > 0;) {
      const Shape s = shapes_[l];
      const int n = rows() * s.out;
      tanh_backward<<<blocks_for(static_cast<std::size_t>(n)), 128, 0, stream>>>(output(mb, l), g, grad(mb, l), n);
      if (l == 0 && grad_in.empty()) continue;  // stage 0 has no input gradient to send
      float* dx = l > 0 ? scratch_.data() : grad_in.data();
      const int m = rows() * s.in;
      linear_backward_input<<<blocks_for(static_cast<std::size_t>(m)), 128, 0, stream>>>(grad(mb, l), layer_params(l),
                                                                                         dx, rows(), s.in, s.out);
      g = dx;
    }
  }

  void backward_weight(std::int32_t mb, std::span<const float> in, std::span<float> weight_grad) {
    const cudaStream_t stream = ppsched::cuda::launch_stream().handle();
    for (std::size_t l = 0; l < shapes_.size(); ++l) {
      const Shape s = shapes_[l];
      const float* x = l == 0 ? in.data() : output(mb, l - 1);
      const int n = s.out * s.in + s.out;
      linear_backward_weight<<<blocks_for(static_cast<std::size_t>(n)), 128, 0, stream>>>(
          x, grad(mb, l), weight_grad.data() + parameter_offsets_[l], rows(), s.in, s.out);
    }
  }

  // The loss value is needed on the host, so this waits for the stream to reach it.
  float loss(std::int32_t mb, std::span<const float> out, std::span<const float> target, float scale,
             std::span<float> grad_out) {
    const ppsched::cuda::CudaStreamRef stream = ppsched::cuda::launch_stream();
    float* value = losses_.data() + mb;
    mean_squared_error<<<1, 1, 0, stream.handle()>>>(out.data(), target.data(), scale, grad_out.data(), value,
                                                     static_cast<int>(out.size()));
    float host = 0.0f;
    PPSCHED_CUDA_CHECK(cudaMemcpyAsync(&host, value, sizeof(float), cudaMemcpyDeviceToHost, stream.handle()));
    stream.synchronize();
    return host;
  }

  void optimizer_step(std::span<const float> total, float learning_rate) {
    const cudaStream_t stream = ppsched::cuda::launch_stream().handle();
    PPSCHED_CUDA_CHECK(
        cudaMemcpyAsync(last_gradient_.data(), total.data(), total.size_bytes(), cudaMemcpyDeviceToDevice, stream));
    sgd<<<blocks_for(params_.size()), 128, 0, stream>>>(params_.data(), total.data(), learning_rate,
                                                        static_cast<int>(params_.size()));
  }
};

}  // namespace mlp_cuda
