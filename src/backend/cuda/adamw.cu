#include <cmath>

#include "backend/cuda/adamw.h"
#include "backend/cuda/check.h"
#include "backend/cuda/common.cuh"
#include "core/error.h"

namespace ulysses::cuda {
namespace {

struct AdamWConsts {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps, decay, step_size, inv_sqrt_bc2, grad_scale;
};

template <class W>
__global__ void adamw_kernel(float* master, float* m, float* v, W* weight, const float* grad, int64_t n, AdamWConsts c) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = grad[i] * c.grad_scale;
    const float mi = c.beta1 * m[i] + c.one_minus_beta1 * g;
    const float vi = c.beta2 * v[i] + c.one_minus_beta2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float denom = sqrtf(vi) * c.inv_sqrt_bc2 + c.eps;
    const float p = master[i] * c.decay - c.step_size * mi / denom;
    master[i] = p;
    if (weight != nullptr) weight[i] = detail::from_f<W>(p);
  }
}

}  // namespace

template <class W>
void adamw_step(float* master, float* m, float* v, W* weight, const float* grad, int64_t n, const AdamWParams& p,
                cudaStream_t stream) {
  ULY_CHECK(n >= 0, "adamw_step: negative size " << n);
  ULY_CHECK(p.step >= 1, "adamw_step: step must be >= 1 (1-based, for the bias corrections), got " << p.step);
  ULY_CHECK(p.beta1 >= 0 && p.beta1 < 1 && p.beta2 >= 0 && p.beta2 < 1,
            "adamw_step: betas must be in [0, 1), got " << p.beta1 << ", " << p.beta2);
  if (n == 0) return;
  // Bias corrections in float64 on the host: beta2^step underflows float32 math less gracefully.
  const double bc1 = 1.0 - std::pow(p.beta1, static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(p.beta2, static_cast<double>(p.step));
  AdamWConsts c;
  c.beta1 = static_cast<float>(p.beta1);
  c.beta2 = static_cast<float>(p.beta2);
  c.one_minus_beta1 = static_cast<float>(1.0 - p.beta1);
  c.one_minus_beta2 = static_cast<float>(1.0 - p.beta2);
  c.eps = static_cast<float>(p.eps);
  c.decay = static_cast<float>(1.0 - p.lr * p.weight_decay);
  c.step_size = static_cast<float>(p.lr / bc1);
  c.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  c.grad_scale = static_cast<float>(p.grad_scale);
  adamw_kernel<W><<<detail::grid_for(n), detail::kThreads, 0, stream>>>(master, m, v, weight, grad, n, c);
  CUDA_CHECK_LAUNCH("adamw_kernel");
}

template void adamw_step<__nv_bfloat16>(float*, float*, float*, __nv_bfloat16*, const float*, int64_t,
                                        const AdamWParams&, cudaStream_t);
template void adamw_step<float>(float*, float*, float*, float*, const float*, int64_t, const AdamWParams&,
                                cudaStream_t);

}  // namespace ulysses::cuda
