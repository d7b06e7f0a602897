// CUDA twins of cpu::swiglu_forward/backward: h = silu(gate) * up, fp32 math.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace ulysses::cuda {

// h, gate, up: [N, F] (h write; may alias gate or up).
template <class T>
void swiglu_forward(T* h, const T* gate, const T* up, int64_t N, int64_t F, cudaStream_t stream);
// dgate, dup: [N, F] (write; may alias any input); dh, gate, up: [N, F].
template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dh, const T* gate, const T* up, int64_t N, int64_t F,
                     cudaStream_t stream);

}  // namespace ulysses::cuda
