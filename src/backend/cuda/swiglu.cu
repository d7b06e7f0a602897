#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/swiglu.h"

namespace ulysses::cuda {
namespace {

using detail::from_f;
using detail::to_f;

template <class T>
__global__ void swiglu_forward_kernel(T* h, const T* gate, const T* up, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = to_f(gate[i]);
    const float u = to_f(up[i]);
    const float sig = 1.0f / (1.0f + expf(-g));
    h[i] = from_f<T>(g * sig * u);
  }
}

// d silu(g)/dg = sig * (1 + g * (1 - sig)).
template <class T>
__global__ void swiglu_backward_kernel(T* dgate, T* dup, const T* dh, const T* gate, const T* up, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = to_f(gate[i]);
    const float u = to_f(up[i]);
    const float d = to_f(dh[i]);
    const float sig = 1.0f / (1.0f + expf(-g));
    const float silu = g * sig;
    dgate[i] = from_f<T>(d * u * sig * (1.0f + g * (1.0f - sig)));
    dup[i] = from_f<T>(d * silu);
  }
}

}  // namespace

template <class T>
void swiglu_forward(T* h, const T* gate, const T* up, int64_t N, int64_t F, cudaStream_t stream) {
  ULY_CHECK(N >= 0 && F >= 0, "swiglu_forward: negative size N=" << N << " F=" << F);
  const int64_t n = N * F;
  if (n == 0) return;
  swiglu_forward_kernel<T><<<detail::grid_for(n), detail::kThreads, 0, stream>>>(h, gate, up, n);
  CUDA_CHECK_LAUNCH("swiglu_forward_kernel");
}

template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dh, const T* gate, const T* up, int64_t N, int64_t F,
                     cudaStream_t stream) {
  ULY_CHECK(N >= 0 && F >= 0, "swiglu_backward: negative size N=" << N << " F=" << F);
  const int64_t n = N * F;
  if (n == 0) return;
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
