// Whole-tensor reductions into one float64 on the device: the sum (losses,
// token counts) and the sum of squares (the global gradient norm for clipping,
// accumulated over many tensors before one read-back).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace ulysses::cuda {

// *acc += sum(x); acc: one double on the device; x: [n]. T: float, bf16 or int32.
// Per-thread partials and the cross-block adds are float64 (atomic: the order of the adds is not fixed).
template <class T>
void sum_accumulate(double* acc, const T* x, int64_t n, cudaStream_t stream);
// *acc += sum(x^2); acc: one double on the device; x: [n]. T: float or bf16.
template <class T>
void sum_squares_accumulate(double* acc, const T* x, int64_t n, cudaStream_t stream);

}  // namespace ulysses::cuda
