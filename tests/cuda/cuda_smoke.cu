// Smoke test for the CUDA build path: nvcc compiles device code, Thrust from the toolkit and
// NCCL's header, and the program links the CUDA runtime and NCCL. At run time it needs a GPU:
// without one it exits 77 (Meson's skip) and says why.
#include <cuda_runtime.h>
#include <nccl.h>
#include <thrust/device_vector.h>
#include <thrust/reduce.h>

#include <cstdio>

#include <ppsched/all.hpp>

__global__ void iota_kernel(int* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = i;
}

int main() {
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::printf("SKIPPED: no usable CUDA device (%s)\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "device count is 0");
    (void)cudaGetLastError();
    return 77;
  }
  int nccl_version = 0;
  if (ncclGetVersion(&nccl_version) != ncclSuccess) {
    std::printf("FAILED: ncclGetVersion\n");
    return 1;
  }
  constexpr int n = 1000;
  thrust::device_vector<int> v(n);
  iota_kernel<<<(n + 255) / 256, 256>>>(thrust::raw_pointer_cast(v.data()), n);
  if (cudaDeviceSynchronize() != cudaSuccess) {
    std::printf("FAILED: kernel launch\n");
    return 1;
  }
  const long long sum = thrust::reduce(v.begin(), v.end(), 0LL);
  const ppsched::Action a{ppsched::Op::F, 0, 0};
  std::printf("devices=%d nccl=%d sum=%lld action=%s\n", devices, nccl_version, sum, ppsched::to_string(a).c_str());
  return sum == static_cast<long long>(n) * (n - 1) / 2 ? 0 : 1;
}
