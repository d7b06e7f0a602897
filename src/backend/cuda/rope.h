// CUDA twins of cpu::rope_forward/backward (Hugging Face rotate_half layout).
// The angle is float(pos) * inv_freq[i] rounded in fp32, with precise sinf/cosf,
// as the CPU op and transformers compute it.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace ulysses::cuda {

// out, x: [N, H, d] (out may alias x); pos: [N] global positions; inv_freq: [d/2] fp32 (device). d even.
template <class T>
void rope_forward(T* out, const T* x, const int32_t* pos, const float* inv_freq, int64_t N, int64_t H, int64_t d,
                  cudaStream_t stream);
// Rotation by -angle. dx, dout: [N, H, d] (dx may alias dout).
template <class T>
void rope_backward(T* dx, const T* dout, const int32_t* pos, const float* inv_freq, int64_t N, int64_t H, int64_t d,
                   cudaStream_t stream);

}  // namespace ulysses::cuda
