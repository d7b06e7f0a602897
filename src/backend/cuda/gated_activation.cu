#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/gated_activation.h"
#include "backend/cuda/launch.h"

namespace ulysses::cuda {
namespace {

using detail::from_f;
using detail::kVec;
using detail::Pack;
using detail::to_f;

// dgate and dup of h = act(g) u from dh = d.
template <class A>
__device__ __forceinline__ void gated_grads(float d, float g, float u, float& dg, float& du) {
  dg = d * u * A::derivative(g);
  du = d * A::value(g);
}

template <class A, class T>
__global__ void forward_kernel(T* h, const T* gate, const T* up, int64_t n) {
  ULY_GRID_STRIDE(i, n) h[i] = from_f<T>(A::value(to_f(gate[i])) * to_f(up[i]));
}

template <class A, class T>
__global__ void backward_kernel(T* dgate, T* dup, const T* dh, const T* gate, const T* up, int64_t n) {
  ULY_GRID_STRIDE(i, n) {
    float a, b;
    gated_grads<A>(to_f(dh[i]), to_f(gate[i]), to_f(up[i]), a, b);
    dgate[i] = from_f<T>(a);
    dup[i] = from_f<T>(b);
  }
}

// The vectorised forms over 16-byte packs (every pointer 16-byte aligned), then the tail.
template <class A, class T>
__global__ void forward_vec_kernel(T* h, const T* gate, const T* up, int64_t n) {
  using P = Pack<T>;
  detail::for_each_pack<T>(
      n,
      [&](int64_t p) {
        const P g = reinterpret_cast<const P*>(gate)[p], u = reinterpret_cast<const P*>(up)[p];
        P out;
#pragma unroll
        for (int k = 0; k < kVec<T>; ++k) out.v[k] = from_f<T>(A::value(to_f(g.v[k])) * to_f(u.v[k]));
        reinterpret_cast<P*>(h)[p] = out;
      },
      [&](int64_t i) { h[i] = from_f<T>(A::value(to_f(gate[i])) * to_f(up[i])); });
}

template <class A, class T>
__global__ void backward_vec_kernel(T* dgate, T* dup, const T* dh, const T* gate, const T* up, int64_t n) {
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
          gated_grads<A>(to_f(d.v[k]), to_f(g.v[k]), to_f(u.v[k]), a, b);
          dg.v[k] = from_f<T>(a);
          du.v[k] = from_f<T>(b);
        }
        reinterpret_cast<P*>(dgate)[p] = dg;
        reinterpret_cast<P*>(dup)[p] = du;
      },
      [&](int64_t i) {
        float a, b;
        gated_grads<A>(to_f(dh[i]), to_f(gate[i]), to_f(up[i]), a, b);
        dgate[i] = from_f<T>(a);
        dup[i] = from_f<T>(b);
      });
}

}  // namespace

template <class T>
void gated_activation_forward(T* h, const T* gate, const T* up, int64_t n, Activation act, cudaStream_t stream) {
  ULY_CHECK(n >= 0, "gated_activation_forward: negative size " << n);
  if (n == 0) return;
  dispatch_activation(act, [&]<class A>() {
    if (detail::aligned16({h, gate, up})) {
      forward_vec_kernel<A, T><<<detail::grid_for(n / kVec<T> + 1), detail::kThreads, 0, stream>>>(h, gate, up, n);
      CUDA_CHECK_LAUNCH("gated_activation forward_vec_kernel");
    } else {
      forward_kernel<A, T><<<detail::grid_for(n), detail::kThreads, 0, stream>>>(h, gate, up, n);
      CUDA_CHECK_LAUNCH("gated_activation forward_kernel");
    }
  });
}

template <class T>
void gated_activation_backward(T* dgate, T* dup, const T* dh, const T* gate, const T* up, int64_t n, Activation act,
                               cudaStream_t stream) {
  ULY_CHECK(n >= 0, "gated_activation_backward: negative size " << n);
  if (n == 0) return;
  dispatch_activation(act, [&]<class A>() {
    if (detail::aligned16({dgate, dup, dh, gate, up})) {
      backward_vec_kernel<A, T>
          <<<detail::grid_for(n / kVec<T> + 1), detail::kThreads, 0, stream>>>(dgate, dup, dh, gate, up, n);
      CUDA_CHECK_LAUNCH("gated_activation backward_vec_kernel");
    } else {
      backward_kernel<A, T><<<detail::grid_for(n), detail::kThreads, 0, stream>>>(dgate, dup, dh, gate, up, n);
      CUDA_CHECK_LAUNCH("gated_activation backward_kernel");
    }
  });
}

#define ULY_INSTANTIATE(T)                                                                                      \
  template void gated_activation_forward<T>(T*, const T*, const T*, int64_t, Activation, cudaStream_t);        \
  template void gated_activation_backward<T>(T*, T*, const T*, const T*, const T*, int64_t, Activation,         \
                                             cudaStream_t);
ULY_INSTANTIATE(float)
ULY_INSTANTIATE(__nv_bfloat16)
#undef ULY_INSTANTIATE

}  // namespace ulysses::cuda
