// CUDA twins of cpu::embedding_forward/backward (see backend/cpu/ops.h).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace ulysses::cuda {

// out: [N, D] (write); ids: [N], each in [0, V) (checked by the caller; a row whose id is not
// comes out NaN); table: [V, D]. T: float or bf16.
template <class T>
void embedding_forward(T* out, const int32_t* ids, const T* table, int64_t N, int64_t V, int64_t D,
                       cudaStream_t stream);
// dtable: [V, D] fp32 (accumulate, atomics: the order of the adds is not fixed); dout: [N, D]; ids: [N]
// (a row whose id is outside [0, V) adds nothing).
template <class T>
void embedding_backward(float* dtable, const T* dout, const int32_t* ids, int64_t N, int64_t V, int64_t D,
                        cudaStream_t stream);

}  // namespace ulysses::cuda
