#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/heads.h"
#include "core/error.h"

namespace ulysses::cuda {
namespace {

template <class T, bool kAccumulate>
__global__ void copy_heads_kernel(T* dst, int64_t dst_row, const T* src, int64_t src_row, int64_t width,
                                  int64_t total) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / width, c = i % width;
    const T v = src[n * src_row + c];
    T* out = dst + n * dst_row + c;
    if (kAccumulate) *out = detail::from_f<T>(detail::to_f(*out) + detail::to_f(v));
    else *out = v;
  }
}

}  // namespace

template <class T>
void copy_heads(T* dst, int64_t Hd, int64_t dst_head0, const T* src, int64_t Hs, int64_t src_head0, int64_t n_heads,
                int64_t N, int64_t d, bool accumulate, cudaStream_t stream) {
  ULY_CHECK(N >= 0 && d >= 0 && n_heads >= 0 && dst_head0 >= 0 && src_head0 >= 0 && dst_head0 + n_heads <= Hd &&
                src_head0 + n_heads <= Hs,
            "copy_heads: heads [" << src_head0 << ", " << src_head0 + n_heads << ") of " << Hs << " -> ["
                                  << dst_head0 << ", " << dst_head0 + n_heads << ") of " << Hd << " (N=" << N
                                  << ", d=" << d << ") are out of range");
  const int64_t width = n_heads * d, total = N * width;
  if (total == 0) return;
  T* d0 = dst + dst_head0 * d;
  const T* s0 = src + src_head0 * d;
  if (accumulate)
    copy_heads_kernel<T, true><<<detail::grid_for(total), detail::kThreads, 0, stream>>>(d0, Hd * d, s0, Hs * d, width,
                                                                                         total);
  else
    copy_heads_kernel<T, false><<<detail::grid_for(total), detail::kThreads, 0, stream>>>(d0, Hd * d, s0, Hs * d,
                                                                                          width, total);
  CUDA_CHECK_LAUNCH("copy_heads_kernel");
}

template void copy_heads<float>(float*, int64_t, int64_t, const float*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                bool, cudaStream_t);
template void copy_heads<__nv_bfloat16>(__nv_bfloat16*, int64_t, int64_t, const __nv_bfloat16*, int64_t, int64_t,
                                        int64_t, int64_t, int64_t, bool, cudaStream_t);

}  // namespace ulysses::cuda
