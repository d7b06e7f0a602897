// CUDA twins of cpu::gated_activation_forward/backward: h = act(gate) * up, fp32 math, one
// generic kernel per direction over the functors of core/activation.h.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/activation.h"

namespace ulysses::cuda {

// h, gate, up: [n] (h write; may alias gate or up).
template <class T>
void gated_activation_forward(T* h, const T* gate, const T* up, int64_t n, Activation act, cudaStream_t stream);
// dgate, dup: [n] (write; may alias any input); dh, gate, up: [n].
template <class T>
void gated_activation_backward(T* dgate, T* dup, const T* dh, const T* gate, const T* up, int64_t n, Activation act,
                               cudaStream_t stream);

}  // namespace ulysses::cuda
