// CUDA twin of cpu::copy_heads: moves a range of heads between [N, H, d]
// layouts (the packing around the Ulysses all-to-alls).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace ulysses::cuda {

// dst: [N, Hd, d], src: [N, Hs, d]: dst[:, dst_head0 + i] = (or += when accumulate) src[:, src_head0 + i],
// i < n_heads. dst and src must not overlap. T: float or bf16 (accumulation in fp32, rounded once).
template <class T>
void copy_heads(T* dst, int64_t Hd, int64_t dst_head0, const T* src, int64_t Hs, int64_t src_head0, int64_t n_heads,
                int64_t N, int64_t d, bool accumulate, cudaStream_t stream);

}  // namespace ulysses::cuda
