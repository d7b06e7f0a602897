// AdamW on fp32 master weights (PyTorch's torch.optim.AdamW semantics), with
// the compute copy of the weights written out in the same pass.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace ulysses::cuda {

struct AdamWParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  int64_t step = 1;         // 1-based step count, for the bias corrections
  double grad_scale = 1.0;  // multiplies grad first (gradient clipping or loss-scale undo)
};

// With g = grad * grad_scale:
//   master *= 1 - lr * weight_decay
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   master -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
//   weight = master (rounded to W), when weight is not null.
// master, m, v, grad: [n] fp32 (grad read-only); weight: [n] W = bf16 or float, or nullptr.
template <class W>
void adamw_step(float* master, float* m, float* v, W* weight, const float* grad, int64_t n, const AdamWParams& p,
                cudaStream_t stream);

}  // namespace ulysses::cuda
