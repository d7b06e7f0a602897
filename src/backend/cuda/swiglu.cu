#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/swiglu.h"

namespace ulysses::cuda {
namespace {

using detail::from_f;
using detail::to_f;
using detail::kVec;
using detail::Pack;

// h = silu(g) u, silu(g) = g sig(g).
__device__ __forceinline__ float swiglu_value(float g, float u) {
  const float sig = 1.0f / (1.0f + expf(-g));
  return g * sig * u;
}

// dgate and dup of h from dh = d, with d silu(g)/dg = sig (1 + g (1 - sig)).
__device__ __forceinline__ void swiglu_grads(float d, float g, float u, float& dg, float& du) {
  const float sig = 1.0f / (1.0f + expf(-g));
  dg = d * u * sig * (1.0f + g * (1.0f - sig));
  du = d * (g * sig);
}

template <class T>
__global__ void swiglu_forward_kernel(T* h, const T* gate, const T* up, int64_t n) {
  ULY_GRID_STRIDE(i, n) h[i] = from_f<T>(swiglu_value(to_f(gate[i]), to_f(up[i])));
}

template <class T>
__global__ void swiglu_backward_kernel(T* dgate, T* dup, const T* dh, const T* gate, const T* up, int64_t n) {
  ULY_GRID_STRIDE(i, n) {
    float a, b;
    swiglu_grads(to_f(dh[i]), to_f(gate[i]), to_f(up[i]), a, b);
    dgate[i] = from_f<T>(a);
    dup[i] = from_f<T>(b);
  }
}

// The vectorised forms over 16-byte packs (every pointer 16-byte aligned), then the tail.
template <class T>
__global__ void swiglu_forward_vec_kernel(T* h, const T* gate, const T* up, int64_t n) {
  using P = Pack<T>;
  detail::for_each_pack<T>(
      n,
      [&](int64_t p) {
        const P g = reinterpret_cast<const P*>(gate)[p], u = reinterpret_cast<const P*>(up)[p];
        P out;
#pragma unroll
        for (int k = 0; k < kVec<T>; ++k) out.v[k] = from_f<T>(swiglu_value(to_f(g.v[k]), to_f(u.v[k])));
        reinterpret_cast<P*>(h)[p] = out;
      },
      [&](int64_t i) { h[i] = from_f<T>(swiglu_value(to_f(gate[i]), to_f(up[i]))); });
}

template <class T>
__global__ void swiglu_backward_vec_kernel(T* dgate, T* dup, const T* dh, const T* gate, const T* up, int64_t n) {
  using P = Pack<T>;
  detail::for_each_pack<T>(
      n,
      [&](int64_t p) {
        const P g = reinterpret_cast<const P*>(gate)[p], u = reinterpret_cast<const P*>(up)[p],
                d = reinterpret_cast<const P*>(dh)[p];
        P dg, du;
#pragma unroll
        for (int k = 0; k < kVec<T>; ++k) {
          float a, b;
          swiglu_grads(to_f(d.v[k]), to_f(g.v[k]), to_f(u.v[k]), a, b);
          dg.v[k] = from_f<T>(a);
          du.v[k] = from_f<T>(b);
        }
        reinterpret_cast<P*>(dgate)[p] = dg;
        reinterpret_cast<P*>(dup)[p] = du;
      },
      [&](int64_t i) {
        float a, b;
        swiglu_grads(to_f(dh[i]), to_f(gate[i]), to_f(up[i]), a, b);
        dgate[i] = from_f<T>(a);
        dup[i] = from_f<T>(b);
      });
}

}  // namespace

template <class T>
void swiglu_forward(T* h, const T* gate, const T* up, int64_t N, int64_t F, cudaStream_t stream) {
  ULY_CHECK(N >= 0 && F >= 0, "swiglu_forward: negative size N=" << N << " F=" << F);
  const int64_t n = N * F;
  if (n == 0) return;
  if (detail::aligned16({h, gate, up})) {
    swiglu_forward_vec_kernel<T><<<detail::grid_for(n / kVec<T> + 1), detail::kThreads, 0, stream>>>(h, gate, up, n);
    CUDA_CHECK_LAUNCH("swiglu_forward_vec_kernel");
    return;
  }
  swiglu_forward_kernel<T><<<detail::grid_for(n), detail::kThreads, 0, stream>>>(h, gate, up, n);
  CUDA_CHECK_LAUNCH("swiglu_forward_kernel");
}

template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dh, const T* gate, const T* up, int64_t N, int64_t F,
                     cudaStream_t stream) {
  ULY_CHECK(N >= 0 && F >= 0, "swiglu_backward: negative size N=" << N << " F=" << F);
  const int64_t n = N * F;
  if (n == 0) return;
  if (detail::aligned16({dgate, dup, dh, gate, up})) {
    swiglu_backward_vec_kernel<T><<<detail::grid_for(n / kVec<T> + 1), detail::kThreads, 0, stream>>>(dgate, dup, dh,
                                                                                                   gate, up, n);
    CUDA_CHECK_LAUNCH("swiglu_backward_vec_kernel");
    return;
  }
  swiglu_backward_kernel<T><<<detail::grid_for(n), detail::kThreads, 0, stream>>>(dgate, dup, dh, gate, up, n);
  CUDA_CHECK_LAUNCH("swiglu_backward_kernel");
}

template void swiglu_forward<float>(float*, const float*, const float*, int64_t, int64_t, cudaStream_t);
template void swiglu_forward<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, int64_t,
                                            int64_t, cudaStream_t);
template void swiglu_backward<float>(float*, float*, const float*, const float*, const float*, int64_t, int64_t,
                                     cudaStream_t);
template void swiglu_backward<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, const __nv_bfloat16*,
                                             const __nv_bfloat16*, const __nv_bfloat16*, int64_t, int64_t,
                                             cudaStream_t);

}  // namespace ulysses::cuda
