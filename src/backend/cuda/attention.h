// Fused causal attention on the GPU (FlashAttention-2 style): GQA and packed
// documents, bf16 in and out, fp32 accumulation and softmax. Semantics are
// those of ulysses::cpu::attention_forward/backward (backend/cpu/ops.h):
// query i sees keys j with doc_start[i] <= j <= i. See docs/attention.md.
//
// All pointers are device pointers, 16-byte aligned (cudaMalloc gives 256).
// Supported head_dim d: 16, 32, 64, 128; H % Hkv == 0; S < 2^31.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace ulysses::cuda {

// out: [S, H, d] (write); lse: [H, S] float32 (write), natural-log
// log-sum-exp of each row's scaled scores; q: [S, H, d]; k, v: [S, Hkv, d];
// doc_start: [S] int32.
void attention_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                       const __nv_bfloat16* v, const int32_t* doc_start, int64_t S, int64_t H, int64_t Hkv,
                       int64_t d, double scale, cudaStream_t stream);

// dq: [S, H, d], dk, dv: [S, Hkv, d] (all write); dout, out: [S, H, d];
// lse: [H, S] from attention_forward; workspace: device memory of at least
// attention_backward_workspace_bytes(S, H, Hkv, d) bytes (its contents on
// entry do not matter; layout in docs/attention.md).
void attention_backward(__nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, const __nv_bfloat16* dout,
                        const __nv_bfloat16* out, const float* lse, const __nv_bfloat16* q,
                        const __nv_bfloat16* k, const __nv_bfloat16* v, const int32_t* doc_start, int64_t S,
                        int64_t H, int64_t Hkv, int64_t d, double scale, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream);

size_t attention_backward_workspace_bytes(int64_t S, int64_t H, int64_t Hkv, int64_t d);

// Block-offset forms (ring attention; semantics of ulysses::cpu::attention_forward_block and
// attention_backward_block): q, out, dout, dq: [Sq, H, d] are global rows q0 ..; k, v, dk, dv:
// [Sk, Hkv, d] global rows k0 ..; doc_start: the whole row's; lse: [H, Sq] (for the backward,
// the rows' merged lse over all their keys). A row that sees no key of the block gets out = 0
// and lse = -inf. The backward's workspace is attention_backward_workspace_bytes(Sq, H, Hkv, d).
void attention_forward_block(__nv_bfloat16* out, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                             const __nv_bfloat16* v, const int32_t* doc_start, int64_t Sq, int64_t Sk, int64_t q0,
                             int64_t k0, int64_t H, int64_t Hkv, int64_t d, double scale, cudaStream_t stream);
void attention_backward_block(__nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, const __nv_bfloat16* dout,
                              const __nv_bfloat16* out, const float* lse, const __nv_bfloat16* q,
                              const __nv_bfloat16* k, const __nv_bfloat16* v, const int32_t* doc_start, int64_t Sq,
                              int64_t Sk, int64_t q0, int64_t k0, int64_t H, int64_t Hkv, int64_t d, double scale,
                              void* workspace, size_t workspace_bytes, cudaStream_t stream);

// Log-sum-exp merge of a block's out: [S, H, d] (bf16) and lse: [H, S] into acc: [S, H, d] and
// acc_lse: [H, S] (float32; acc_lse = -inf: empty row), as ulysses::cpu::attention_merge.
void attention_merge(float* acc, float* acc_lse, const __nv_bfloat16* out, const float* lse, int64_t S, int64_t H,
                     int64_t d, cudaStream_t stream);
void attention_merge(float* acc, float* acc_lse, const float* out, const float* lse, int64_t S, int64_t H,
                     int64_t d, cudaStream_t stream);

}  // namespace ulysses::cuda
