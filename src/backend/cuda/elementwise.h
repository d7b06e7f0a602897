// Element-wise CUDA ops: add, axpy (cpu twins in backend/cpu/ops.h), casts
// between the stored float types, in-place scaling (gradient clipping), and the random
// initialisation's counter-based values.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace ulysses::cuda {

// y = a + b (y may alias either); n elements. T: float or bf16.
template <class T>
void add(T* y, const T* a, const T* b, int64_t n, cudaStream_t stream);
// y += alpha * x; n elements; TY, TX: float or bf16 in any combination (fp32 math).
template <class TY, class TX>
void axpy(TY* y, const TX* x, double alpha, int64_t n, cudaStream_t stream);
// dst = src converted (bf16 rounding: nearest even, as core/dtype.h float_to_bf16); n elements.
// (To, From): (float, bf16), (bf16, float), (float, float), (bf16, bf16).
template <class To, class From>
void cast(To* dst, const From* src, int64_t n, cudaStream_t stream);
// x[i] = counter_uniform(seed, stream, first + i, bound) rounded to T (nearest even); n elements.
template <class T>
void init_uniform(T* x, uint64_t seed, uint64_t stream, int64_t first, float bound, int64_t n, cudaStream_t s);
// x *= alpha in place; n elements. T: float or bf16.
template <class T>
void scale(T* x, double alpha, int64_t n, cudaStream_t stream);

}  // namespace ulysses::cuda
