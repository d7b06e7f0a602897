#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cudnn_ragged.h"
#include "core/error.h"

#include <algorithm>

namespace ulysses::cuda {
namespace {

template <class Offset>
__global__ void ragged_offsets_kernel(Offset* off_q, Offset* off_kv, Offset* off_stats, int32_t* seq_len,
                                      const int32_t* bounds, int64_t count, int64_t batch, int64_t H, int64_t Hkv,
                                      int64_t d) {
  const int64_t S = bounds[count];
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b <= batch;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t start = b <= count ? bounds[b] : S;
    off_q[b] = static_cast<Offset>(start * H * d);
    off_kv[b] = static_cast<Offset>(start * Hkv * d);
    off_stats[b] = static_cast<Offset>(start * H);
    if (b < batch) seq_len[b] = static_cast<int32_t>((b < count ? bounds[b + 1] : S) - start);
  }
}

// The document of token t: the last b with bounds[b] <= t (binary search over count + 1 bounds).
__device__ int64_t document_of(const int32_t* bounds, int64_t count, int64_t t) {
  int64_t lo = 0, hi = count;  // bounds[lo] <= t < bounds[hi]
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (bounds[mid] <= t) lo = mid;
    else hi = mid;
  }
  return lo;
}

template <bool kToLse>
__global__ void padded_stats_kernel(float* lse, float* stats, const int32_t* bounds, int64_t count, int64_t H,
                                    int64_t seq, int64_t S) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < H * S;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t h = i / S, t = i % S, b = document_of(bounds, count, t);
    float* p = stats + (b * H + h) * seq + (t - bounds[b]);
    if (kToLse) lse[i] = *p;
    else *p = lse[i];
  }
}

// 32 x 32 tiles through shared memory, so that both the reads and the writes are coalesced.
__global__ void transpose_kernel(float* dst, const float* src, int64_t rows, int64_t cols) {
  __shared__ float tile[32][33];
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * 32, r0 = static_cast<int64_t>(blockIdx.y) * 32;
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[i][threadIdx.x] = src[r * cols + c];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const int64_t c = c0 + i, r = r0 + threadIdx.x;
    if (r < rows && c < cols) dst[c * rows + r] = tile[threadIdx.x][i];
  }
}

}  // namespace

template <class Offset>
void ragged_offsets(Offset* offsets_q, Offset* offsets_kv, Offset* offsets_stats, int32_t* seq_len,
                    const int32_t* bounds, int64_t count, int64_t batch, int64_t H, int64_t Hkv, int64_t d,
                    cudaStream_t stream) {
  ULY_CHECK(count >= 1 && batch >= count, "ragged_offsets: " << batch << " batch slots for " << count << " documents");
  const int threads = 128;
  const int blocks = static_cast<int>(std::min<int64_t>((batch + threads) / threads, 1024));
  ragged_offsets_kernel<Offset><<<blocks, threads, 0, stream>>>(offsets_q, offsets_kv, offsets_stats, seq_len, bounds,
                                                                count, batch, H, Hkv, d);
  CUDA_CHECK_LAUNCH("ragged_offsets_kernel");
}

void padded_stats_to_lse(float* lse, const float* stats, const int32_t* bounds, int64_t count, int64_t H, int64_t seq,
                         int64_t S, cudaStream_t stream) {
  if (H * S == 0) return;
  padded_stats_kernel<true><<<detail::grid_for(H * S), detail::kThreads, 0, stream>>>(
      lse, const_cast<float*>(stats), bounds, count, H, seq, S);
  CUDA_CHECK_LAUNCH("padded_stats_kernel");
}

void lse_to_padded_stats(float* stats, const float* lse, const int32_t* bounds, int64_t count, int64_t H, int64_t seq,
                         int64_t S, cudaStream_t stream) {
  if (H * S == 0) return;
  padded_stats_kernel<false><<<detail::grid_for(H * S), detail::kThreads, 0, stream>>>(
      const_cast<float*>(lse), stats, bounds, count, H, seq, S);
  CUDA_CHECK_LAUNCH("padded_stats_kernel");
}

void transpose_f32(float* dst, const float* src, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  ULY_CHECK((cols + 31) / 32 <= 2147483647LL && (rows + 31) / 32 <= 65535,
            "transpose_f32: " << rows << " x " << cols << " is beyond the grid; split it");
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>((rows + 31) / 32));
  transpose_kernel<<<grid, dim3(32, 8), 0, stream>>>(dst, src, rows, cols);
  CUDA_CHECK_LAUNCH("transpose_kernel");
}

template void ragged_offsets<int32_t>(int32_t*, int32_t*, int32_t*, int32_t*, const int32_t*, int64_t, int64_t,
                                      int64_t, int64_t, int64_t, cudaStream_t);
template void ragged_offsets<int64_t>(int64_t*, int64_t*, int64_t*, int32_t*, const int32_t*, int64_t, int64_t,
                                      int64_t, int64_t, int64_t, cudaStream_t);

}  // namespace ulysses::cuda
