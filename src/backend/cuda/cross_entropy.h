// CUDA twin of cpu::cross_entropy_forward_backward over one tile of logits:
// one block per row, fp32 online max/sum.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace ulysses::cuda {

// logits, dlogits: [N, V] (dlogits write, may alias logits); targets: [N], -100 = ignored, others in [0, V)
// (checked by the caller); losses: [N] fp32 (write) -log softmax(logits)[target], 0 for ignored rows;
// dlogits = (softmax - onehot(target)) * grad_scale, zero rows for ignored targets. T: float or bf16.
template <class T>
void cross_entropy_forward_backward(T* dlogits, float* losses, const T* logits, const int32_t* targets, int64_t N,
                                    int64_t V, double grad_scale, cudaStream_t stream);

}  // namespace ulysses::cuda
