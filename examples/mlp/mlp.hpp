// A small multi-layer perceptron in plain C++: the kind of model code a team already has.
// It knows nothing of ppsched — no base class, no framework types, only std::span of float
// in row-major order. examples/mlp_training.cpp pipelines it with ppsched, and
// tests/test_training.cpp checks that pipelined training equals training it unpipelined.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

// The model's arithmetic is shared with its CUDA twin (examples/cuda/mlp_stage_cuda.cuh),
// which calls `tanh_rational` from device code.
#if defined(__CUDACC__)
#define MLP_HOST_DEVICE __host__ __device__
#else
#define MLP_HOST_DEVICE
#endif

namespace mlp {

// a * b and a + b rounded once each, also in device code, where nvcc would otherwise fuse
// a product and a sum into one multiply-add that rounds once (the CPU rounds twice).
MLP_HOST_DEVICE inline float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
MLP_HOST_DEVICE inline float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// tanh from sums, products and one division: a rational approximation (Pade [9/8]) within
// 6e-7 of tanh for |x| <= 5, clamped to [-1, 1] (it passes 1 near 6.6). Each operation is
// correctly rounded in IEEE single precision on a CPU and on a GPU alike, so the GPU twin of
// this model computes the same bits, where std::tanh and CUDA's tanhf differ in the last
// ones. A CPU build must not contract a*b+c into a fused multiply-add: ISO C++ modes (as
// -std=c++20) do not; GNU modes with an FMA-capable -march would.
MLP_HOST_DEVICE inline float tanh_rational(float x) {
  if (!(x > -9.0f)) return x != x ? x : -1.0f;  // below -9, or NaN kept
  if (x > 9.0f) return 1.0f;
  const float x2 = mul(x, x);
  const float num = mul(x, add(34459425.0f, mul(x2, add(4729725.0f, mul(x2, add(135135.0f, mul(x2, add(990.0f, x2))))))));
  const float den = add(34459425.0f, mul(x2, add(16216200.0f, mul(x2, add(945945.0f, mul(x2, add(13860.0f, mul(x2, 45.0f))))))));
  const float y = num / den;
  return y > 1.0f ? 1.0f : (y < -1.0f ? -1.0f : y);
}

// A fixed, portable pseudo-random sequence (xorshift32), so weights are the same everywhere.
class Random {
 public:
  explicit Random(std::uint32_t seed) : state_(seed == 0 ? 0x9e3779b9u : seed) {}
  // Uniform in [-1, 1).
  float next() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 17;
    state_ ^= state_ << 5;
    return static_cast<float>(state_ >> 8) / static_cast<float>(1u << 23) - 1.0f;
  }

 private:
  std::uint32_t state_;
};

// y = x W^T + b over a batch of rows. Parameters are stored as W (out x in) then b (out);
// gradients use the same layout.
class Linear {
 public:
  Linear(std::size_t in, std::size_t out, Random& random) : in_(in), out_(out), params_(out * in + out) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(in));
    for (std::size_t i = 0; i < out * in; ++i) params_[i] = scale * random.next();
    for (std::size_t i = out * in; i < params_.size(); ++i) params_[i] = 0.1f * random.next();
  }

  [[nodiscard]] std::size_t in() const { return in_; }
  [[nodiscard]] std::size_t out() const { return out_; }
  [[nodiscard]] std::size_t parameter_count() const { return params_.size(); }
  [[nodiscard]] std::span<const float> parameters() const { return params_; }

  void forward(std::span<const float> x, std::span<float> y) const {
    const std::size_t rows = x.size() / in_;
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t o = 0; o < out_; ++o) {
        float acc = params_[out_ * in_ + o];
        for (std::size_t i = 0; i < in_; ++i) acc += x[r * in_ + i] * params_[o * in_ + i];
        y[r * out_ + o] = acc;
      }
    }
  }

  // dx = dy W
  void backward_input(std::span<const float> dy, std::span<float> dx) const {
    const std::size_t rows = dy.size() / out_;
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t i = 0; i < in_; ++i) {
        float acc = 0.0f;
        for (std::size_t o = 0; o < out_; ++o) acc += dy[r * out_ + o] * params_[o * in_ + i];
        dx[r * in_ + i] = acc;
      }
    }
  }

  // grad = [dy^T x, sum over rows of dy], overwritten.
  void backward_weight(std::span<const float> x, std::span<const float> dy, std::span<float> grad) const {
    const std::size_t rows = dy.size() / out_;
    for (std::size_t o = 0; o < out_; ++o) {
      for (std::size_t i = 0; i < in_; ++i) {
        float acc = 0.0f;
        for (std::size_t r = 0; r < rows; ++r) acc += dy[r * out_ + o] * x[r * in_ + i];
        grad[o * in_ + i] = acc;
      }
      float acc = 0.0f;
      for (std::size_t r = 0; r < rows; ++r) acc += dy[r * out_ + o];
      grad[out_ * in_ + o] = acc;
    }
  }

  // Plain SGD.
  void step(std::span<const float> grad, float learning_rate) {
    for (std::size_t i = 0; i < params_.size(); ++i) params_[i] -= learning_rate * grad[i];
  }

 private:
  std::size_t in_;
  std::size_t out_;
  std::vector<float> params_;
};

struct Tanh {
  static void forward(std::span<const float> x, std::span<float> y) {
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = tanh_rational(x[i]);
  }
  // dx = dy (1 - y^2), from the forward's output y.
  static void backward(std::span<const float> y, std::span<const float> dy, std::span<float> dx) {
    for (std::size_t i = 0; i < y.size(); ++i) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
  }
};

// scale * sum((y - t)^2) / 2, and its gradient scale * (y - t).
struct MeanSquaredError {
  static float forward_backward(std::span<const float> y, std::span<const float> t, float scale, std::span<float> dy) {
    float sum = 0.0f;
    for (std::size_t i = 0; i < y.size(); ++i) {
      const float d = y[i] - t[i];
      sum += d * d;
      dy[i] = scale * d;
    }
    return 0.5f * scale * sum;
  }
};

// Linear + tanh blocks: widths[0] inputs, widths.back() outputs.
class Mlp {
 public:
  Mlp(const std::vector<std::size_t>& widths, std::uint32_t seed) {
    if (widths.size() < 2) throw std::invalid_argument("an MLP needs at least an input and an output width");
    Random random(seed);
    for (std::size_t l = 0; l + 1 < widths.size(); ++l) layers.emplace_back(widths[l], widths[l + 1], random);
  }
  std::vector<Linear> layers;  // each followed by tanh
};

}  // namespace mlp
