// Small kernels around cuDNN's variable-length attention: the per-document
// ragged offsets and lengths from the document boundaries, and the softmax
// statistics moved between cuDNN's token-major layout and ours.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace ulysses::cuda {

// From bounds [count + 1] (0 = b_0 < ... < b_count = S, int32) for batch slots
// b < batch (batch >= count; slots past count are empty documents at S):
//   offsets_q[b] = b_b * H * d, offsets_kv[b] = b_b * Hkv * d, offsets_stats[b] = b_b * H (b <= batch),
//   seq_len[b] = b_{b+1} - b_b (b < batch).
// Offsets: int32 or int64 (Offset), element offsets as cuDNN's ragged tensors take them.
template <class Offset>
void ragged_offsets(Offset* offsets_q, Offset* offsets_kv, Offset* offsets_stats, int32_t* seq_len,
                    const int32_t* bounds, int64_t count, int64_t batch, int64_t H, int64_t Hkv, int64_t d,
                    cudaStream_t stream);

// lse [H, S] <-> stats [batch, H, seq] (one row per document, padded to seq rows; document b
// holds tokens [bounds[b], bounds[b + 1]) of the row). Padded rows are not touched.
void padded_stats_to_lse(float* lse, const float* stats, const int32_t* bounds, int64_t count, int64_t H, int64_t seq,
                         int64_t S, cudaStream_t stream);
void lse_to_padded_stats(float* stats, const float* lse, const int32_t* bounds, int64_t count, int64_t H, int64_t seq,
                         int64_t S, cudaStream_t stream);

// dst[c, r] = src[r, c]: src [rows, cols] float32 -> dst [cols, rows] (the lse [S, H] <-> [H, S]).
void transpose_f32(float* dst, const float* src, int64_t rows, int64_t cols, cudaStream_t stream);

}  // namespace ulysses::cuda
