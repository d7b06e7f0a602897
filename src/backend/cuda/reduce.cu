#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "core/error.h"
#include "backend/cuda/reduce.h"

namespace ulysses::cuda {
namespace {

__device__ __forceinline__ double to_d(float x) { return x; }
__device__ __forceinline__ double to_d(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ double to_d(int32_t x) { return x; }

template <class T, bool kSquare>
__global__ void reduce_kernel(double* acc, const T* x, int64_t n) {
  __shared__ double scratch[32];
  double s = 0.0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double v = to_d(x[i]);
    s += kSquare ? v * v : v;
  }
  s = detail::block_sum(s, scratch);
  if (threadIdx.x == 0) atomicAdd(acc, s);
}

template <class T, bool kSquare>
void launch(double* acc, const T* x, int64_t n, cudaStream_t stream) {
  ULY_CHECK(n >= 0, "reduction over a negative size " << n);
  if (n == 0) return;
  // Few blocks: one atomic each, and enough of them to fill the GPU.
  const unsigned blocks = std::min<unsigned>(detail::grid_for(n), 132 * 4);
  reduce_kernel<T, kSquare><<<blocks, detail::kThreads, 0, stream>>>(acc, x, n);
  CUDA_CHECK_LAUNCH("reduce_kernel");
}

}  // namespace

template <class T>
void sum_accumulate(double* acc, const T* x, int64_t n, cudaStream_t stream) {
  launch<T, false>(acc, x, n, stream);
}

template <class T>
void sum_squares_accumulate(double* acc, const T* x, int64_t n, cudaStream_t stream) {
  launch<T, true>(acc, x, n, stream);
}

template void sum_accumulate<float>(double*, const float*, int64_t, cudaStream_t);
template void sum_accumulate<__nv_bfloat16>(double*, const __nv_bfloat16*, int64_t, cudaStream_t);
template void sum_accumulate<int32_t>(double*, const int32_t*, int64_t, cudaStream_t);
template void sum_squares_accumulate<float>(double*, const float*, int64_t, cudaStream_t);
template void sum_squares_accumulate<__nv_bfloat16>(double*, const __nv_bfloat16*, int64_t, cudaStream_t);

}  // namespace ulysses::cuda
