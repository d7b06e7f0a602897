// Device helpers shared by the kernels (.cu only): fp32 conversions for the
// stored element types, warp/block reductions, launch sizes.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>

namespace ulysses::cuda::detail {

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block; every thread gets the result. blockDim.x must be a
// multiple of 32 and at most 1024; scratch: 32 elements of shared memory.
// Starts with a barrier so that the scratch can be reused back to back.
template <class V>
__device__ __forceinline__ V block_sum(V v, V* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  V r = lane < nwarps ? scratch[lane] : V(0);
  return warp_sum(r);
}

// R sums over the block at once (one pair of barriers for all): every thread gets the R results in v.
// scratch: 32 * R elements of shared memory. Starts with a barrier, as block_sum.
template <int R>
__device__ __forceinline__ void block_sum_n(float (&v)[R], float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
#pragma unroll
  for (int r = 0; r < R; ++r) v[r] = warp_sum(v[r]);
  __syncthreads();
  if (lane == 0)
#pragma unroll
    for (int r = 0; r < R; ++r) scratch[r * 32 + warp] = v[r];
  __syncthreads();
#pragma unroll
  for (int r = 0; r < R; ++r) v[r] = warp_sum(lane < nwarps ? scratch[r * 32 + lane] : 0.f);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < nwarps ? scratch[lane] : -INFINITY;
  return warp_max(r);
}

// for (i = this thread's first index; i < n; i += the grid's threads): the element-wise kernels' loop.
#define ULY_GRID_STRIDE(i, n)                                                            \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// 16-byte vectors of T (8 bf16 or 4 floats): the unit of the vectorised kernels' loads and stores.
template <class T>
constexpr int kVec = 16 / sizeof(T);

template <class T>
struct alignas(16) Pack {
  T v[kVec<T>];
};

// A grid-stride loop over n elements of T in whole packs, then the tail of n % kVec elements:
// on_pack(p) for pack p (elements p·kVec ..), on_element(i) for each element of the tail.
template <class T, class OnPack, class OnElement>
__device__ __forceinline__ void for_each_pack(int64_t n, OnPack&& on_pack, OnElement&& on_element) {
  const int64_t packs = n / kVec<T>, stride = static_cast<int64_t>(gridDim.x) * blockDim.x,
                first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t p = first; p < packs; p += stride) on_pack(p);
  for (int64_t i = packs * kVec<T> + first; i < n; i += stride) on_element(i);
}

// True when every pointer is 16-byte aligned: the vectorised kernels may then read and write packs.
inline bool aligned16(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

constexpr int kThreads = 256;

// Multiprocessors of the current device (looked up once per device).
inline int sm_count() {
  static thread_local int device = -1, count = 0;
  int d = 0;
  if (cudaGetDevice(&d) != cudaSuccess) return 132;
  if (d != device) {
    if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, d) != cudaSuccess || count <= 0) count = 132;
    device = d;
  }
  return count;
}

// Blocks for a grid-stride loop over n elements (capped; the loop covers the rest).
inline unsigned grid_for(int64_t n, int threads = kThreads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(b, 132 * 32)));
}

// Threads per block for one-block-per-row kernels: a multiple of 32, at most 1024.
inline int row_threads(int64_t cols) {
  int t = 32;
  while (t < 1024 && t < cols) t *= 2;
  return t;
}

}  // namespace ulysses::cuda::detail
