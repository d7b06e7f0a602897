// Log-sum-exp merge of a block's attention result into a running one (ring
// attention): thread per (head h, row i), i fastest so that the lse reads are
// coalesced; the row's d elements are rescaled in float32. Twin of
// ulysses::cpu::attention_merge (backend/cpu/attention.cpp).
#include <cmath>

#include "backend/cuda/attention.h"
#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "core/error.h"

namespace ulysses::cuda {
namespace {

template <class T>
__global__ void attention_merge_kernel(float* acc, float* acc_lse, const T* out, const float* lse, int64_t S,
                                       int64_t H, int64_t d) {
  const int64_t rows = S * H;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t h = r / S, i = r - h * S;
    const float a = acc_lse[h * S + i], b = lse[h * S + i];
    if (b == -INFINITY) continue;  // the block saw no key of this row
    const float m = fmaxf(a, b);
    const float wa = a == -INFINITY ? 0.f : expf(a - m), wb = expf(b - m);
    const float inv = 1.f / (wa + wb);
    float* ai = acc + (i * H + h) * d;
    const T* oi = out + (i * H + h) * d;
    for (int64_t t = 0; t < d; ++t) ai[t] = (wa * ai[t] + wb * detail::to_f(oi[t])) * inv;
    acc_lse[h * S + i] = m + logf(wa + wb);
  }
}

template <class T>
void merge(float* acc, float* acc_lse, const T* out, const float* lse, int64_t S, int64_t H, int64_t d,
           cudaStream_t stream) {
  ULY_CHECK(S >= 0 && H >= 0 && d >= 0, "cuda::attention_merge: negative size S=" << S << ", H=" << H << ", d=" << d);
  const int64_t rows = S * H;
  if (rows == 0) return;
  attention_merge_kernel<T><<<detail::grid_for(rows), detail::kThreads, 0, stream>>>(acc, acc_lse, out, lse, S, H, d);
  CUDA_CHECK_LAUNCH("attention_merge");
}

}  // namespace

void attention_merge(float* acc, float* acc_lse, const __nv_bfloat16* out, const float* lse, int64_t S, int64_t H,
                     int64_t d, cudaStream_t stream) {
  merge(acc, acc_lse, out, lse, S, H, d, stream);
}

void attention_merge(float* acc, float* acc_lse, const float* out, const float* lse, int64_t S, int64_t H, int64_t d,
                     cudaStream_t stream) {
  merge(acc, acc_lse, out, lse, S, H, d, stream);
}

}  // namespace ulysses::cuda
