#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/rope.h"

namespace ulysses::cuda {
namespace {

using detail::from_f;
using detail::to_f;
using detail::kVec;
using detail::Pack;

// One thread per rotated pair (i, i + d/2) of one (token, head): it reads both
// elements before writing them, so out may alias x. sign = +1 forward, -1 backward.
template <class T>
__global__ void rope_kernel(T* out, const T* x, const int32_t* pos, const float* inv_freq, int64_t pairs, int64_t H,
                            int64_t half, float sign) {
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = p % half;
    const int64_t nh = p / half;  // token * H + head
    const int64_t n = nh / H;
    const float angle = __fmul_rn(static_cast<float>(pos[n]), inv_freq[i]);
    const float c = cosf(angle);
    const float s = sign * sinf(angle);
    const int64_t base = nh * 2 * half;
    const float x1 = to_f(x[base + i]);
    const float x2 = to_f(x[base + i + half]);
    out[base + i] = from_f<T>(x1 * c - x2 * s);
    out[base + i + half] = from_f<T>(x2 * c + x1 * s);
  }
}

// The vectorised form: one thread per kVec consecutive pairs (i0 .. i0 + kVec) of one (token, head),
// read and written as 16-byte packs (half a multiple of kVec, out and x 16-byte aligned); the same
// arithmetic per element as rope_kernel.
template <class T>
__global__ void rope_vec_kernel(T* out, const T* x, const int32_t* pos, const float* inv_freq, int64_t groups,
                                int64_t H, int64_t half, float sign) {
  using P = Pack<T>;
  constexpr int V = kVec<T>;
  const int64_t packs_per_half = half / V;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < groups;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i0 = (p % packs_per_half) * V;
    const int64_t nh = p / packs_per_half;  // token * H + head
    const float fpos = static_cast<float>(pos[nh / H]);
    const int64_t base = nh * 2 * half;
    const P a = *reinterpret_cast<const P*>(x + base + i0), b = *reinterpret_cast<const P*>(x + base + half + i0);
    P ra, rb;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float angle = __fmul_rn(fpos, inv_freq[i0 + k]);
      const float c = cosf(angle);
      const float s = sign * sinf(angle);
      const float x1 = to_f(a.v[k]), x2 = to_f(b.v[k]);
      ra.v[k] = from_f<T>(x1 * c - x2 * s);
      rb.v[k] = from_f<T>(x2 * c + x1 * s);
    }
    *reinterpret_cast<P*>(out + base + i0) = ra;
    *reinterpret_cast<P*>(out + base + half + i0) = rb;
  }
}

template <class T>
void launch_rope(T* out, const T* x, const int32_t* pos, const float* inv_freq, int64_t N, int64_t H, int64_t d,
                 float sign, cudaStream_t stream, const char* op) {
  ULY_CHECK(N >= 0 && H >= 0 && d >= 0, op << ": negative size N=" << N << " H=" << H << " d=" << d);
  ULY_CHECK(d % 2 == 0, op << ": head dim d=" << d << " must be even");
  const int64_t half = d / 2;
  const int64_t pairs = N * H * half;
  if (pairs == 0) return;
  if (half % kVec<T> == 0 && detail::aligned16({out, x})) {
    const int64_t groups = pairs / kVec<T>;
    rope_vec_kernel<T><<<detail::grid_for(groups), detail::kThreads, 0, stream>>>(out, x, pos, inv_freq, groups, H,
                                                                                  half, sign);
    CUDA_CHECK_LAUNCH("rope_vec_kernel");
    return;
  }
  rope_kernel<T><<<detail::grid_for(pairs), detail::kThreads, 0, stream>>>(out, x, pos, inv_freq, pairs, H, half, sign);
  CUDA_CHECK_LAUNCH("rope_kernel");
}

}  // namespace

template <class T>
void rope_forward(T* out, const T* x, const int32_t* pos, const float* inv_freq, int64_t N, int64_t H, int64_t d,
                  cudaStream_t stream) {
  launch_rope(out, x, pos, inv_freq, N, H, d, 1.0f, stream, "rope_forward");
}

template <class T>
void rope_backward(T* dx, const T* dout, const int32_t* pos, const float* inv_freq, int64_t N, int64_t H, int64_t d,
                   cudaStream_t stream) {
  launch_rope(dx, dout, pos, inv_freq, N, H, d, -1.0f, stream, "rope_backward");
}

template void rope_forward<float>(float*, const float*, const int32_t*, const float*, int64_t, int64_t, int64_t,
                                  cudaStream_t);
template void rope_forward<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*, const int32_t*, const float*, int64_t,
                                          int64_t, int64_t, cudaStream_t);
template void rope_backward<float>(float*, const float*, const int32_t*, const float*, int64_t, int64_t, int64_t,
                                   cudaStream_t);
template void rope_backward<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*, const int32_t*, const float*,
                                           int64_t, int64_t, int64_t, cudaStream_t);

}  // namespace ulysses::cuda
