#include <cmath>

#include "backend/cuda/adamw.h"
#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "core/error.h"

namespace ulysses::cuda {
namespace {

struct AdamWConsts {
  float decay, beta1, beta2, step_size, bc2_sqrt, eps, grad_scale;
};

// One element's update: the CPU twin's arithmetic in fp32.
__device__ __forceinline__ float adamw_update(float& master, float& m, float& v, float grad, const AdamWConsts& c) {
  const float g = grad * c.grad_scale;
  float p = master * c.decay;
  const float mi = c.beta1 * m + (1.0f - c.beta1) * g;
  const float vi = c.beta2 * v + (1.0f - c.beta2) * g * g;
  m = mi;
  v = vi;
  p -= c.step_size * mi / (sqrtf(vi) / c.bc2_sqrt + c.eps);
  master = p;
  return p;
}

template <class W, class G>
__global__ void adamw_kernel(float* master, float* m, float* v, W* weight, const G* grad, int64_t n, AdamWConsts c) {
  ULY_GRID_STRIDE(i, n) {
    const float p = adamw_update(master[i], m[i], v[i], detail::to_f(grad[i]), c);
    if (weight != nullptr) weight[i] = detail::from_f<W>(p);
  }
}

// Four gradient elements from one wide load: 16 bytes of fp32, 8 of bf16 (a bf16 gradient buffer).
__device__ __forceinline__ float4 load4(const float* g, int64_t q) { return reinterpret_cast<const float4*>(g)[q]; }
__device__ __forceinline__ float4 load4(const __nv_bfloat16* g, int64_t q) {
  const uint2 raw = reinterpret_cast<const uint2*>(g)[q];
  const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162*>(&raw.x),
                       hi = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
  const float2 a = __bfloat1622float2(lo), b = __bfloat1622float2(hi);
  return make_float4(a.x, a.y, b.x, b.y);
}

// The same over four elements at a time (16-byte loads and stores of the fp32 state; every fp32
// pointer 16-byte aligned, the weight and the gradient 4-element aligned), then the tail: the step
// reads and writes 30 bytes a parameter, so it runs at memory speed only with wide accesses.
template <class W, class G>
__global__ void adamw_vec_kernel(float* master, float* m, float* v, W* weight, const G* grad, int64_t n,
                                 AdamWConsts c) {
  detail::for_each_pack<float>(
      n,
      [&](int64_t q) {
        float4 p = reinterpret_cast<float4*>(master)[q], mq = reinterpret_cast<float4*>(m)[q],
               vq = reinterpret_cast<float4*>(v)[q];
        const float4 g = load4(grad, q);
        adamw_update(p.x, mq.x, vq.x, g.x, c);
        adamw_update(p.y, mq.y, vq.y, g.y, c);
        adamw_update(p.z, mq.z, vq.z, g.z, c);
        adamw_update(p.w, mq.w, vq.w, g.w, c);
        reinterpret_cast<float4*>(master)[q] = p;
        reinterpret_cast<float4*>(m)[q] = mq;
        reinterpret_cast<float4*>(v)[q] = vq;
        if (weight != nullptr) {
          W* w = weight + 4 * q;
          w[0] = detail::from_f<W>(p.x);
          w[1] = detail::from_f<W>(p.y);
          w[2] = detail::from_f<W>(p.z);
          w[3] = detail::from_f<W>(p.w);
        }
      },
      [&](int64_t i) {
        const float p = adamw_update(master[i], m[i], v[i], detail::to_f(grad[i]), c);
        if (weight != nullptr) weight[i] = detail::from_f<W>(p);
      });
}

}  // namespace

template <class W, class G>
void adamw_step(float* master, float* m, float* v, W* weight, const G* grad, int64_t n, double lr, double beta1,
                double beta2, double eps, double weight_decay, int64_t step, double grad_scale, cudaStream_t stream) {
  ULY_CHECK(n >= 0, "adamw_step: negative size " << n);
  ULY_CHECK(step >= 1, "adamw_step: step must be >= 1 (1-based, for the bias corrections), got " << step);
  ULY_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1,
            "adamw_step: betas must be in [0, 1), got " << beta1 << ", " << beta2);
  if (n == 0) return;
  // The scalars as the CPU op forms them: bias corrections in float64, then rounded to fp32.
  AdamWConsts c;
  c.decay = static_cast<float>(1.0 - lr * weight_decay);
  c.beta1 = static_cast<float>(beta1);
  c.beta2 = static_cast<float>(beta2);
  c.step_size = static_cast<float>(lr / (1.0 - std::pow(beta1, static_cast<double>(step))));
  c.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(beta2, static_cast<double>(step))));
  c.eps = static_cast<float>(eps);
  c.grad_scale = static_cast<float>(grad_scale);
  if (detail::aligned16({master, m, v}) && reinterpret_cast<uintptr_t>(grad) % (4 * sizeof(G)) == 0 &&
      reinterpret_cast<uintptr_t>(weight) % (4 * sizeof(W)) == 0) {
    adamw_vec_kernel<W, G><<<detail::grid_for(n / 4 + 1), detail::kThreads, 0, stream>>>(master, m, v, weight, grad, n, c);
    CUDA_CHECK_LAUNCH("adamw_vec_kernel");
    return;
  }
  adamw_kernel<W, G><<<detail::grid_for(n), detail::kThreads, 0, stream>>>(master, m, v, weight, grad, n, c);
  CUDA_CHECK_LAUNCH("adamw_kernel");
}

using bf16 = __nv_bfloat16;
template void adamw_step<bf16, float>(float*, float*, float*, bf16*, const float*, int64_t, double, double, double,
                                      double, double, int64_t, double, cudaStream_t);
template void adamw_step<float, float>(float*, float*, float*, float*, const float*, int64_t, double, double, double,
                                       double, double, int64_t, double, cudaStream_t);
template void adamw_step<bf16, bf16>(float*, float*, float*, bf16*, const bf16*, int64_t, double, double, double,
                                     double, double, int64_t, double, cudaStream_t);
template void adamw_step<float, bf16>(float*, float*, float*, float*, const bf16*, int64_t, double, double, double,
                                      double, double, int64_t, double, cudaStream_t);

}  // namespace ulysses::cuda
