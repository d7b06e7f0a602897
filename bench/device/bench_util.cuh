// What the device benchmarks share: device buffers, random bf16 inputs, the largest difference of
// two outputs, and the median time of a call measured with CUDA events on one stream.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/cuda/check.h"

namespace bench_util {

// A device buffer of n elements (at least one), freed on scope exit.
template <class T>
struct Buf {
  T* p = nullptr;
  explicit Buf(size_t n) { CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T))); }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

// *out = max over i of |a[i] - b[i]| (bf16 or float; NaN counts as infinity); *out 0 on entry.
template <class T>
__global__ void max_abs_diff(const T* a, const T* b, int64_t n, float* out) {
  float m = 0.f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float d = fabsf(float(a[i]) - float(b[i]));
    m = fmaxf(m, d == d ? d : INFINITY);
  }
  atomicMax(reinterpret_cast<int*>(out), __float_as_int(m));  // non-negative floats order as ints
}

// max |a - b| over n elements, through `scratch` (one float of device memory).
template <class T>
float max_diff(const T* a, const T* b, int64_t n, float* scratch) {
  CUDA_CHECK(cudaMemset(scratch, 0, sizeof(float)));
  max_abs_diff<<<1024, 256>>>(a, b, n, scratch);
  CUDA_CHECK_LAUNCH("max_abs_diff");
  float h = 0;
  CUDA_CHECK(cudaMemcpy(&h, scratch, sizeof(float), cudaMemcpyDeviceToHost));
  return h;
}

// x[i] uniform in [-amp, amp] from a hash of (i, seed): the same values for the same seed.
__global__ void fill_uniform(__nv_bfloat16* x, int64_t n, uint64_t seed, float amp = 1.0f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint64_t z = (uint64_t(i) + seed) * 0x9E3779B97F4A7C15ull;  // splitmix64
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    x[i] = __float2bfloat16((float(z >> 40) / float(1 << 24) * 2.f - 1.f) * amp);
  }
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median over `reps` timings of `calls` back-to-back calls of f, per call, in milliseconds.
template <class F>
double median_ms(cudaStream_t stream, int reps, int calls, F&& f) {
  cudaEvent_t t0, t1;
  CUDA_CHECK(cudaEventCreate(&t0));
  CUDA_CHECK(cudaEventCreate(&t1));
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    CUDA_CHECK(cudaEventRecord(t0, stream));
    for (int k = 0; k < calls; ++k) f();
    CUDA_CHECK(cudaEventRecord(t1, stream));
    CUDA_CHECK(cudaEventSynchronize(t1));
    float e = 0;
    CUDA_CHECK(cudaEventElapsedTime(&e, t0, t1));
    ms.push_back(e / calls);
  }
  CUDA_CHECK(cudaEventDestroy(t0));
  CUDA_CHECK(cudaEventDestroy(t1));
  return median(ms);
}

}  // namespace bench_util
