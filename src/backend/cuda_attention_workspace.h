// Size of the CUDA attention backward's workspace (layout documented in
// backend/cuda/attention_backward.cu), in plain C++ so that the memory planner
// counts it in builds without CUDA too. attention_backward.cu checks at
// compile time that these tiles are the kernels' own.
#pragma once
#include <cstddef>
#include <cstdint>

namespace ulysses {

// Query rows per backward tile for head size d (the kernels' BwdConfig<d>::BR).
constexpr int cuda_attention_bwd_query_tile(int64_t d) { return d == 128 ? 32 : 64; }

// dq accumulator [S, H, d] f32, D [H, S] f32, two int32 [ceil(S / BR)], the dQ order counters int32
// [H, ceil(S / 64), 2], each 256-byte aligned.
constexpr size_t cuda_attention_backward_workspace_bytes(int64_t S, int64_t H, int64_t d) {
  auto align = [](size_t x) { return (x + 255) / 256 * 256; };
  const size_t nqb = static_cast<size_t>((S + cuda_attention_bwd_query_tile(d) - 1) / cuda_attention_bwd_query_tile(d));
  return align(size_t(S) * size_t(H) * size_t(d) * 4) + align(size_t(H) * size_t(S) * 4) + 2 * align(nqb * 4) +
         align(size_t(H) * size_t((S + 63) / 64) * 2 * 4);
}

// The float32 kernels (attention_fp32.cu): D [H, S] f32, then the suffix
// minimum of doc_start [S] int32, each 256-byte aligned; nothing when S == 0.
constexpr size_t cuda_attention_f32_backward_workspace_bytes(int64_t S, int64_t H) {
  auto align = [](size_t x) { return (x + 255) / 256 * 256; };
  return S == 0 ? 0 : align(size_t(H) * size_t(S) * 4) + align(size_t(S) * 4);
}

}  // namespace ulysses
