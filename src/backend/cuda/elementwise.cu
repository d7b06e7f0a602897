#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "core/counter_uniform.h"
#include "core/error.h"
#include "backend/cuda/elementwise.h"

namespace ulysses::cuda {
namespace {

using detail::from_f;
using detail::to_f;
using detail::kVec;
using detail::Pack;

template <class T>
__global__ void add_kernel(T* y, const T* a, const T* b, int64_t n) {
  ULY_GRID_STRIDE(i, n) y[i] = from_f<T>(to_f(a[i]) + to_f(b[i]));
}

// The same over 16-byte packs (every pointer 16-byte aligned), then the tail of n % kVec elements:
// bf16 rows move at several times the rate of 2-byte loads.
template <class T>
__global__ void add_vec_kernel(T* y, const T* a, const T* b, int64_t n) {
  using P = Pack<T>;
  detail::for_each_pack<T>(
      n,
      [&](int64_t p) {
        const P x = reinterpret_cast<const P*>(a)[p], z = reinterpret_cast<const P*>(b)[p];
        P out;
#pragma unroll
        for (int k = 0; k < kVec<T>; ++k) out.v[k] = from_f<T>(to_f(x.v[k]) + to_f(z.v[k]));
        reinterpret_cast<P*>(y)[p] = out;
      },
      [&](int64_t i) { y[i] = from_f<T>(to_f(a[i]) + to_f(b[i])); });
}

template <class TY, class TX>
__global__ void axpy_kernel(TY* y, const TX* x, float alpha, int64_t n) {
  ULY_GRID_STRIDE(i, n) y[i] = from_f<TY>(to_f(y[i]) + alpha * to_f(x[i]));
}

template <class T>
__global__ void init_uniform_kernel(T* x, uint64_t seed, uint64_t stream, int64_t first, float bound, int64_t n) {
  ULY_GRID_STRIDE(i, n) x[i] = from_f<T>(counter_uniform(seed, stream, static_cast<uint64_t>(first + i), bound));
}

template <class To, class From>
__global__ void cast_kernel(To* dst, const From* src, int64_t n) {
  ULY_GRID_STRIDE(i, n) dst[i] = from_f<To>(to_f(src[i]));
}

template <class T>
__global__ void scale_kernel(T* x, float alpha, int64_t n) {
  ULY_GRID_STRIDE(i, n) x[i] = from_f<T>(to_f(x[i]) * alpha);
}

}  // namespace

template <class T>
void add(T* y, const T* a, const T* b, int64_t n, cudaStream_t stream) {
  ULY_CHECK(n >= 0, "add: negative size " << n);
  if (n == 0) return;
  if (detail::aligned16({y, a, b})) {
    add_vec_kernel<T><<<detail::grid_for(n / kVec<T> + 1), detail::kThreads, 0, stream>>>(y, a, b, n);
    CUDA_CHECK_LAUNCH("add_vec_kernel");
    return;
  }
  add_kernel<T><<<detail::grid_for(n), detail::kThreads, 0, stream>>>(y, a, b, n);
  CUDA_CHECK_LAUNCH("add_kernel");
}

template <class TY, class TX>
void axpy(TY* y, const TX* x, double alpha, int64_t n, cudaStream_t stream) {
  ULY_CHECK(n >= 0, "axpy: negative size " << n);
  if (n == 0) return;
  axpy_kernel<TY, TX><<<detail::grid_for(n), detail::kThreads, 0, stream>>>(y, x, static_cast<float>(alpha), n);
  CUDA_CHECK_LAUNCH("axpy_kernel");
}

template <class To, class From>
void cast(To* dst, const From* src, int64_t n, cudaStream_t stream) {
  ULY_CHECK(n >= 0, "cast: negative size " << n);
  if (n == 0) return;
  cast_kernel<To, From><<<detail::grid_for(n), detail::kThreads, 0, stream>>>(dst, src, n);
  CUDA_CHECK_LAUNCH("cast_kernel");
}

template <class T>
void scale(T* x, double alpha, int64_t n, cudaStream_t stream) {
  ULY_CHECK(n >= 0, "scale: negative size " << n);
  if (n == 0) return;
  scale_kernel<T><<<detail::grid_for(n), detail::kThreads, 0, stream>>>(x, static_cast<float>(alpha), n);
  CUDA_CHECK_LAUNCH("scale_kernel");
}

template <class T>
void init_uniform(T* x, uint64_t seed, uint64_t stream, int64_t first, float bound, int64_t n, cudaStream_t s) {
  ULY_CHECK(n >= 0, "init_uniform: negative size " << n);
  if (n == 0) return;
  init_uniform_kernel<T><<<detail::grid_for(n), detail::kThreads, 0, s>>>(x, seed, stream, first, bound, n);
  CUDA_CHECK_LAUNCH("init_uniform_kernel");
}

using bf16 = __nv_bfloat16;
template void init_uniform<float>(float*, uint64_t, uint64_t, int64_t, float, int64_t, cudaStream_t);
template void init_uniform<bf16>(bf16*, uint64_t, uint64_t, int64_t, float, int64_t, cudaStream_t);
template void add<float>(float*, const float*, const float*, int64_t, cudaStream_t);
template void add<bf16>(bf16*, const bf16*, const bf16*, int64_t, cudaStream_t);
template void axpy<float, float>(float*, const float*, double, int64_t, cudaStream_t);
template void axpy<float, bf16>(float*, const bf16*, double, int64_t, cudaStream_t);
template void axpy<bf16, float>(bf16*, const float*, double, int64_t, cudaStream_t);
template void axpy<bf16, bf16>(bf16*, const bf16*, double, int64_t, cudaStream_t);
template void cast<float, bf16>(float*, const bf16*, int64_t, cudaStream_t);
template void cast<bf16, float>(bf16*, const float*, int64_t, cudaStream_t);
template void cast<float, float>(float*, const float*, int64_t, cudaStream_t);
template void cast<bf16, bf16>(bf16*, const bf16*, int64_t, cudaStream_t);
template void scale<float>(float*, double, int64_t, cudaStream_t);
template void scale<bf16>(bf16*, double, int64_t, cudaStream_t);

}  // namespace ulysses::cuda
