// CUDA twins of cpu::rmsnorm_forward/backward: y = w * x / sqrt(mean(x^2) + eps), fp32 math.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace ulysses::cuda {

// y: [N, D] (write, may alias x); rstd: [N] fp32 (write); x: [N, D]; w: [D]. T: float or bf16.
template <class T>
void rmsnorm_forward(T* y, float* rstd, const T* x, const T* w, int64_t N, int64_t D, double eps,
                     cudaStream_t stream);
// dx: [N, D] (write, may alias dy; with accumulate_dx dx += the gradient, summed in fp32 and rounded
// once); dw: [D] fp32 (accumulate); dy, x: [N, D]; w: [D]; rstd: [N] from forward.
template <class T>
void rmsnorm_backward(T* dx, float* dw, const T* dy, const T* x, const T* w, const float* rstd, int64_t N, int64_t D,
                      cudaStream_t stream, bool accumulate_dx = false);

}  // namespace ulysses::cuda
