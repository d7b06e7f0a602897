// CUDA twin of cpu::adamw_step (torch.optim.AdamW) on fp32 master weights,
// writing the compute copy of the weights in the same pass.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace ulysses::cuda {

// With g = grad * grad_scale (the same operation order as the CPU op, in fp32):
//   master *= 1 - lr * weight_decay
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   master -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
//   weight = master (rounded to W), unless weight is null.
// master, m, v: [n] fp32 (update); grad: [n] G = fp32 or bf16 (a bf16 gradient buffer, read into fp32);
// weight: [n] W = bf16 or float (write; may alias master when W is float), or nullptr. step is 1-based.
template <class W, class G>
void adamw_step(float* master, float* m, float* v, W* weight, const G* grad, int64_t n, double lr, double beta1,
                double beta2, double eps, double weight_decay, int64_t step, double grad_scale, cudaStream_t stream);

}  // namespace ulysses::cuda
