// Causal attention on the GPU in float32 (inputs, outputs and all arithmetic):
// the verification path of the "fp32 compute" mode, checked against float64
// references at tight tolerances. Simple warp-per-row kernels (no tensor
// cores, no atomics, deterministic), O(S) memory: no S x S matrix exists.
// Semantics are those of ulysses::cpu::attention_forward/backward
// (backend/cpu/ops.h) and of the bf16 kernels (attention.h): query i of head h
// sees keys j of kv head h / (H / Hkv) with doc_start[i] <= j <= i.
// A row with no visible key (doc_start[i] > i) gets out = 0, lse = -inf, dq = 0.
//
// All pointers are device pointers, 4-byte aligned. Supported: any head_dim
// 1 <= d <= 256; H % Hkv == 0; S < 2^31. All kernels run on `stream`.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace ulysses::cuda {

// Largest head_dim the fp32 kernels accept (each lane keeps ceil(d / 32) elements of a row in registers).
constexpr int64_t kAttentionF32MaxHeadDim = 256;

// out: [S, H, d] (write); lse: [H, S] (write), natural-log log-sum-exp of each
// row's scaled scores; q: [S, H, d]; k, v: [S, Hkv, d]; doc_start: [S] int32.
void attention_forward_f32(float* out, float* lse, const float* q, const float* k, const float* v,
                           const int32_t* doc_start, int64_t S, int64_t H, int64_t Hkv, int64_t d, double scale,
                           cudaStream_t stream);

// dq: [S, H, d], dk, dv: [S, Hkv, d] (all write, never accumulated);
// dout, out: [S, H, d]; lse: [H, S] from attention_forward_f32; workspace:
// device memory of at least attention_backward_f32_workspace_bytes(S, H, Hkv, d)
// bytes (its contents on entry do not matter).
void attention_backward_f32(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                            const float* q, const float* k, const float* v, const int32_t* doc_start, int64_t S,
                            int64_t H, int64_t Hkv, int64_t d, double scale, void* workspace, size_t workspace_bytes,
                            cudaStream_t stream);

// Workspace layout (each part starts at a multiple of 256 bytes):
//   dsum    float [H, S]   D[h, i] = dout_i . out_i
//   sufmin  int32 [S]      sufmin[i] = min over i' >= i of doc_start[i']
// total = round_up(4 * H * S, 256) + round_up(4 * S, 256) bytes (0 for S = 0).
size_t attention_backward_f32_workspace_bytes(int64_t S, int64_t H, int64_t Hkv, int64_t d);

// Block-offset forms (ring attention; semantics of ulysses::cpu::attention_forward_block):
// q, out: [Sq, H, d] are global rows q0 .., k, v: [Sk, Hkv, d] global rows k0 ..; doc_start:
// the whole row's ([>= max(q0 + Sq, k0 + Sk)]); lse: [H, Sq]. Rows with no visible key get
// out = 0, lse = -inf (forward) and dq = 0 (backward); dk, dv: [Sk, Hkv, d]. The backward's
// workspace is attention_backward_f32_workspace_bytes(Sq, H, Hkv, d).
void attention_forward_block_f32(float* out, float* lse, const float* q, const float* k, const float* v,
                                 const int32_t* doc_start, int64_t Sq, int64_t Sk, int64_t q0, int64_t k0, int64_t H,
                                 int64_t Hkv, int64_t d, double scale, cudaStream_t stream);
void attention_backward_block_f32(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                  const float* lse, const float* q, const float* k, const float* v,
                                  const int32_t* doc_start, int64_t Sq, int64_t Sk, int64_t q0, int64_t k0, int64_t H,
                                  int64_t Hkv, int64_t d, double scale, void* workspace, size_t workspace_bytes,
                                  cudaStream_t stream);

}  // namespace ulysses::cuda
