// What the device benchmarks share: random bf16 inputs, and the median time of a call
// measured with CUDA events on one stream.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/cuda/check.h"

namespace bench_util {

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
