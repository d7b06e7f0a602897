// CUDA twins of cpu::bias_add / bias_backward: a linear layer's bias, fp32 math.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace ulysses::cuda {

// y: [N, n] += b: [n] on every row.
template <class T>
void bias_add(T* y, const T* b, int64_t N, int64_t n, cudaStream_t stream);
// db: [n] float32 += the sum of dy: [N, n] over the rows; deterministic (one block owns each
// column tile and sums its rows in a fixed order: no atomics).
template <class T>
void bias_backward(float* db, const T* dy, int64_t N, int64_t n, cudaStream_t stream);

}  // namespace ulysses::cuda
