#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cross_entropy.h"
#include "backend/cuda/launch.h"

namespace ulysses::cuda {
namespace {

using detail::from_f;
using detail::to_f;
using detail::kVec;
using detail::Pack;

constexpr int kIgnore = -100;

// Aliasing: every thread writes dlogits[j] only for the j it read in pass 1
// (same stride mapping), and the target logit is read before the first
// barrier, so dlogits may be the logits buffer.
template <class T>
__global__ void cross_entropy_kernel(T* dlogits, float* losses, const T* logits, const int32_t* targets, int64_t V,
                                     float grad_scale) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int32_t t = targets[row];
  const T* x = logits + row * V;
  T* dx = dlogits + row * V;
  if (t == kIgnore) {
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) dx[j] = from_f<T>(0.f);
    if (threadIdx.x == 0) losses[row] = 0.f;
    return;
  }
  if (t < 0 || t >= V) {  // the caller validates; never read out of bounds, make it loud instead
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) dx[j] = from_f<T>(NAN);
    if (threadIdx.x == 0) losses[row] = NAN;
    return;
  }
  const float x_target = threadIdx.x == 0 ? to_f(x[t]) : 0.f;
  // Online max and rescaled sum of exponentials per thread. A NaN logit is noted apart: the
  // max skips it, and a thread that saw nothing else would drop it from the sum.
  float m = -INFINITY, s = 0.f;
  bool nan_seen = false;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    const float v = to_f(x[j]);
    nan_seen |= v != v;
    if (v > m) {
      s = s * expf(m - v) + 1.f;
      m = v;
    } else {
      s += expf(v - m);
    }
  }
  const float M = detail::block_max(m, scratch);
  // A NaN anywhere makes the sum NaN: the loss and every gradient of the row are NaN, for the
  // non-finite policy, never a finite number.
  const float S = detail::block_sum((m == -INFINITY ? 0.f : s * expf(m - M)) + (nan_seen ? NAN : 0.f), scratch);
  // (M - x_target) first: at |M| ~ 1e30, logf(S) + M rounds to M and the loss came out 0
  // where ln V is right (the CPU reference does the same).
  if (threadIdx.x == 0) losses[row] = logf(S) + (M - x_target);
  const float inv_s = 1.f / S;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    const float p = expf(to_f(x[j]) - M) * inv_s;
    dx[j] = from_f<T>((p - (j == t ? 1.f : 0.f)) * grad_scale);
  }
}

// The vectorised form, for rows that split into 16-byte packs (V a multiple of kVec, 16-byte
// aligned buffers): each thread folds a whole pack into its running max and sum at once (one
// rescale per pack), then writes the gradient a pack at a time. Same aliasing rule as above.
template <class T>
__global__ void cross_entropy_vec_kernel(T* dlogits, float* losses, const T* logits, const int32_t* targets, int64_t V,
                                         float grad_scale) {
  using P = Pack<T>;
  constexpr int W = kVec<T>;
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x, packs = V / W;
  const int32_t t = targets[row];
  const P* x = reinterpret_cast<const P*>(logits + row * V);
  P* dx = reinterpret_cast<P*>(dlogits + row * V);
  if (t == kIgnore || t < 0 || t >= V) {  // ignored: zeros; out of range (the caller validates): NaN, loudly
    const float fill = t == kIgnore ? 0.f : NAN;
    P f;
#pragma unroll
    for (int k = 0; k < W; ++k) f.v[k] = from_f<T>(fill);
    for (int64_t j = threadIdx.x; j < packs; j += blockDim.x) dx[j] = f;
    if (threadIdx.x == 0) losses[row] = fill;
    return;
  }
  const float x_target = threadIdx.x == 0 ? to_f(logits[row * V + t]) : 0.f;
  float m = -INFINITY, s = 0.f;
  bool nan_seen = false;  // as in the scalar kernel
  for (int64_t j = threadIdx.x; j < packs; j += blockDim.x) {
    const P p = x[j];
    float v[W], pm = -INFINITY;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      v[k] = to_f(p.v[k]);
      nan_seen |= v[k] != v[k];
      pm = fmaxf(pm, v[k]);
    }
    if (pm == -INFINITY) continue;  // a pack of -inf adds nothing
    const float nm = fmaxf(m, pm);
    float add = 0.f;
#pragma unroll
    for (int k = 0; k < W; ++k) add += expf(v[k] - nm);
    s = (m == -INFINITY ? 0.f : s * expf(m - nm)) + add;
    m = nm;
  }
  const float M = detail::block_max(m, scratch);
  // A NaN anywhere makes the sum NaN: the loss and every gradient of the row are NaN, for the
  // non-finite policy, never a finite number.
  const float S = detail::block_sum((m == -INFINITY ? 0.f : s * expf(m - M)) + (nan_seen ? NAN : 0.f), scratch);
  // (M - x_target) first: at |M| ~ 1e30, logf(S) + M rounds to M and the loss came out 0
  // where ln V is right (the CPU reference does the same).
  if (threadIdx.x == 0) losses[row] = logf(S) + (M - x_target);
  const float inv_s = 1.f / S;
  for (int64_t j = threadIdx.x; j < packs; j += blockDim.x) {
    const P p = x[j];
    P out;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float q = expf(to_f(p.v[k]) - M) * inv_s;
      out.v[k] = from_f<T>((q - (j * W + k == t ? 1.f : 0.f)) * grad_scale);
    }
    dx[j] = out;
  }
}

}  // namespace

template <class T>
void cross_entropy_forward_backward(T* dlogits, float* losses, const T* logits, const int32_t* targets, int64_t N,
                                    int64_t V, double grad_scale, cudaStream_t stream) {
  detail::check_rows(N, "cross_entropy_forward_backward");
  ULY_CHECK(V > 0 || N == 0, "cross_entropy_forward_backward: vocabulary size V must be positive, got " << V);
  if (N == 0) return;
  const int threads = V >= 1024 ? 1024 : detail::row_threads(V);
  if (V % kVec<T> == 0 && detail::aligned16({dlogits, logits})) {
    const int vthreads = V / kVec<T> >= 1024 ? 1024 : detail::row_threads(V / kVec<T>);
    cross_entropy_vec_kernel<T><<<static_cast<unsigned>(N), vthreads, 0, stream>>>(
        dlogits, losses, logits, targets, V, static_cast<float>(grad_scale));
    CUDA_CHECK_LAUNCH("cross_entropy_vec_kernel");
    return;
  }
  cross_entropy_kernel<T><<<static_cast<unsigned>(N), threads, 0, stream>>>(dlogits, losses, logits, targets, V,
                                                                           static_cast<float>(grad_scale));
  CUDA_CHECK_LAUNCH("cross_entropy_kernel");
}

template void cross_entropy_forward_backward<float>(float*, float*, const float*, const int32_t*, int64_t, int64_t,
                                                    double, cudaStream_t);
template void cross_entropy_forward_backward<__nv_bfloat16>(__nv_bfloat16*, float*, const __nv_bfloat16*,
                                                            const int32_t*, int64_t, int64_t, double, cudaStream_t);

}  // namespace ulysses::cuda
