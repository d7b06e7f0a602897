#include "backend/cuda/bias.h"

#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.h"

namespace ulysses::cuda {
namespace {

using detail::from_f;
using detail::to_f;

template <class T>
__global__ void bias_add_kernel(T* y, const T* b, int64_t N, int64_t n) {
  ULY_GRID_STRIDE(i, N * n) y[i] = from_f<T>(to_f(y[i]) + to_f(b[i % n]));
}

constexpr int kCols = 32;  // columns of a block's tile: one warp's width, so each row read is one segment
constexpr int kLanes = 16; // row lanes of a block

// Block c owns columns [c kCols, (c + 1) kCols); lane y sums rows y, y + kLanes, ... in order,
// then the lanes are added in a fixed order.
template <class T>
__global__ void bias_backward_kernel(float* db, const T* dy, int64_t N, int64_t n) {
  __shared__ float part[kLanes][kCols];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kCols + threadIdx.x;
  float s = 0.0f;
  if (col < n)
    for (int64_t r = threadIdx.y; r < N; r += kLanes) s += to_f(dy[r * n + col]);
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || col >= n) return;
  float total = 0.0f;
  for (int l = 0; l < kLanes; ++l) total += part[l][threadIdx.x];
  db[col] += total;
}

}  // namespace

template <class T>
void bias_add(T* y, const T* b, int64_t N, int64_t n, cudaStream_t stream) {
  detail::check_nonneg(N, "N", "bias_add");
  detail::check_nonneg(n, "n", "bias_add");
  if (N * n == 0) return;
  bias_add_kernel<T><<<detail::grid_for(N * n), detail::kThreads, 0, stream>>>(y, b, N, n);
  CUDA_CHECK_LAUNCH("bias_add_kernel");
}

template <class T>
void bias_backward(float* db, const T* dy, int64_t N, int64_t n, cudaStream_t stream) {
  detail::check_nonneg(N, "N", "bias_backward");
  detail::check_nonneg(n, "n", "bias_backward");
  if (n == 0) return;
  const int64_t blocks = (n + kCols - 1) / kCols;
  detail::check_rows(blocks, "bias_backward");
  bias_backward_kernel<T><<<static_cast<unsigned>(blocks), dim3(kCols, kLanes), 0, stream>>>(db, dy, N, n);
  CUDA_CHECK_LAUNCH("bias_backward_kernel");
}

template void bias_add<float>(float*, const float*, int64_t, int64_t, cudaStream_t);
template void bias_add<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*, int64_t, int64_t, cudaStream_t);
template void bias_backward<float>(float*, const float*, int64_t, int64_t, cudaStream_t);
template void bias_backward<__nv_bfloat16>(float*, const __nv_bfloat16*, int64_t, int64_t, cudaStream_t);

}  // namespace ulysses::cuda
